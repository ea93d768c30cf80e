/*
 * The kernel's multi-batch entry point: CRC-32C, and render_span, which walks the whole batches at the
 * start of a buffer of a .log, checks each one's CRC and renders its records, with no Python between
 * batches (kafkafs/format/jsonspan.py holds the reference and the wrapper). Included once, by
 * _kernel.c, after _kernel_render.h.
 *
 * CRC-32C: the SSE4.2 crc32 instruction when the CPU has it (checked once, at module init), else a
 * slicing-by-8 table; both give what the crc32c package gives (tests/format/test_kernel_span.py).
 */
#ifndef KAFKAFS_KERNEL_SPAN_H
#define KAFKAFS_KERNEL_SPAN_H

#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define KAFKAFS_CRC_HW 1
#endif

/* ------------------------------------------------------------------------------------ CRC-32C */

static uint32_t crc_table[8][256];
static int crc_use_hw = 0;

static void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
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

/* crc32c(data, hardware=None) for the tests: hardware True/False forces the path (False when absent). */
static PyObject *k_crc32c(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    int force = -1;
    if (!PyArg_ParseTuple(args, "y*|i", &data, &force)) return NULL;
    uint32_t c;
#ifdef KAFKAFS_CRC_HW
    if (force == 1 && !crc_use_hw) {
        PyBuffer_Release(&data);
        Py_RETURN_NONE;
    }
    if (force == 1 || (force == -1 && crc_use_hw)) c = ~crc32c_hw(0xFFFFFFFFu, data.buf, (size_t)data.len);
    else
#endif
        c = ~crc32c_sw(0xFFFFFFFFu, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

/* tune_malloc(): for a short-lived command that renders spans (consume): blocks up to 32 MiB from
 * the heap and 64 MiB of free heap kept, so span outputs reuse memory instead of fresh mmap'd pages
 * that the OS zeroes on every call (glibc's default past 128 KiB); True when applied (glibc). */
static PyObject *k_tune_malloc(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
#if defined(__GLIBC__)
    if (mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) && mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024)) Py_RETURN_TRUE;
#endif
    Py_RETURN_FALSE;
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

/* Walks the whole v2 batches at the start of d[0:n] (header checks as batchheader.read_batch_header,
 * then the order of offsets, span_in_order, then the CRC, then render_section); stops before the first
 * one it does not take. 0, or -2 when out of memory. Runs without the GIL (o->ts holds the entry
 * point's saved thread state). */
static int span_walk(const uint8_t *d, Py_ssize_t n, const char *prefix, Py_ssize_t prefix_len, int mode, Out *o,
                     SpanOut *so, int64_t min_offset, int final, int64_t upper, const RecFilter *filter) {
    Py_ssize_t pos = 0;
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
        Py_ssize_t mark = o->len, lines = so->lines;
        int rc = render_section(&rd, count, &st, &b, o, NULL, NULL, &so->lines, &err);
        if (rc == -2) return -2;
        if (rc == -1) { /* damaged records: the batch is not taken */
            o->len = mark;
            so->lines = lines;
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

/* span_cuts(buf, step, min_offset, final, upper) -> (cuts, next_min_offset), cuts as bytes of native
 * int64: 0, then batch boundaries at least step apart, then where the walk stopped; next_min_offset:
 * past the last offset of the last batch walked (min_offset when none). The walk reads lengths,
 * attributes and offsets only (no CRC): it passes uncompressed v2 batches that are whole in buf and keep
 * the order of offsets (span_in_order: from min_offset on, each one's offsets below the next one's base;
 * final: buf ends where the data ends, and the last batch ends below upper, the next segment's base or
 * -1); it stops at anything else. Consume renders the pieces between cuts on several threads
 * (render_span checks everything else). */
static PyObject *k_span_cuts(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    Py_ssize_t step;
    long long min_offset, upper;
    int final;
    if (!PyArg_ParseTuple(args, "y*nLpL", &buf, &step, &min_offset, &final, &upper)) return NULL;
    I64s cuts = {NULL, 0, 0};
    const uint8_t *d = (const uint8_t *)buf.buf;
    Py_ssize_t n = buf.len, pos = 0, last_cut = 0;
    int64_t expect = min_offset;
    int ok = i64s_add(&cuts, 0) == 0;
    while (ok && n - pos >= 61) {
        const uint8_t *p = d + pos;
        int64_t base = be64(p);
        int32_t length = be32(p + 8), last_delta = be32(p + 23);
        if (p[16] != 2 || length < 49 || (Py_ssize_t)length + 12 > n - pos || (p[22] & 0x07)) break;
        if (!span_in_order(d, n, pos, (Py_ssize_t)length + 12, base, last_delta, expect, final, upper)) break;
        expect = base + last_delta + 1;
        pos += (Py_ssize_t)length + 12;
        if (pos - last_cut >= step) {
            ok = i64s_add(&cuts, pos) == 0;
            last_cut = pos;
        }
    }
    if (ok && pos != last_cut) ok = i64s_add(&cuts, pos) == 0;
    PyBuffer_Release(&buf);
    PyObject *result = NULL;
    if (!ok) PyErr_NoMemory();
    else result = Py_BuildValue("(NL)", i64s_bytes(&cuts), (long long)expect);
    PyMem_RawFree(cuts.v);
    return result;
}

/* render_span(prefix, buf, mode, lengths, min_offset, final, upper[, filter]) -> (data, consumed, lines,
 * batch_ends, last_offsets, line_ends), the arrays as bytes of native int64 (jsonspan.py makes them
 * array('q')). min_offset: the least base offset the first batch may have (-1: any); final: buf ends
 * where the data ends; upper: the next segment's base offset (-1: none); see span_in_order. filter: see
 * _kernel_filter.h (only the records it passes are rendered). */
static PyObject *k_render_span(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer prefix, buf;
    int mode, lengths, final;
    long long min_offset, upper;
    PyObject *filter_obj = NULL;
    if (!PyArg_ParseTuple(args, "y*y*ipLpL|O", &prefix, &buf, &mode, &lengths, &min_offset, &final, &upper,
                          &filter_obj))
        return NULL;
    RecFilter filter;
    int filtered;
    if (filter_parse(filter_obj, &filter, &filtered) < 0) {
        PyBuffer_Release(&prefix);
        PyBuffer_Release(&buf);
        return NULL;
    }
    PyObject *result = NULL;
    Out o = {NULL, 0, 0, lengths, 0, NULL, NULL};
    SpanOut so;
    memset(&so, 0, sizeof so);
    if (mode < 0 || mode > 2) {
        PyErr_SetString(PyExc_ValueError, "bad mode");
        goto done;
    }
    if (!lengths) {
        Py_ssize_t cap = buf.len < PY_SSIZE_T_MAX / 4 ? buf.len * 3 + 4096 : buf.len;
        o.bytes = PyBytes_FromStringAndSize(NULL, cap);
        if (o.bytes == NULL) goto done;
        o.buf = PyBytes_AS_STRING(o.bytes);
        o.cap = cap;
    }
    PyThreadState *ts = gil_release();
    o.ts = &ts;
    int rc = span_walk((const uint8_t *)buf.buf, buf.len, (const char *)prefix.buf, prefix.len, mode, &o, &so,
                       (int64_t)min_offset, final, (int64_t)upper, filtered ? &filter : NULL);
    gil_restore(&ts);
    o.ts = NULL;
    if (rc < 0) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *data;
    if (lengths) {
        data = PyBytes_FromStringAndSize("", 0);
    } else {
        if (_PyBytes_Resize(&o.bytes, o.len) < 0) goto done;
        data = o.bytes;
        o.bytes = NULL;
    }
    if (data == NULL) goto done;
    PyObject *be = i64s_bytes(&so.batch_ends), *lo = i64s_bytes(&so.last_offsets), *le = i64s_bytes(&so.line_ends);
    if (be && lo && le) result = Py_BuildValue("(NnnNNN)", data, so.consumed, so.lines, be, lo, le);
    else {
        Py_DECREF(data);
        Py_XDECREF(be);
        Py_XDECREF(lo);
        Py_XDECREF(le);
    }
done:
    Py_XDECREF(o.bytes);
    PyMem_RawFree(so.batch_ends.v);
    PyMem_RawFree(so.last_offsets.v);
    PyMem_RawFree(so.line_ends.v);
    filter_release(&filter);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&buf);
    return result;
}

#endif
