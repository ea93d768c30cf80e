/*
 * The kernel's text side: an output buffer that can also only count, strict UTF-8, JSON strings,
 * base64, and embeddable JSON validated and compacted (kafkafs/format/jsonembed.py is the definition).
 * Included once, by _kernel.c.
 */
#ifndef KAFKAFS_KERNEL_TEXT_H
#define KAFKAFS_KERNEL_TEXT_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 512
#define MODE_AUTO 0
#define MODE_STRING 1
#define MODE_BASE64 2

/* ------------------------------------------------------------------------------------ output */

/* An output buffer, or (count_only) just a length: the same rendering code sizes and writes. */
typedef struct {
    char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
    int count_only;
    int oom;
    /* Optional: the buffer is this bytes object's (no copy when it is returned), grown with the GIL
     * taken back from *ts when that holds a saved thread state. */
    PyObject *bytes;
    PyThreadState **ts;
} Out;

static int out_grow(Out *o, Py_ssize_t need) {
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap - o->len < need) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            o->oom = 1;
            return -1;
        }
        cap *= 2;
    }
    if (o->bytes != NULL) {
        int released = o->ts != NULL && *o->ts != NULL;
        if (released) PyEval_RestoreThread(*o->ts);
        int rc = _PyBytes_Resize(&o->bytes, cap); /* on failure the object is gone */
        if (rc < 0) PyErr_Clear();
        if (released) *o->ts = PyEval_SaveThread();
        if (rc < 0) {
            o->buf = NULL;
            o->oom = 1;
            return -1;
        }
        o->buf = PyBytes_AS_STRING(o->bytes);
        o->cap = cap;
        return 0;
    }
    char *nb = (char *)PyMem_RawRealloc(o->buf, (size_t)cap);
    if (nb == NULL) {
        o->oom = 1;
        return -1;
    }
    o->buf = nb;
    o->cap = cap;
    return 0;
}

static inline int out_write(Out *o, const void *p, Py_ssize_t n) {
    if (o->count_only) {
        o->len += n;
        return 0;
    }
    if (o->cap - o->len < n && out_grow(o, n) < 0) return -1;
    memcpy(o->buf + o->len, p, (size_t)n);
    o->len += n;
    return 0;
}

#define OUT_LIT(o, s) out_write((o), (s), (Py_ssize_t)(sizeof(s) - 1))

static inline int out_byte(Out *o, char c) {
    if (o->count_only) {
        o->len += 1;
        return 0;
    }
    if (o->cap - o->len < 1 && out_grow(o, 1) < 0) return -1;
    o->buf[o->len++] = c;
    return 0;
}

static int out_int(Out *o, int64_t v) {
    char tmp[24];
    int i = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--i] = (char)('0' + (u % 10));
        u /= 10;
    } while (u);
    if (v < 0) tmp[--i] = '-';
    return out_write(o, tmp + i, 24 - i);
}

/* ------------------------------------------------------------------------------------ UTF-8 */

/* Strict UTF-8, as Python's decoder accepts it: no overlongs, no surrogates, nothing past U+10FFFF. */
static int utf8_valid(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && c1 < 0xA0) return 0;
            if (c == 0xED && c1 > 0x9F) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2], c3 = s[i + 3];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80 || (c3 & 0xC0) != 0x80) return 0;
            if (c == 0xF0 && c1 < 0x90) return 0;
            if (c == 0xF4 && c1 > 0x8F) return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------------------ strings */

static const char HEX[] = "0123456789abcdef";

/* Valid UTF-8 bytes as a JSON string: escapes for '"', '\\' and bytes below 0x20, the rest as is. */
static int put_string(Out *o, const uint8_t *s, Py_ssize_t n) {
    if (out_byte(o, '"') < 0) return -1;
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (i > run && out_write(o, s + run, i - run) < 0) return -1;
        run = i + 1;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        int len = 2;
        switch (c) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case 0x08: esc[1] = 'b'; break;
            case 0x09: esc[1] = 't'; break;
            case 0x0A: esc[1] = 'n'; break;
            case 0x0C: esc[1] = 'f'; break;
            case 0x0D: esc[1] = 'r'; break;
            default:
                esc[1] = 'u';
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = HEX[c >> 4];
                esc[5] = HEX[c & 15];
                len = 6;
        }
        if (out_write(o, esc, len) < 0) return -1;
    }
    if (n > run && out_write(o, s + run, n - run) < 0) return -1;
    return out_byte(o, '"');
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int put_base64(Out *o, const uint8_t *s, Py_ssize_t n) {
    if (OUT_LIT(o, "{\"$base64\":\"") < 0) return -1;
    Py_ssize_t enc = ((n + 2) / 3) * 4;
    if (o->count_only) {
        o->len += enc;
    } else {
        if (o->cap - o->len < enc && out_grow(o, enc) < 0) return -1;
        char *w = o->buf + o->len;
        Py_ssize_t i = 0;
        for (; i + 3 <= n; i += 3) {
            uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8) | s[i + 2];
            *w++ = B64[v >> 18];
            *w++ = B64[(v >> 12) & 63];
            *w++ = B64[(v >> 6) & 63];
            *w++ = B64[v & 63];
        }
        if (n - i == 1) {
            uint32_t v = (uint32_t)s[i] << 16;
            *w++ = B64[v >> 18];
            *w++ = B64[(v >> 12) & 63];
            *w++ = '=';
            *w++ = '=';
        } else if (n - i == 2) {
            uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8);
            *w++ = B64[v >> 18];
            *w++ = B64[(v >> 12) & 63];
            *w++ = B64[(v >> 6) & 63];
            *w++ = '=';
        }
        o->len += enc;
    }
    return OUT_LIT(o, "\"}");
}

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
static Py_ssize_t scan_string(const uint8_t *s, Py_ssize_t i, Py_ssize_t n) {
    i++;
    while (i < n) {
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
static Py_ssize_t scan_number(const uint8_t *s, Py_ssize_t i, Py_ssize_t n) {
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

/* Writes the compact form of embeddable JSON (jsonembed.py's definition; valid UTF-8 already
 * checked) and returns 1, or returns 0 having possibly written part of it (the caller rewinds);
 * -1 when out of memory. */
static int put_json_compact(Out *o, const uint8_t *s, Py_ssize_t n) {
    uint8_t stack[MAX_DEPTH];
    int depth = 0;
    int state = S_VALUE;
    Py_ssize_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    if (i >= n || (s[i] != '{' && s[i] != '[')) return 0;
    for (;;) {
        while (i < n && is_ws(s[i])) i++;
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
                if (out_byte(o, (char)c) < 0) return -1;
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
                if (out_byte(o, (char)c) < 0) return -1;
                i++;
                break;
            }
            case ',':
                if (state != S_COMMA_OR_CLOSE) return 0;
                state = stack[depth - 1] == '{' ? S_KEY : S_VALUE;
                if (out_byte(o, ',') < 0) return -1;
                i++;
                break;
            case ':':
                if (state != S_COLON) return 0;
                state = S_VALUE;
                if (out_byte(o, ':') < 0) return -1;
                i++;
                break;
            case '"': {
                Py_ssize_t end = scan_string(s, i, n);
                if (end < 0) return 0;
                if (state == S_KEY || state == S_KEY_OR_CLOSE) state = S_COLON;
                else if (state == S_VALUE || state == S_VALUE_OR_CLOSE) state = S_COMMA_OR_CLOSE;
                else return 0;
                if (out_write(o, s + i, end - i) < 0) return -1;
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
                if (out_write(o, s + i, end - i) < 0) return -1;
                i = end;
            }
        }
    }
}

/* One key, value or header value by mode (jsonembed.render_value). */
static int put_value(Out *o, const uint8_t *s, Py_ssize_t n, int is_null, int mode) {
    if (is_null) return OUT_LIT(o, "null");
    if (mode == MODE_BASE64 || !utf8_valid(s, n)) return put_base64(o, s, n);
    if (mode == MODE_AUTO) {
        Py_ssize_t i = 0;
        while (i < n && is_ws(s[i])) i++;
        if (i < n && (s[i] == '{' || s[i] == '[')) {
            /* validate first, writing nothing: most JSON values hold no whitespace to take out, and
             * then their compact form is their bytes, copied at once */
            Out dry = {NULL, 0, 0, 1, 0, NULL, NULL};
            if (put_json_compact(&dry, s, n) == 1) {
                if (dry.len == n) return out_write(o, s, n);
                if (o->count_only) {
                    o->len += dry.len;
                    return 0;
                }
                Py_ssize_t mark = o->len;
                int r = put_json_compact(o, s, n);
                if (r < 0) return -1;
                if (r == 1) return 0;
                o->len = mark; /* cannot happen: the same bytes validated above */
            }
        }
    }
    return put_string(o, s, n);
}

/* A header key: a JSON string of its bytes decoded as Python's 'replace' error handler decodes them. */
static int put_header_key(Out *o, const uint8_t *s, Py_ssize_t n, int gil_released, PyThreadState **ts) {
    if (utf8_valid(s, n)) return put_string(o, s, n);
    if (gil_released) PyEval_RestoreThread(*ts);
    int rc = -1;
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, n, "replace");
    if (text != NULL) {
        Py_ssize_t len;
        const char *utf8 = PyUnicode_AsUTF8AndSize(text, &len);
        if (utf8 != NULL) rc = put_string(o, (const uint8_t *)utf8, len);
        Py_DECREF(text);
    }
    if (rc < 0 && !o->oom && PyErr_Occurred()) PyErr_Clear();
    if (rc < 0 && !o->oom) o->oom = 1; /* treated as a failure to allocate */
    if (gil_released) *ts = PyEval_SaveThread();
    return rc;
}

static const char *control_name(const uint8_t *key, Py_ssize_t n, int is_null) {
    if (is_null || n < 4) return "UNKNOWN";
    int16_t t = (int16_t)(((uint16_t)key[2] << 8) | key[3]);
    switch (t) {
        case 0: return "ABORT";
        case 1: return "COMMIT";
        case 2: return "LEADER_CHANGE";
        case 3: return "SNAPSHOT_HEADER";
        case 4: return "SNAPSHOT_FOOTER";
        case 5: return "KRAFT_VERSION";
        case 6: return "KRAFT_VOTERS";
        default: return "UNKNOWN";
    }
}

#endif
