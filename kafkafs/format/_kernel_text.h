/*
 * The kernel's text side: the GIL rule, an output buffer that can also only count, strict UTF-8, JSON
 * strings and base64 (kafkafs/format/jsonembed.py is the definition). Every header that writes text
 * includes it; embeddable JSON is _kernel_json.h, a key or value by mode _kernel_value.h.
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

/* ------------------------------------------------------------------------------------ the GIL
 *
 * THE KERNEL'S GIL RULE. No path takes or releases the GIL twice: an entry point that renders without
 * the GIL releases it once with gil_release() and takes it back once with gil_restore(); the saved
 * thread state lives in one variable of the entry point, and everything below it reaches that variable
 * through a pointer (PyThreadState **ts), where NULL means "this thread holds the GIL" and anything else
 * "released, saved here". Code below an entry point that needs Python for a moment takes the GIL with
 * gil_take() and gives it back with gil_give(): gil_take() clears *ts while it holds the GIL, so a nested
 * gil_take() (an output buffer that grows while the GIL is already taken back) is a no-op, never a
 * second PyEval_RestoreThread() (which waits forever for the GIL this thread holds). Growth of the
 * output buffer (out_grow) works with or without the GIL held: it takes it through gil_take() only for a
 * buffer that is a Python bytes object. Nothing calls PyEval_SaveThread / PyEval_RestoreThread but these
 * four helpers; a Py_BEGIN/END_ALLOW_THREADS block (the offset map's loops, _kernel_omap.h) is one pair in
 * one function that calls no Python inside. A header key that is not UTF-8 is decoded in C
 * (put_header_key), so rendering needs no Python at all. tests/format/test_kernel_gil.py checks the
 * source for this shape and runs hostile inputs through a build with KAFKAFS_GIL_CHECK, where a take or
 * release in the wrong state aborts with a message instead of hanging.
 */
#ifdef KAFKAFS_GIL_CHECK
#include <stdio.h>
#include <stdlib.h>
static void gil_check(int want_held, const char *where) {
    if (PyGILState_Check() != want_held) {
        fprintf(stderr, "kafkafs kernel GIL rule broken in %s: the GIL is %s\n", where, want_held ? "not held" : "held");
        abort();
    }
}
#else
#define gil_check(want_held, where) ((void)0)
#endif

/* An entry point releases the GIL: returns the saved state for gil_restore (store it where *ts points). */
static inline PyThreadState *gil_release(void) {
    gil_check(1, "gil_release");
    return PyEval_SaveThread();
}

/* An entry point takes the GIL back (after everything below it gave back whatever it took). */
static inline void gil_restore(PyThreadState **ts) {
    gil_check(0, "gil_restore");
    PyThreadState *saved = *ts;
    *ts = NULL;
    PyEval_RestoreThread(saved);
}

/* Below an entry point: take the GIL for a moment when it is released (ts NULL or *ts NULL: it is held,
 * nothing to do). Returns whether it took it; pass that to gil_give. */
static inline int gil_take(PyThreadState **ts) {
    if (ts == NULL || *ts == NULL) return 0;
    gil_check(0, "gil_take");
    PyThreadState *saved = *ts;
    *ts = NULL; /* held now: a nested gil_take sees it */
    PyEval_RestoreThread(saved);
    return 1;
}

static inline void gil_give(PyThreadState **ts, int taken) {
    if (!taken) return;
    gil_check(1, "gil_give");
    *ts = PyEval_SaveThread();
}

/* ------------------------------------------------------------------------------------ output */

/* An output buffer, or (count_only) just a length: the same rendering code sizes and writes. */
typedef struct {
    char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
    int count_only;
    int oom;
    /* Optional: the buffer is this bytes object's (no copy when it is returned), grown with the GIL
     * taken for the resize through gil_take(ts) (ts: the entry point's saved state, see the GIL rule). */
    PyObject *bytes;
    PyThreadState **ts;
} Out;

/* Room for need more bytes; works with or without the GIL held (the GIL rule above). */
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
        int taken = gil_take(o->ts);
        gil_check(1, "out_grow");
        int rc = _PyBytes_Resize(&o->bytes, cap); /* on failure the object is gone */
        if (rc < 0) PyErr_Clear();
        gil_give(o->ts, taken);
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

static const char DIGIT_PAIRS[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static inline int out_int(Out *o, int64_t v) {
    char tmp[24];
    int i = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        i -= 2;
        memcpy(tmp + i, DIGIT_PAIRS + 2 * r, 2);
    }
    if (u >= 10) {
        i -= 2;
        memcpy(tmp + i, DIGIT_PAIRS + 2 * u, 2);
    } else {
        tmp[--i] = (char)('0' + u);
    }
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
        if (i + 8 > n && n >= 8) { /* the tail: one last word, overlapping bytes already checked */
            uint64_t w;
            memcpy(&w, s + n - 8, 8);
            if (!(w & 0x8080808080808080ULL)) break;
        }
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

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && (defined(__GNUC__) || defined(__clang__))
#define KAFKAFS_SWAR 1
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* Bytes of w (8 bytes, little-endian) that are '"', '\\' or below 0x20: the lowest flagged byte is the
 * first such byte (flags above a real one may be spurious, which is all the callers need). */
static inline uint64_t special_bytes(uint64_t w) {
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    return ((q - ONES) & ~q & HIGHS) | ((b - ONES) & ~b & HIGHS) | ((w - ONES * 0x20) & ~w & HIGHS);
}

/* The first position from i where a byte is '"', '\\' or below 0x20, eight bytes at a time; may stop
 * short of it in the last seven bytes (or return n). */
static inline Py_ssize_t skip_plain(const uint8_t *s, Py_ssize_t i, Py_ssize_t n) {
    while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t f = special_bytes(w);
        if (f) return i + (__builtin_ctzll(f) >> 3);
        i += 8;
    }
    return i;
}
#endif

static const char HEX[] = "0123456789abcdef";

/* Valid UTF-8 bytes as the inside of a JSON string: escapes for '"', '\\' and bytes below 0x20, the
 * rest as is. */
static int put_string_body(Out *o, const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
#ifdef KAFKAFS_SWAR
        i = skip_plain(s, i, n);
        if (i >= n) break;
        if (i + 8 > n && n >= 8) { /* the tail: one last word, overlapping bytes already scanned */
            uint64_t w;
            memcpy(&w, s + n - 8, 8);
            if (!special_bytes(w)) break;
        }
#endif
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
    return 0;
}

/* Valid UTF-8 bytes as a JSON string. */
static int put_string(Out *o, const uint8_t *s, Py_ssize_t n) {
    if (out_byte(o, '"') < 0 || put_string_body(o, s, n) < 0) return -1;
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

#endif /* KAFKAFS_KERNEL_TEXT_H */
