/*
 * The kernel's embeddable JSON (kafkafs/format/jsonembed.py is the definition): string and number
 * tokens, and one walk that validates a value (noting whether it holds whitespace to take out) or
 * writes its compact form, into _kernel_text.h's output buffer.
 */
#ifndef KAFKAFS_KERNEL_JSON_H
#define KAFKAFS_KERNEL_JSON_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_text.h"

/* ------------------------------------------------------------------------------------ JSON */

static inline int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static inline int hex4(const uint8_t *s, Py_ssize_t i, Py_ssize_t n, int *out) {
    if (i + 4 > n) return 0;
    int v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = s[i + k];
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        v = (v << 4) | d;
    }
    *out = v;
    return 1;
}


/* The end of the string token starting at s[i] == '"', or -1 when it is not a valid string. */
static inline __attribute__((always_inline)) Py_ssize_t scan_string(const uint8_t *s, Py_ssize_t i,
                                                                   Py_ssize_t n) {
    i++;
    while (i < n) {
#ifdef KAFKAFS_SWAR
        i = skip_plain(s, i, n);
        if (i >= n) break;
#endif
        uint8_t c = s[i];
        if (c == '"') return i + 1;
        if (c < 0x20) return -1;
        if (c != '\\') {
            i++;
            continue;
        }
        if (i + 1 >= n) return -1;
        uint8_t e = s[i + 1];
        if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
            i += 2;
            continue;
        }
        if (e != 'u') return -1;
        int code;
        if (!hex4(s, i + 2, n, &code)) return -1;
        i += 6;
        if (code >= 0xDC00 && code <= 0xDFFF) return -1; /* a low half with no high half before it */
        if (code >= 0xD800 && code <= 0xDBFF) {
            int low;
            if (i + 1 >= n || s[i] != '\\' || s[i + 1] != 'u' || !hex4(s, i + 2, n, &low)) return -1;
            if (low < 0xDC00 || low > 0xDFFF) return -1;
            i += 6;
        }
    }
    return -1;
}

/* The end of the number token at s[i], or -1 when no number grammar matches there completely. */
static inline __attribute__((always_inline)) Py_ssize_t scan_number(const uint8_t *s, Py_ssize_t i,
                                                                   Py_ssize_t n) {
    if (i < n && s[i] == '-') i++;
    if (i >= n) return -1;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && is_digit(s[i])) i++;
    } else {
        return -1;
    }
    if (i < n && s[i] == '.') {
        if (i + 1 >= n || !is_digit(s[i + 1])) return -1; /* "1." : the '.' starts no token */
        i += 2;
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        Py_ssize_t j = i + 1;
        if (j < n && (s[j] == '+' || s[j] == '-')) j++;
        if (j >= n || !is_digit(s[j])) return -1; /* "1e" : the 'e' starts no token */
        while (j < n && is_digit(s[j])) j++;
        i = j;
    }
    return i;
}

enum { S_VALUE, S_VALUE_OR_CLOSE, S_KEY, S_KEY_OR_CLOSE, S_COLON, S_COMMA_OR_CLOSE, S_DONE };

/* Walks embeddable JSON (jsonembed.py's definition; valid UTF-8 already checked): returns 1 when
 * s[0:n] is embeddable, else 0. With write, its compact form goes to o (after a 0, part of it may
 * have been written: the caller rewinds; -1 when out of memory); without, nothing is written and
 * *spaced says whether any whitespace lies outside its strings (when not, the bytes are compact). */
static inline __attribute__((always_inline)) int json_walk(Out *o, const uint8_t *s, Py_ssize_t n, const int write,
                                                           int *spaced) {
    uint8_t stack[MAX_DEPTH];
    int depth = 0;
    int state = S_VALUE;
    Py_ssize_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    if (i >= n || (s[i] != '{' && s[i] != '[')) return 0;
    if (i) *spaced = 1;
    for (;;) {
        if (i < n && is_ws(s[i])) {
            *spaced = 1;
            while (i < n && is_ws(s[i])) i++;
        }
        if (i >= n) return state == S_DONE;
        if (state == S_DONE) return 0;
        uint8_t c = s[i];
        switch (c) {
            case '{':
            case '[':
                if (state != S_VALUE && state != S_VALUE_OR_CLOSE) return 0;
                if (depth == MAX_DEPTH) return 0;
                stack[depth++] = c;
                state = c == '{' ? S_KEY_OR_CLOSE : S_VALUE_OR_CLOSE;
                if (write && out_byte(o, (char)c) < 0) return -1;
                i++;
                break;
            case '}':
            case ']': {
                uint8_t opener = c == '}' ? '{' : '[';
                if (depth == 0 || stack[depth - 1] != opener) return 0;
                if (!(state == S_COMMA_OR_CLOSE || (c == '}' && state == S_KEY_OR_CLOSE) ||
                      (c == ']' && state == S_VALUE_OR_CLOSE)))
                    return 0;
                depth--;
                state = depth ? S_COMMA_OR_CLOSE : S_DONE;
                if (write && out_byte(o, (char)c) < 0) return -1;
                i++;
                break;
            }
            case ',':
                if (state != S_COMMA_OR_CLOSE) return 0;
                state = stack[depth - 1] == '{' ? S_KEY : S_VALUE;
                if (write && out_byte(o, ',') < 0) return -1;
                i++;
                break;
            case ':':
                if (state != S_COLON) return 0;
                state = S_VALUE;
                if (write && out_byte(o, ':') < 0) return -1;
                i++;
                break;
            case '"': {
                Py_ssize_t end = scan_string(s, i, n);
                if (end < 0) return 0;
                if (state == S_KEY || state == S_KEY_OR_CLOSE) state = S_COLON;
                else if (state == S_VALUE || state == S_VALUE_OR_CLOSE) state = S_COMMA_OR_CLOSE;
                else return 0;
                if (write && out_write(o, s + i, end - i) < 0) return -1;
                i = end;
                break;
            }
            default: {
                if (state != S_VALUE && state != S_VALUE_OR_CLOSE) return 0;
                Py_ssize_t end;
                if (c == '-' || is_digit(c)) {
                    end = scan_number(s, i, n);
                    if (end < 0) return 0;
                } else if (c == 't' && i + 4 <= n && memcmp(s + i, "true", 4) == 0) {
                    end = i + 4;
                } else if (c == 'f' && i + 5 <= n && memcmp(s + i, "false", 5) == 0) {
                    end = i + 5;
                } else if (c == 'n' && i + 4 <= n && memcmp(s + i, "null", 4) == 0) {
                    end = i + 4;
                } else {
                    return 0;
                }
                state = S_COMMA_OR_CLOSE;
                if (write && out_write(o, s + i, end - i) < 0) return -1;
                i = end;
            }
        }
    }
}

static int put_json_compact(Out *o, const uint8_t *s, Py_ssize_t n) {
    int spaced = 0;
    return json_walk(o, s, n, 1, &spaced);
}

/* 1 when s[0:n] is embeddable JSON (*spaced: it holds whitespace to take out), else 0. */
static int json_check(const uint8_t *s, Py_ssize_t n, int *spaced) {
    *spaced = 0;
    return json_walk(NULL, s, n, 0, spaced);
}

#endif /* KAFKAFS_KERNEL_JSON_H */
