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


/* The end of the string token starting at s[i] == '"', or -1 when it is not a valid string or not valid
 * UTF-8. lim: blocks of 16 bytes may be read up to there (_kernel_text.h). */
static inline __attribute__((always_inline)) Py_ssize_t scan_string(const uint8_t *s, Py_ssize_t i, Py_ssize_t n,
                                                                   const uint8_t *lim) {
    uint8_t pad[16];
    i++;
    if (lim - (s + i) >= 16) { /* most strings (keys, short values) end in their first block, with no other stop */
        uint32_t high, m = block_stops(s + i, &high) | high;
        if (m) {
            Py_ssize_t at = i + __builtin_ctz(m);
            if (s[at] == '"' && at < n) return at + 1;
        }
    }
    while (i < n) {
        Py_ssize_t len = n - i < 16 ? n - i : 16, end = i + len;
        const uint8_t *blk;
        uint32_t high;
        uint32_t m = block_at(s + i, len, lim, pad, &blk, &high) | high; /* with bytes of 0x80 and up */
        while (m) { /* each stop in turn; a multi-byte sequence checked alone (JSON's strings are mostly
                     * ASCII: utf8_block's masks cost more than they save here) */
            Py_ssize_t at = i + __builtin_ctz(m);
            uint8_t c = s[at];
            if (c == '"') return at + 1;
            if (c < 0x20) return -1;
            if (c >= 0x80) {
                Py_ssize_t seq = utf8_sequence(s + at, n - at);
                if (seq < 0) return -1;
                at += seq;
            } else { /* a backslash */
                if (at + 1 >= n) return -1;
                uint8_t e = s[at + 1];
                if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                    at += 2;
                } else {
                    if (e != 'u') return -1;
                    int code;
                    if (!hex4(s, at + 2, n, &code)) return -1;
                    at += 6;
                    if (code >= 0xDC00 && code <= 0xDFFF) return -1; /* a low half with no high half before it */
                    if (code >= 0xD800 && code <= 0xDBFF) {
                        int low;
                        if (at + 1 >= n || s[at] != '\\' || s[at + 1] != 'u' || !hex4(s, at + 2, n, &low)) return -1;
                        if (low < 0xDC00 || low > 0xDFFF) return -1;
                        at += 6;
                    }
                }
            }
            if (at >= end) {
                end = at;
                break;
            }
            m &= ~0u << (at - i);
        }
        i = end;
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

/* 1 when s[0:n] is embeddable JSON (jsonembed.py's definition) and valid UTF-8, else 0; *ws: how many
 * bytes of whitespace lie outside its strings (its compact form is the rest). lim: see scan_string. A
 * walk by hand (gotos between the three places a walk can be: before a value, before a key, after a
 * value), with the open objects and arrays on a stack of at most MAX_DEPTH. */
static int json_check(const uint8_t *s, Py_ssize_t n, const uint8_t *lim, Py_ssize_t *ws) {
    uint8_t stack[MAX_DEPTH]; /* '{' or '[' of each open container */
    int depth = 0;
    Py_ssize_t i = 0, spaces = 0, from, e;
    uint8_t c;
#define JSON_SKIP_WS()                                \
    do {                                              \
        if (i < n && s[i] <= ' ') {                   \
            from = i;                                 \
            while (i < n && is_ws(s[i])) i++;         \
            spaces += i - from;                       \
        }                                             \
    } while (0)
    *ws = 0;
    JSON_SKIP_WS();
    if (i >= n || (s[i] != '{' && s[i] != '[')) return 0;
value: /* a value starts at s[i] */
    if (i >= n) return 0;
    c = s[i];
    if (c == '"') {
        e = scan_string(s, i, n, lim);
    } else if (c == '{' || c == '[') {
        if (depth == MAX_DEPTH) return 0;
        stack[depth++] = c;
        i++;
        JSON_SKIP_WS();
        if (i >= n) return 0;
        if (s[i] == c + 2) { /* empty: '{' + 2 is '}', '[' + 2 is ']' */
            depth--;
            i++;
            goto after;
        }
        if (c == '{') goto key;
        goto value;
    } else if (c == '-' || is_digit(c)) {
        e = scan_number(s, i, n);
    } else if (c == 't' && i + 4 <= n && memcmp(s + i, "true", 4) == 0) {
        e = i + 4;
    } else if (c == 'f' && i + 5 <= n && memcmp(s + i, "false", 5) == 0) {
        e = i + 5;
    } else if (c == 'n' && i + 4 <= n && memcmp(s + i, "null", 4) == 0) {
        e = i + 4;
    } else {
        return 0;
    }
    if (e < 0) return 0;
    i = e;
after: /* a value ended at s[i] */
    JSON_SKIP_WS();
    if (i >= n) {
        *ws = spaces;
        return depth == 0;
    }
    if (depth == 0) return 0;
    c = s[i];
    if (c == ',') {
        i++;
        JSON_SKIP_WS();
        if (i >= n) return 0;
        if (stack[depth - 1] == '[') goto value;
        goto key;
    }
    if (c != stack[depth - 1] + 2) return 0; /* '{' + 2 is '}', '[' + 2 is ']' */
    depth--;
    i++;
    goto after;
key: /* a key starts at s[i] (i < n) */
    if (s[i] != '"') return 0;
    e = scan_string(s, i, n, lim);
    if (e < 0) return 0;
    i = e;
    if (i < n && s[i] == ':') { /* compact: the colon right after the key */
        i++;
    } else {
        JSON_SKIP_WS();
        if (i >= n || s[i] != ':') return 0;
        i++;
    }
    JSON_SKIP_WS();
    goto value;
#undef JSON_SKIP_WS
}

/* The compact form of s[0:n], embeddable JSON that json_check accepted with ws bytes of whitespace
 * outside its strings: its bytes without that whitespace (counted when o only counts). */
static int put_json_compact(Out *o, const uint8_t *s, Py_ssize_t n, Py_ssize_t ws) {
    Py_ssize_t len = n - ws;
    if (o->count_only) {
        o->len += len;
        return 0;
    }
    if (o->cap - o->len < len && out_grow(o, len) < 0) return -1;
    char *w = o->buf + o->len;
    int in_string = 0; /* json_check saw every string end; a backslash takes the byte after it along */
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (in_string) {
            *w++ = (char)c;
            if (c == '\\') *w++ = (char)s[++i];
            else if (c == '"') in_string = 0;
        } else if (!is_ws(c)) {
            *w++ = (char)c;
            in_string = c == '"';
        }
    }
    o->len = w - o->buf;
    return 0;
}

#endif /* KAFKAFS_KERNEL_JSON_H */
