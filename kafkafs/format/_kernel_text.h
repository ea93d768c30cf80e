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
    /* Optional: buf is the caller's (render_span_into) and never grows; a write that needs more room than
     * cap fails as if out of memory (oom set), and the walk tells the two apart by this flag. */
    int fixed;
} Out;

/* Room for need more bytes; works with or without the GIL held (the GIL rule above). */
static int out_grow(Out *o, Py_ssize_t need) {
    if (o->fixed) {
        o->oom = 1;
        return -1;
    }
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

static const uint64_t POW10[20] = {1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
                                   100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL,
                                   1000000000000ULL, 10000000000000ULL, 100000000000000ULL,
                                   1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL,
                                   1000000000000000000ULL, 10000000000000000000ULL};

/* The decimal digits of u (1 for 0): log10 from the bit length, then one comparison. */
static inline int decimal_digits(uint64_t u) {
    int t = ((64 - __builtin_clzll(u | 1)) * 1233) >> 12; /* 1233 / 4096 ~ log10(2) */
    return t - ((u | 1) < POW10[t]) + 1;
}

/* The decimal digits of u written to end backwards (the caller knows how many: decimal_digits): eight
 * at a time in 32-bit arithmetic, two at a time within those. */
static inline void digits_back(char *end, uint64_t u) {
    while (u >= 100000000u) {
        uint32_t lo = (uint32_t)(u % 100000000u);
        u /= 100000000u;
        uint32_t a = lo / 10000, b = lo % 10000;
        end -= 8;
        memcpy(end, DIGIT_PAIRS + 2 * (a / 100), 2);
        memcpy(end + 2, DIGIT_PAIRS + 2 * (a % 100), 2);
        memcpy(end + 4, DIGIT_PAIRS + 2 * (b / 100), 2);
        memcpy(end + 6, DIGIT_PAIRS + 2 * (b % 100), 2);
    }
    uint32_t v = (uint32_t)u;
    while (v >= 100) {
        end -= 2;
        memcpy(end, DIGIT_PAIRS + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10) {
        end -= 2;
        memcpy(end, DIGIT_PAIRS + 2 * v, 2);
    } else {
        *--end = (char)('0' + v);
    }
}

/* The length of an integer in decimal. */
static inline Py_ssize_t int_len(int64_t v) {
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    return decimal_digits(u) + (v < 0);
}

/* An integer in decimal written at w (room made for 20 characters); returns the end. */
static inline __attribute__((always_inline)) char *int_at(char *w, int64_t v) {
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    Py_ssize_t len = decimal_digits(u) + (v < 0);
    if (v < 0) *w = '-';
    digits_back(w + len, u);
    return w + len;
}

/* An integer in decimal; counted without being formatted when o only counts. */
static inline __attribute__((always_inline)) int out_int(Out *o, int64_t v) {
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    Py_ssize_t len = decimal_digits(u) + (v < 0);
    if (o->count_only) {
        o->len += len;
        return 0;
    }
    if (o->cap - o->len < len && out_grow(o, len) < 0) return -1;
    if (v < 0) o->buf[o->len] = '-';
    digits_back(o->buf + o->len + len, u);
    o->len += len;
    return 0;
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

/* The UTF-8 sequence at s[0:n] (n >= 1): its length when it is valid, else minus the length of its
 * maximal subpart (the bytes one U+FFFD replaces), as Python's UTF-8 decoder decides (Unicode's
 * "substitution of maximal subparts": a start byte and the continuation bytes that may follow it). */
static inline Py_ssize_t utf8_sequence(const uint8_t *s, Py_ssize_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    Py_ssize_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1; /* an invalid start byte */
    }
    Py_ssize_t i = 1;
    for (; i < need && i < n; i++) {
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return -i;
    }
    return i == need ? need : -i; /* cut off by the end: the whole valid prefix is one subpart */
}

/* ------------------------------------------------------------------------------------ 16-byte blocks
 *
 * Strings are scanned 16 bytes at a time (SSE2, which every x86-64 has; a plain loop elsewhere): one
 * mask says where the bytes are that a JSON string cannot hold as they are ('"', '\\', below 0x20), and
 * one where the bytes of multi-byte UTF-8 sequences are (0x80 and up); a block with none of the first
 * kind is copied (or counted) at once, and a block with any of the second is checked as UTF-8 as a whole
 * (utf8_block), carrying what a sequence that runs into the next block still needs. A block may be read
 * past the end of the string, never past lim: the end of the memory the caller may read (the end of the
 * records section the string lies in; the string's own end when nothing is known), and a block that
 * would pass lim is copied into a padded one first. */
#if defined(__SSE2__) && !defined(KAFKAFS_NO_SIMD)
#include <emmintrin.h>
#define KAFKAFS_SSE2 1
#endif

/* Bit k set for each of the 16 bytes at p that is '"', '\\' or below 0x20; *high: those 0x80 and up. */
static inline __attribute__((always_inline)) uint32_t block_stops(const uint8_t *p, uint32_t *high) {
#ifdef KAFKAFS_SSE2
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i q = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
    __m128i b = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
    __m128i c = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)); /* signed: below 0x20, and 0x80 and up */
    uint32_t h = (uint32_t)_mm_movemask_epi8(v);
    *high = h;
    return (uint32_t)_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q, b), c)) & ~h;
#else
    uint32_t m = 0, h = 0;
    for (int k = 0; k < 16; k++) {
        uint8_t c = p[k];
        if (c < 0x20 || c == '"' || c == '\\') m |= 1u << k;
        if (c >= 0x80) h |= 1u << k;
    }
    *high = h;
    return m;
#endif
}

/* The stops among the len (1..16) bytes at p, read as a block of 16 from p, or from pad (p's bytes, then
 * plain ones) when fewer than 16 lie before lim; *blk: where the block was read; *high: its bytes 0x80
 * and up (among the len). */
static inline __attribute__((always_inline)) uint32_t block_at(const uint8_t *p, Py_ssize_t len, const uint8_t *lim,
                                                               uint8_t *pad, const uint8_t **blk, uint32_t *high) {
    if (lim - p >= 16) {
        *blk = p;
    } else {
        memset(pad, 'a', 16);
        memcpy(pad, p, (size_t)(lim - p));
        *blk = pad;
    }
    uint32_t keep = 0xFFFFu >> (16 - len);
    uint32_t m = block_stops(*blk, high) & keep;
    *high &= keep;
    return m;
}

/* What a UTF-8 sequence that started in earlier blocks still needs of the next one: need, bit k: byte k
 * must be a continuation byte (up to 3 bits); e0, ed, f0, f4: byte 0 is the second byte of a sequence
 * that started with that byte (its range is narrower: no overlongs, no surrogates, nothing past
 * U+10FFFF). All 0 between sequences. */
typedef struct {
    uint32_t need, e0, ed, f0, f4;
} Utf8Carry;

/* Strict UTF-8 (as utf8_valid) of the bytes of the block at p that keep (bits 0..k, k < 16) holds, given
 * what cy carries in and leaves for the next block in cy: 1 when nothing is wrong so far, 0 when these
 * bytes cannot be (part of) valid UTF-8. A sequence cut by the end of keep is wrong unless keep is all
 * 16 bytes (then cy carries it; the caller checks that cy->need is 0 where its bytes end). Bitmasks of
 * each byte's class, compared as masks: the continuation bytes must be exactly those the lead bytes
 * (and the carry) need. */
static inline __attribute__((always_inline)) int utf8_block(const uint8_t *p, uint32_t keep, Utf8Carry *cy) {
    uint32_t h, ge_c0, ge_c2, ge_e0, ge_f0, ge_f5, ge_a0, ge_90, is_e0, is_ed, is_f0, is_f4;
#ifdef KAFKAFS_SSE2
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    /* signed comparisons: "above x" for x of 0x80 and up holds for x < byte <= 0xFF and for every byte below 0x80 */
#define KAFKAFS_ABOVE(x) (uint32_t) _mm_movemask_epi8(_mm_cmpgt_epi8(v, _mm_set1_epi8((char)(x))))
#define KAFKAFS_IS(x) (uint32_t) _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)(x))))
    h = (uint32_t)_mm_movemask_epi8(v);
    ge_c0 = KAFKAFS_ABOVE(0xBF);
    ge_c2 = KAFKAFS_ABOVE(0xC1);
    ge_e0 = KAFKAFS_ABOVE(0xDF);
    ge_f0 = KAFKAFS_ABOVE(0xEF);
    ge_f5 = KAFKAFS_ABOVE(0xF4);
    ge_a0 = KAFKAFS_ABOVE(0x9F);
    ge_90 = KAFKAFS_ABOVE(0x8F);
    is_e0 = KAFKAFS_IS(0xE0);
    is_ed = KAFKAFS_IS(0xED);
    is_f0 = KAFKAFS_IS(0xF0);
    is_f4 = KAFKAFS_IS(0xF4);
#undef KAFKAFS_ABOVE
#undef KAFKAFS_IS
#else
    h = ge_c0 = ge_c2 = ge_e0 = ge_f0 = ge_f5 = ge_a0 = ge_90 = is_e0 = is_ed = is_f0 = is_f4 = 0;
    for (int k = 0; k < 16; k++) {
        uint8_t c = p[k];
        uint32_t bit = 1u << k;
        if (c >= 0x80) h |= bit;
        if (c < 0x80 || c >= 0xC0) ge_c0 |= bit;
        if (c < 0x80 || c >= 0xC2) ge_c2 |= bit;
        if (c < 0x80 || c >= 0xE0) ge_e0 |= bit;
        if (c < 0x80 || c >= 0xF0) ge_f0 |= bit;
        if (c < 0x80 || c >= 0xF5) ge_f5 |= bit;
        if (c < 0x80 || c >= 0xA0) ge_a0 |= bit;
        if (c < 0x80 || c >= 0x90) ge_90 |= bit;
        if (c == 0xE0) is_e0 |= bit;
        if (c == 0xED) is_ed |= bit;
        if (c == 0xF0) is_f0 |= bit;
        if (c == 0xF4) is_f4 |= bit;
    }
#endif
    h &= keep;
    uint32_t cont = h & ~ge_c0;                  /* 0x80-0xBF */
    uint32_t lead2 = h & ge_c2 & ~ge_e0;         /* 0xC2-0xDF */
    uint32_t lead3 = h & ge_e0 & ~ge_f0;         /* 0xE0-0xEF */
    uint32_t lead4 = h & ge_f0 & ~ge_f5;         /* 0xF0-0xF4 */
    uint32_t bad = h & ((ge_c0 & ~ge_c2) | ge_f5); /* 0xC0, 0xC1, 0xF5-0xFF: never in UTF-8 */
    uint32_t need = cy->need | (lead2 | lead3 | lead4) << 1 | (lead3 | lead4) << 2 | lead4 << 3;
    bad |= (need & 0xFFFFu) ^ cont; /* a continuation byte nothing needs, or a needed one missing */
    uint32_t lo_a0 = cont & ~ge_a0, lo_90 = cont & ~ge_90; /* 0x80-0x9F, 0x80-0x8F */
    uint32_t after_e0 = (is_e0 & keep) << 1 | cy->e0, after_ed = (is_ed & keep) << 1 | cy->ed;
    uint32_t after_f0 = (is_f0 & keep) << 1 | cy->f0, after_f4 = (is_f4 & keep) << 1 | cy->f4;
    bad |= (after_e0 & lo_a0) | (after_ed & cont & ~lo_a0) | (after_f0 & lo_90) | (after_f4 & cont & ~lo_90);
    cy->need = need >> 16;
    cy->e0 = after_e0 >> 16;
    cy->ed = after_ed >> 16;
    cy->f0 = after_f0 >> 16;
    cy->f4 = after_f4 >> 16;
    return (bad & 0xFFFFu) == 0;
}

/* r plain bytes from p to w (room for 16 more was made): one 16-byte copy when it may read that far. */
static inline __attribute__((always_inline)) void copy_run(char *w, const uint8_t *p, Py_ssize_t r,
                                                           const uint8_t *lim) {
    if (r <= 16 && lim - p >= 16) memcpy(w, p, 16);
    else memcpy(w, p, (size_t)r);
}

/* What a byte below 0x20 adds to the length when escaped: \b \t \n \f \r one, \u00XX five. */
static const uint8_t CONTROL_EXTRA[32] = {5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5,
                                          5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5};

/* Whether s[0:n] is short (16 bytes at most, and 16 readable from s before lim) and plain (no stop, no
 * byte of 0x80 and up), as one block's masks say it: most keys; text_count's and text_body's first test. */
static inline __attribute__((always_inline)) int short_plain(const uint8_t *s, Py_ssize_t n, const uint8_t *lim) {
    if (n > 16 || lim - s < 16) return 0;
    uint32_t high, m = block_stops(s, &high);
    return !((m | high) & (0xFFFFu >> (16 - n)));
}

/* The walk text_count and text_body take through s[0:n] (lim: see the blocks above), block by block: the
 * block is s[at:at + len] (16 bytes, or what is left), read from blk (s + at, or pad: the caller's 16
 * bytes, outside the struct so that the compiler keeps the rest in registers). */
typedef struct {
    const uint8_t *s, *lim, *blk;
    uint8_t *pad;
    Py_ssize_t n, at, len;
    Utf8Carry cy; /* a UTF-8 sequence that goes on past the block */
} TextWalk;

static inline __attribute__((always_inline)) TextWalk text_walk(const uint8_t *s, Py_ssize_t n, const uint8_t *lim,
                                                                 uint8_t *pad) {
    return (TextWalk){s, lim, NULL, pad, n, 0, 0, {0, 0, 0, 0, 0}};
}

/* The walk's block at w->at, read where block_at says, its bytes of 0x80 and up checked as UTF-8: its
 * stops (block_at's mask), or -1 when it is not valid UTF-8. The caller moves w->at on by w->len. */
static inline __attribute__((always_inline)) int32_t text_block(TextWalk *w) {
    w->len = w->n - w->at < 16 ? w->n - w->at : 16;
    uint32_t high, m = block_at(w->s + w->at, w->len, w->lim, w->pad, &w->blk, &high);
    if ((high | w->cy.need) && !utf8_block(w->blk, 0xFFFFu >> (16 - w->len), &w->cy)) return -1;
    return (int32_t)m;
}

/* The length of the inside of a JSON string for the bytes s[0:n] (what text_body writes), or -1 when
 * they are not valid UTF-8; lim: see the blocks above. Counting needs no output: a length returned, not
 * added to an Out in memory, so that a caller that sums a line's parts keeps the sum in a register. */
static inline __attribute__((always_inline)) Py_ssize_t text_count(const uint8_t *s, Py_ssize_t n,
                                                                   const uint8_t *lim) {
    if (short_plain(s, n, lim)) return n;
    Py_ssize_t extra = 0;
    uint8_t pad[16];
    TextWalk w = text_walk(s, n, lim, pad);
    for (; w.at < n; w.at += w.len) {
        int32_t stops = text_block(&w);
        if (stops < 0) return -1;
        for (uint32_t m = (uint32_t)stops; m; m &= m - 1) {
            uint8_t c = w.blk[__builtin_ctz(m)];
            extra += c < 0x20 ? CONTROL_EXTRA[c] : 1;
        }
    }
    if (w.cy.need) return -1; /* a sequence cut by the end */
    return n + extra;
}

/* The inside of a JSON string for the bytes s[0:n] when they are valid UTF-8: escapes for '"', '\\'
 * and bytes below 0x20, the rest as is. 1 when written, 0 when s is not valid UTF-8 (part of it may have
 * been written: the caller rewinds o->len), -1 when out of memory (o only writes: text_count counts).
 * Block by block: a block with bytes of 0x80 and up is checked as UTF-8 (utf8_block), and they are plain
 * bytes otherwise; a block without stops is copied whole; in one with stops, each escape is written
 * after the run of plain bytes before it. */
static inline __attribute__((always_inline)) int text_body(Out *o, const uint8_t *s, Py_ssize_t n,
                                                           const uint8_t *lim) {
    if (short_plain(s, n, lim)) { /* one copy */
        if (o->cap - o->len < 16 && out_grow(o, 16) < 0) return -1;
        memcpy(o->buf + o->len, s, 16);
        o->len += n;
        return 1;
    }
    uint8_t pad[16];
    TextWalk tw = text_walk(s, n, lim, pad);
    for (; tw.at < n; tw.at += tw.len) {
        int32_t stops = text_block(&tw);
        if (stops < 0) return 0;
        uint32_t m = (uint32_t)stops;
        Py_ssize_t i = tw.at, len = tw.len;
        if (!m) {
            if (o->cap - o->len < 16 && out_grow(o, 16) < 0) return -1;
            memcpy(o->buf + o->len, tw.blk, 16);
            o->len += len;
            continue;
        }
        /* room for a block: at most 16 escapes of 6 bytes, and the 16 bytes copy_run may write past a run */
        if (o->cap - o->len < 128 && out_grow(o, 128) < 0) return -1;
        Py_ssize_t end = i + len, run = i; /* s[run:] up to the next stop: plain, not yet written */
        do {
            Py_ssize_t at = i + __builtin_ctz(m);
            uint8_t c = s[at];
            m &= m - 1;
            copy_run(o->buf + o->len, s + run, at - run, lim);
            o->len += at - run;
            run = at + 1;
            char *w = o->buf + o->len;
            w[0] = '\\';
            switch (c) {
                case '"': w[1] = '"'; break;
                case '\\': w[1] = '\\'; break;
                case 0x08: w[1] = 'b'; break;
                case 0x09: w[1] = 't'; break;
                case 0x0A: w[1] = 'n'; break;
                case 0x0C: w[1] = 'f'; break;
                case 0x0D: w[1] = 'r'; break;
                default:
                    memcpy(w + 1, "u00", 3);
                    w[4] = HEX[c >> 4];
                    w[5] = HEX[c & 15];
                    o->len += 4;
            }
            o->len += 2;
        } while (m);
        copy_run(o->buf + o->len, s + run, end - run, lim);
        o->len += end - run;
    }
    if (tw.cy.need) return 0; /* a sequence cut by the end */
    return 1;
}

/* The bytes s[0:n] as a JSON string when they are valid UTF-8: 1, or 0 when they are not (o->len is
 * back where it was), -1 when out of memory. lim: see the blocks above. */
static inline __attribute__((always_inline)) int put_text(Out *o, const uint8_t *s, Py_ssize_t n,
                                                          const uint8_t *lim) {
    Py_ssize_t mark = o->len;
    if (out_byte(o, '"') < 0) return -1;
    int r;
    if (o->count_only) {
        Py_ssize_t len = text_count(s, n, lim);
        r = len >= 0;
        if (r) o->len += len;
    } else {
        r = text_body(o, s, n, lim);
    }
    if (r < 0) return -1;
    if (r == 0) {
        o->len = mark;
        return 0;
    }
    return out_byte(o, '"') < 0 ? -1 : 1;
}

/* Valid UTF-8 bytes as the inside of a JSON string (see text_body). */
static int put_string_body(Out *o, const uint8_t *s, Py_ssize_t n) {
    if (o->count_only) {
        o->len += text_count(s, n, s + n); /* valid UTF-8: never -1 */
        return 0;
    }
    return text_body(o, s, n, s + n) < 0 ? -1 : 0;
}

/* Valid UTF-8 bytes as a JSON string. */
static int put_string(Out *o, const uint8_t *s, Py_ssize_t n) {
    if (out_byte(o, '"') < 0 || put_string_body(o, s, n) < 0) return -1;
    return out_byte(o, '"');
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static char b64_pairs[4096 * 2]; /* the two characters of every 12 bits (text_init fills it) */

/* Fills the tables built at module init. */
static void text_init(void) {
    for (int i = 0; i < 4096; i++) {
        b64_pairs[2 * i] = B64[i >> 6];
        b64_pairs[2 * i + 1] = B64[i & 63];
    }
}

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
            memcpy(w, b64_pairs + 2 * (v >> 12), 2);
            memcpy(w + 2, b64_pairs + 2 * (v & 0xFFF), 2);
            w += 4;
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
