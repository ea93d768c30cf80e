/*
 * The kernel's record reader: Kafka's varints and one record of a v2 records section, every read
 * checked against the end of the record it belongs to (kafkafs/format/records.py is the reference).
 */
#ifndef KAFKAFS_KERNEL_RECORDS_H
#define KAFKAFS_KERNEL_RECORDS_H

#include <Python.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------------------------------------ records */

/* Where one decoding failed: a message for CorruptRecordError. */
typedef struct {
    char msg[160];
} Err;

/* A zig-zag varint (bits 32: at most 5 bytes) or varlong (bits 64: at most 10 bytes), as records.py's
 * _zigzag reads it, with the same messages. */
static int rd_zigzag(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, int64_t *out, Err *err, int bits) {
    const char *name = bits == 32 ? "varint" : "varlong";
    const int max_shift = bits == 32 ? 35 : 70;
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end) {
            snprintf(err->msg, sizeof err->msg, "records do not parse: index out of range");
            return -1;
        }
        uint8_t b = d[p++];
        /* Only a varlong reaches shift 63: there a last byte above 1 would overflow 64 bits. */
        if (shift == 63 && b < 0x80 && (b & 0x7F) > 1) goto out_of_range;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            if (bits == 32 && raw > 0xFFFFFFFFULL) goto out_of_range;
            *out = (int64_t)((raw >> 1) ^ ((uint64_t)0 - (raw & 1)));
            *pos = p;
            return 0;
        }
        shift += 7;
        if (shift >= max_shift) {
            snprintf(err->msg, sizeof err->msg, "%s longer than %d bytes", name, max_shift / 7);
            return -1;
        }
    }
out_of_range:
    snprintf(err->msg, sizeof err->msg, "%s out of %d-bit range", name, bits);
    return -1;
}

/* The one- and two-byte varints (almost all of them) inline; the rest, and every error, by rd_zigzag. */
#define ZIGZAG_FAST(d, end, pos, out)                                                            \
    do {                                                                                         \
        Py_ssize_t p_ = *(pos);                                                                  \
        if (p_ < (end) && (d)[p_] < 0x80) {                                                      \
            uint64_t raw_ = (d)[p_];                                                             \
            *(out) = (int64_t)((raw_ >> 1) ^ ((uint64_t)0 - (raw_ & 1)));                        \
            *(pos) = p_ + 1;                                                                     \
            return 0;                                                                            \
        }                                                                                        \
        if (p_ + 1 < (end) && (d)[p_ + 1] < 0x80) {                                              \
            uint64_t raw_ = ((uint64_t)(d)[p_] & 0x7F) | (uint64_t)(d)[p_ + 1] << 7;             \
            *(out) = (int64_t)((raw_ >> 1) ^ ((uint64_t)0 - (raw_ & 1)));                        \
            *(pos) = p_ + 2;                                                                     \
            return 0;                                                                            \
        }                                                                                        \
    } while (0)

static inline int rd_varint(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, int64_t *out, Err *err) {
    ZIGZAG_FAST(d, end, pos, out);
    return rd_zigzag(d, end, pos, out, err, 32);
}

static inline int rd_varlong(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, int64_t *out, Err *err) {
    ZIGZAG_FAST(d, end, pos, out);
    return rd_zigzag(d, end, pos, out, err, 64);
}

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
    int is_null;
} Span;

/* One record parsed in place: spans into the records section. */
typedef struct {
    int64_t offset;
    int64_t timestamp;
    Span key;
    Span value;
    Py_ssize_t headers_pos; /* first header's position */
    int64_t header_count;
    Py_ssize_t end;
} Rec;

/* A key, value or header part: its length, then its bytes (inlined: several per record; sp is null on
 * every path that fails, so that no caller sees it unset). */
static inline __attribute__((always_inline)) int rd_span(const uint8_t *d, Py_ssize_t rend, Py_ssize_t *pos, Span *sp,
                                                          Err *err) {
    int64_t n;
    sp->p = NULL;
    sp->n = 0;
    sp->is_null = 1;
    if (rd_varint(d, rend, pos, &n, err) < 0) return -1;
    if (n < 0) return 0; /* any negative length is null, as Kafka reads it */
    if (n > rend - *pos) {
        snprintf(err->msg, sizeof err->msg, "a key or value of %lld bytes runs past its record", (long long)n);
        return -1;
    }
    sp->p = d + *pos;
    sp->n = (Py_ssize_t)n;
    sp->is_null = 0;
    *pos += (Py_ssize_t)n;
    return 0;
}

typedef struct {
    const uint8_t *d;
    Py_ssize_t end;
    Py_ssize_t pos;
    int64_t base_offset;
    int64_t first_ts;
    int64_t max_ts;
    int log_append;
} Reader;

/* Parses the next record (and checks every header) into r; -1 with err set when it does not parse. */
static int next_record(Reader *rd, Rec *r, Err *err) {
    const uint8_t *d = rd->d;
    Py_ssize_t pos = rd->pos;
    int64_t length;
    if (rd_varint(d, rd->end, &pos, &length, err) < 0) return -1;
    if (length < 6 || length > rd->end - pos) {
        snprintf(err->msg, sizeof err->msg, "record length %lld does not fit the batch", (long long)length);
        return -1;
    }
    Py_ssize_t rend = pos + (Py_ssize_t)length;
    pos += 1; /* attributes: unused */
    int64_t ts_delta, offset_delta, count;
    if (rd_varlong(d, rend, &pos, &ts_delta, err) < 0) return -1;
    if (rd_varint(d, rend, &pos, &offset_delta, err) < 0) return -1;
    if (rd_span(d, rend, &pos, &r->key, err) < 0) return -1;
    if (rd_span(d, rend, &pos, &r->value, err) < 0) return -1;
    if (rd_varint(d, rend, &pos, &count, err) < 0) return -1;
    if (count < 0 || count > rend - pos) {
        snprintf(err->msg, sizeof err->msg, "header count %lld", (long long)count);
        return -1;
    }
    r->headers_pos = pos;
    r->header_count = count;
    for (int64_t h = 0; h < count; h++) {
        Span k, v;
        if (rd_span(d, rend, &pos, &k, err) < 0) return -1;
        if (k.is_null) {
            snprintf(err->msg, sizeof err->msg, "header key is null");
            return -1;
        }
        if (rd_span(d, rend, &pos, &v, err) < 0) return -1;
    }
    if (pos != rend) {
        snprintf(err->msg, sizeof err->msg, "record declares %lld bytes but holds %lld", (long long)length,
                 (long long)(length + pos - rend));
        return -1;
    }
    r->offset = (int64_t)((uint64_t)rd->base_offset + (uint64_t)offset_delta);
    r->timestamp = rd->log_append ? rd->max_ts : (int64_t)((uint64_t)rd->first_ts + (uint64_t)ts_delta);
    r->end = rend;
    rd->pos = rend;
    return 0;
}

static int check_count(Py_ssize_t size, long long count, Err *err) {
    if (count < 0 || count > size / 7) {
        snprintf(err->msg, sizeof err->msg, "record count %lld cannot fit in %lld bytes", count, (long long)size);
        return -1;
    }
    return 0;
}

#endif /* KAFKAFS_KERNEL_RECORDS_H */
