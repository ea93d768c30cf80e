/*
 * The kernel's line rendering: the fixed parts of a line, offset and time bounds, growable int64
 * arrays, and render_section (every record of one batch's records section as JSON lines, or only
 * their lengths).
 */
#ifndef KAFKAFS_KERNEL_RENDER_H
#define KAFKAFS_KERNEL_RENDER_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_filter.h"
#include "_kernel_records.h"
#include "_kernel_text.h"
#include "_kernel_value.h"

/* The fixed parts of a line for a batch's flags. */
typedef struct {
    const char *prefix;
    Py_ssize_t prefix_len;
    int log_append;
    int control;
    int transactional;
    int64_t producer_id;
    int mode;
} LineStyle;

#define HEAD_TS ",\"timestamp\":"
#define HEAD_LOG_APPEND ",\"timestampType\":\"LogAppendTime\",\"key\":"
#define HEAD_CREATE ",\"timestampType\":\"CreateTime\",\"key\":"

/* A line's head, up to its key: when writing, room for all of it made once and written through one pointer
 * (the prefix, two integers of at most 20 characters, the names between them). */
static int put_line_head(Out *o, const LineStyle *st, int64_t offset, int64_t timestamp) {
    if (o->count_only) {
        o->len += st->prefix_len + int_len(offset) + (Py_ssize_t)sizeof(HEAD_TS) - 1 + int_len(timestamp) +
                  (Py_ssize_t)(st->log_append ? sizeof(HEAD_LOG_APPEND) - 1 : sizeof(HEAD_CREATE) - 1);
        return 0;
    }
    Py_ssize_t need = st->prefix_len + 20 + (Py_ssize_t)sizeof(HEAD_TS) + 20 + (Py_ssize_t)sizeof(HEAD_LOG_APPEND);
    if (o->cap - o->len < need && out_grow(o, need) < 0) return -1;
    char *w = o->buf + o->len;
    memcpy(w, st->prefix, (size_t)st->prefix_len);
    w = int_at(w + st->prefix_len, offset);
    memcpy(w, HEAD_TS, sizeof(HEAD_TS) - 1);
    w = int_at(w + sizeof(HEAD_TS) - 1, timestamp);
    if (st->log_append) {
        memcpy(w, HEAD_LOG_APPEND, sizeof(HEAD_LOG_APPEND) - 1);
        w += sizeof(HEAD_LOG_APPEND) - 1;
    } else {
        memcpy(w, HEAD_CREATE, sizeof(HEAD_CREATE) - 1);
        w += sizeof(HEAD_CREATE) - 1;
    }
    o->len = w - o->buf;
    return 0;
}

static int put_line_tail(Out *o, const LineStyle *st, const Span *key) {
    if (st->control) {
        const char *name = control_name(key->p, key->n, key->is_null);
        if (OUT_LIT(o, ",\"control\":\"") < 0 || out_write(o, name, (Py_ssize_t)strlen(name)) < 0 ||
            out_byte(o, '"') < 0)
            return -1;
    }
    if (st->transactional && (OUT_LIT(o, ",\"producerId\":") < 0 || out_int(o, st->producer_id) < 0)) return -1;
    return OUT_LIT(o, "}\n");
}

/* A control record's key and value in mode auto (SPEC §8, jsonrender.control_key_json and
 * control_value_json): a key of exactly 4 bytes is {"version":V,"type":T}; a transaction marker's value
 * (type 0 or 1) of exactly 6 bytes is {"version":V,"coordinatorEpoch":E}; anything else renders as any
 * value does. */
static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

static int put_control_key(Out *o, const Span *key, int mode) {
    if (key->is_null || key->n != 4) return put_value(o, key->p, key->n, key->is_null, mode);
    if (OUT_LIT(o, "{\"version\":") < 0 || out_int(o, be16(key->p)) < 0 || OUT_LIT(o, ",\"type\":") < 0 ||
        out_int(o, be16(key->p + 2)) < 0)
        return -1;
    return out_byte(o, '}');
}

static int put_control_value(Out *o, const Span *key, const Span *value, int mode) {
    int16_t type = (!key->is_null && key->n == 4) ? be16(key->p + 2) : -1;
    if ((type != 0 && type != 1) || value->is_null || value->n != 6)
        return put_value(o, value->p, value->n, value->is_null, mode);
    const uint8_t *p = value->p;
    int32_t epoch = (int32_t)(((uint32_t)p[2] << 24) | ((uint32_t)p[3] << 16) | ((uint32_t)p[4] << 8) | p[5]);
    if (OUT_LIT(o, "{\"version\":") < 0 || out_int(o, be16(p)) < 0 || OUT_LIT(o, ",\"coordinatorEpoch\":") < 0 ||
        out_int(o, epoch) < 0)
        return -1;
    return out_byte(o, '}');
}

/* A bound argument: None, or an int clamped to 64 bits; *empty set when no value can pass it. */
static int parse_bound(PyObject *obj, int is_upper, int64_t *value, int *has, int *empty) {
    *has = 0;
    if (obj == Py_None) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow == 0) {
        *value = v;
        *has = 1;
    } else if ((overflow > 0) != (is_upper != 0)) {
        *empty = 1; /* a lower bound past every value, or an upper bound below every value */
    }
    return 0;
}

typedef struct {
    int64_t lo, hi, ts_lo, ts_hi;
    int has_lo, has_hi, has_ts_lo, has_ts_hi, empty;
    int strict; /* a record that does not pass is damage (render_span: no record below its batch's base) */
    const RecFilter *filter; /* NULL, or the records wanted (_kernel_filter.h): the others are skipped */
} Bounds;

static inline int passes(const Bounds *b, int64_t offset, int64_t ts) {
    if (b->empty) return 0;
    if (b->has_lo && offset < b->lo) return 0;
    if (b->has_hi && offset > b->hi) return 0;
    if (b->has_ts_lo && ts < b->ts_lo) return 0;
    if (b->has_ts_hi && ts >= b->ts_hi) return 0;
    return 1;
}

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} I64s;

static int i64s_add(I64s *a, int64_t x) {
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 128;
        int64_t *nv = (int64_t *)PyMem_RawRealloc(a->v, (size_t)cap * sizeof(int64_t));
        if (nv == NULL) return -1;
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static PyObject *i64s_list(const I64s *a) {
    PyObject *list = PyList_New(a->n);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        PyObject *o = PyLong_FromLongLong(a->v[i]);
        if (o == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, o);
    }
    return list;
}

/* One record's line (r, parsed in the section at d by next_record; lim: the section's end): 0, -1 damage
 * (err set), -2 out of memory. */
static int put_line(Out *o, const LineStyle *st, const uint8_t *d, const Rec *r, const uint8_t *lim, Err *err) {
    if (put_line_head(o, st, r->offset, r->timestamp) < 0) return -2;
    if (st->control && st->mode == MODE_AUTO) {
        if (put_control_key(o, &r->key, st->mode) < 0 || OUT_LIT(o, ",\"value\":") < 0 ||
            put_control_value(o, &r->key, &r->value, st->mode) < 0)
            return -2;
    } else if (put_value_in(o, r->key.p, r->key.n, r->key.is_null, st->mode, lim) < 0 ||
               OUT_LIT(o, ",\"value\":") < 0 ||
               put_value_in(o, r->value.p, r->value.n, r->value.is_null, st->mode, lim) < 0) {
        return -2;
    }
    if (OUT_LIT(o, ",\"headers\":[") < 0) return -2;
    Py_ssize_t pos = r->headers_pos;
    for (int64_t h = 0; h < r->header_count; h++) {
        Span k, v;
        if (rd_span(d, r->end, &pos, &k, err) < 0 || rd_span(d, r->end, &pos, &v, err) < 0) return -1;
        if ((h && out_byte(o, ',') < 0) || OUT_LIT(o, "{\"key\":") < 0 || put_header_key(o, k.p, k.n, lim) < 0 ||
            OUT_LIT(o, ",\"value\":") < 0 || put_value_in(o, v.p, v.n, v.is_null, st->mode, lim) < 0 ||
            out_byte(o, '}') < 0)
            return -2;
    }
    if (out_byte(o, ']') < 0 || put_line_tail(o, st, &r->key) < 0) return -2;
    return 0;
}

/* Renders every passing record of the section; 0 ok, -1 damage (err set), -2 out of memory. Runs
 * with or without the GIL: it calls no Python (an output buffer that is a bytes object takes the GIL
 * to grow through o->ts, by the GIL rule in _kernel_text.h). Optional per line: offsets, ends (the
 * output's length after it) and stamps (its timestamp). */
static int render_section(Reader *rd, long long count, const LineStyle *st, const Bounds *b, Out *o, I64s *offsets,
                          I64s *ends, I64s *stamps, Py_ssize_t *lines, Err *err) {
    const uint8_t *lim = rd->d + rd->end; /* every key and value lies in the section: blocks may read to its end */
    /* Only counting, outside a control batch: what every line has alike (prefix, names, brackets, tail) is
     * counted once, by the writer's own functions, with a one-digit offset and timestamp taken out again. */
    Py_ssize_t alike = -1;
    if (o->count_only && !st->control) {
        Out c = {NULL, 0, 0, 1, 0, NULL, NULL, 0};
        Span none = {NULL, 0, 1};
        (void)(put_line_head(&c, st, 0, 0) || OUT_LIT(&c, ",\"value\":") || OUT_LIT(&c, ",\"headers\":[") ||
               out_byte(&c, ']') || put_line_tail(&c, st, &none));
        alike = c.len - 2;
    }
    for (long long i = 0; i < count; i++) {
        Rec r;
        if (next_record(rd, &r, err) < 0) return -1;
        if (!passes(b, r.offset, r.timestamp)) {
            if (b->strict) {
                snprintf(err->msg, sizeof err->msg, "record offset %lld below the batch's", (long long)r.offset);
                return -1;
            }
            continue;
        }
        if (b->filter != NULL && !filter_passes(b->filter, rd->d, &r)) continue;
        if (alike >= 0) { /* the line's length summed in a register: its parts' lengths, then its headers' */
            Py_ssize_t len = alike + int_len(r.offset) + int_len(r.timestamp) +
                             value_count(r.key.p, r.key.n, r.key.is_null, st->mode, lim) +
                             value_count(r.value.p, r.value.n, r.value.is_null, st->mode, lim);
            Py_ssize_t pos = r.headers_pos;
            for (int64_t h = 0; h < r.header_count; h++) {
                Span k, v;
                if (rd_span(rd->d, r.end, &pos, &k, err) < 0 || rd_span(rd->d, r.end, &pos, &v, err) < 0) return -1;
                /* {"key":K,"value":V} and a comma before every header but the first */
                len += 17 + (h != 0) + header_key_count(k.p, k.n, lim) + value_count(v.p, v.n, v.is_null, st->mode, lim);
            }
            o->len += len;
        } else {
            int rc = put_line(o, st, rd->d, &r, lim, err);
            if (rc < 0) return rc;
        }
        if (offsets && i64s_add(offsets, r.offset) < 0) return -2;
        if (ends && i64s_add(ends, o->len) < 0) return -2;
        if (stamps && i64s_add(stamps, r.timestamp) < 0) return -2;
        (*lines)++;
    }
    if (rd->pos != rd->end) {
        snprintf(err->msg, sizeof err->msg, "%lld bytes left over after %lld records", (long long)(rd->end - rd->pos),
                 count);
        return -1;
    }
    return 0;
}

#endif /* KAFKAFS_KERNEL_RENDER_H */
