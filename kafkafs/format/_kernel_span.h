/*
 * The kernel's multi-batch entry point: CRC-32C, and render_span, which walks the whole batches at the
 * start of a buffer of a .log, checks each one's CRC and renders its records, with no Python between
 * batches (kafkafs/format/jsonspan.py holds the reference and the wrapper). The entry points
 * (crc32c, span_cuts, render_span) are in _kernel.c; here is what they are made of.
 *
 * CRC-32C: the SSE4.2 crc32 instruction when the CPU has it (checked once, at module init), else a
 * slicing-by-8 table; both give what the crc32c package gives (tests/format/test_kernel_span.py).
 */
#ifndef KAFKAFS_KERNEL_SPAN_H
#define KAFKAFS_KERNEL_SPAN_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_filter.h"
#include "_kernel_records.h"
#include "_kernel_render.h"
#include "_kernel_text.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define KAFKAFS_CRC_HW 1
#endif

/* ------------------------------------------------------------------------------------ CRC-32C */

static uint32_t crc_table[8][256];
static int crc_use_hw = 0;

/* The instruction's CRC runs three streams of CRC_STREAM bytes side by side (it takes three cycles to
 * give its result and can start one a cycle), then joins them: the register after a stream, moved past
 * the CRC_STREAM bytes after it, is a linear function of the register (crc_skip: four table lookups), and
 * a stream started from 0 adds its own register. */
#define CRC_STREAM 256
static uint32_t crc_skip_table[4][256]; /* the register moved past CRC_STREAM zero bytes, byte by byte */

static uint32_t crc32c_sw(uint32_t c, const uint8_t *p, size_t n);

static inline uint32_t crc_skip(uint32_t c) {
    return crc_skip_table[0][c & 0xFF] ^ crc_skip_table[1][(c >> 8) & 0xFF] ^ crc_skip_table[2][(c >> 16) & 0xFF] ^
           crc_skip_table[3][c >> 24];
}

static void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
    static const uint8_t zeros[CRC_STREAM];
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) crc_skip_table[k][v] = crc32c_sw(v << (8 * k), zeros, CRC_STREAM);
#ifdef KAFKAFS_CRC_HW
    __builtin_cpu_init();
    crc_use_hw = __builtin_cpu_supports("sse4.2") != 0;
#endif
}

/* The table's CRC (the raw register, not inverted). */
static uint32_t crc32c_sw(uint32_t c, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint32_t lo = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        lo ^= c;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c;
}

#ifdef KAFKAFS_CRC_HW
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t c, const uint8_t *p, size_t n) {
    uint64_t c64 = c;
    while (n >= 3 * CRC_STREAM) { /* three streams side by side (see CRC_STREAM) */
        uint64_t c1 = 0, c2 = 0;
        for (const uint8_t *end = p + CRC_STREAM; p < end; p += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p, 8);
            memcpy(&w1, p + CRC_STREAM, 8);
            memcpy(&w2, p + 2 * CRC_STREAM, 8);
            c64 = _mm_crc32_u64(c64, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        c64 = crc_skip(crc_skip((uint32_t)c64) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 2 * CRC_STREAM;
        n -= 3 * CRC_STREAM;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

/* CRC-32C (Castagnoli) of n bytes, as Kafka stores it in a v2 batch header. */
static uint32_t crc32c(const uint8_t *p, size_t n) {
#ifdef KAFKAFS_CRC_HW
    if (crc_use_hw) return ~crc32c_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc32c_sw(0xFFFFFFFFu, p, n);
}

/* ------------------------------------------------------------------------------------ spans */

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return (int64_t)v;
}

static inline int32_t be32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static PyObject *i64s_bytes(const I64s *a) {
    return PyBytes_FromStringAndSize(a->v ? (const char *)a->v : "", a->n * (Py_ssize_t)sizeof(int64_t));
}

typedef struct {
    I64s batch_ends, last_offsets, line_ends;
    Py_ssize_t lines;
    Py_ssize_t consumed;
    int full;                    /* a fixed output (Out.fixed) had no room for the next batch's lines */
    int each;                    /* also per line: each_ends (its end in the output) and each_stamps */
    I64s each_ends, each_stamps; /* (render_span_lines, _kernel_merge.h) */
} SpanOut;

/* Whether the batch at d[pos:pos+size] (base offset base, last offset delta last_delta) keeps the
 * order of offsets (storage/validation.py, order_problem): its base at least min_offset, and the base
 * offset of the batch after it (its first 8 bytes) past its last offset. When fewer than 8 bytes follow
 * it, only a final buffer (one that ends where the caller's data ends) takes it, and then only when its
 * last offset is below upper (the next segment's base offset; -1: none): another read sees the next
 * base offset first. */
static inline int span_in_order(const uint8_t *d, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t size, int64_t base,
                                int32_t last_delta, int64_t min_offset, int final, int64_t upper) {
    if (base < min_offset || last_delta < 0 || base > INT64_MAX - last_delta - 1) return 0;
    Py_ssize_t after = pos + size;
    if (n - after >= 8) return be64(d + after) > base + last_delta;
    return final && (upper < 0 || upper > base + last_delta);
}

/* One batch's records rendered into a buffer of their own, then copied to o at o->len when they fit in
 * o's fixed room (the last batches of a render_span_into, where the writers' room checks, which ask for
 * more than they write, would refuse a batch that fits): 0 taken, 1 they do not fit, -1 damage, -2 out of
 * memory. Calls no Python. */
static int render_aside(Reader *rd, long long count, const LineStyle *st, const Bounds *b, Out *o,
                        Py_ssize_t *lines, Err *err) {
    Out t = {NULL, 0, 0, 0, 0, NULL, NULL, 0};
    int rc = render_section(rd, count, st, b, &t, NULL, NULL, NULL, lines, err);
    if (rc == 0 && t.len > o->cap - o->len) rc = 1;
    if (rc == 0 && t.len) {
        memcpy(o->buf + o->len, t.buf, (size_t)t.len);
        o->len += t.len;
    }
    PyMem_RawFree(t.buf);
    return rc;
}

/* Walks the whole v2 batches at the start of d[0:n] (header checks as batchheader.read_batch_header,
 * then the order of offsets, span_in_order, then the CRC, then render_section); stops before the first
 * one it does not take, or (a fixed output, so->each 0) before the first whose lines do not fit
 * (so->full). 0, or -2 when out of memory. Runs without the GIL (o->ts holds the entry point's saved
 * thread state). */
static int span_walk(const uint8_t *d, Py_ssize_t n, const char *prefix, Py_ssize_t prefix_len, int mode, Out *o,
                     SpanOut *so, int64_t min_offset, int final, int64_t upper, const RecFilter *filter) {
    Py_ssize_t pos = 0;
    int aside = 0; /* a fixed output ran out of room in place once: batches are rendered aside from then on */
    while (n - pos >= 61) {
        const uint8_t *p = d + pos;
        int64_t base = be64(p);
        int32_t length = be32(p + 8);
        if (p[16] != 2 || length < 49) break; /* legacy magic, unknown magic, or a bad length */
        Py_ssize_t size = (Py_ssize_t)length + 12;
        if (size > n - pos) break; /* cut off by the end of the buffer */
        int32_t last_delta = be32(p + 23);
        if (base < 0 || !span_in_order(d, n, pos, size, base, last_delta, min_offset, final, upper)) break;
        int attributes = (int16_t)((uint16_t)p[21] << 8 | p[22]);
        if (attributes & 0x07) break; /* compressed: the caller decompresses it */
        if (crc32c(p + 21, (size_t)(size - 21)) != (uint32_t)be32(p + 17)) break;
        int32_t count = be32(p + 57);
        Err err;
        if (check_count(size - 61, count, &err) < 0) break;
        LineStyle st = {prefix, prefix_len, (attributes & 0x08) != 0, (attributes & 0x20) != 0,
                        (attributes & 0x10) != 0, be64(p + 43), mode};
        Reader rd = {p + 61, size - 61, 0, base, be64(p + 27), be64(p + 35), (attributes & 0x08) != 0};
        Bounds b;
        memset(&b, 0, sizeof b);
        b.has_lo = b.strict = 1; /* a record below the base offset: the batch is the caller's */
        b.lo = base;
        b.filter = filter;
        Py_ssize_t mark = o->len, lines = so->lines, each = so->each_ends.n;
        Reader start = rd;
        int rc = aside ? 1 : render_section(&rd, count, &st, &b, o, NULL, so->each ? &so->each_ends : NULL,
                                            so->each ? &so->each_stamps : NULL, &so->lines, &err);
        if (rc != 0 && o->fixed && (aside || o->oom)) { /* no room left in place: this batch and the rest aside */
            o->len = mark;
            o->oom = 0;
            so->lines = lines;
            aside = 1;
            rc = render_aside(&start, count, &st, &b, o, &so->lines, &err);
            if (rc == 1) {
                so->lines = lines;
                so->full = 1;
                break;
            }
        }
        if (rc == -2) return -2;
        if (rc == -1) { /* damaged records: the batch is not taken */
            o->len = mark;
            so->lines = lines;
            so->each_ends.n = so->each_stamps.n = each;
            break;
        }
        pos += size;
        min_offset = base + last_delta + 1;
        if (i64s_add(&so->batch_ends, pos) < 0 || i64s_add(&so->last_offsets, base + last_delta) < 0 ||
            i64s_add(&so->line_ends, o->len) < 0)
            return -2;
    }
    so->consumed = pos;
    return 0;
}

#endif /* KAFKAFS_KERNEL_SPAN_H */
