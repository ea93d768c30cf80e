/*
 * The kernel's record filter: which records of a batch a reader wants, decided from the record's bytes
 * before anything is rendered (kafkafs/format/recordfilter.py is the reference and the wrapper).
 *
 * A filter holds any of: a key the record's key must equal, byte for byte; header conditions (a header
 * whose key is the given name, with the given value when one is given; all of them must hold); a
 * bitmap of offsets (bit (offset - base) set: the table's kept records). Header keys that are not
 * valid UTF-8, or that hold U+FFFD, match no name (the Python side sees such keys decoded with
 * replacement characters and cannot tell them apart).
 */
#ifndef KAFKAFS_KERNEL_FILTER_H
#define KAFKAFS_KERNEL_FILTER_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_records.h"
#include "_kernel_text.h"

#define FILTER_MAX_HEADERS 8

typedef struct {
    Span name;
    Span value; /* is_null: any value (only the name must match) */
} HeaderCond;

typedef struct {
    int has_key;
    Span key;
    int headers;
    HeaderCond header[FILTER_MAX_HEADERS];
    const uint8_t *bits; /* NULL: no bitmap */
    int64_t bits_base;
    int64_t bits_count; /* offsets the bitmap covers */
    /* the Python buffers the spans point into, released by filter_release */
    Py_buffer views[2 + 2 * FILTER_MAX_HEADERS];
    int nviews;
} RecFilter;

static void filter_release(RecFilter *f) {
    for (int i = 0; i < f->nviews; i++) PyBuffer_Release(&f->views[i]);
    f->nviews = 0;
}

/* A bytes-like object as a span whose buffer the filter keeps; -1 with a Python error. */
static int filter_span(RecFilter *f, PyObject *obj, Span *sp) {
    Py_buffer *view = &f->views[f->nviews];
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    f->nviews++;
    sp->p = (const uint8_t *)view->buf;
    sp->n = view->len;
    sp->is_null = 0;
    return 0;
}

/* filter_parse(obj): None (no filter: returns 0 and leaves *used 0), or the tuple
 * (key or None, ((name, value or None), ...), bitmap or None, bitmap base). -1 with a Python error. */
static int filter_parse(PyObject *obj, RecFilter *f, int *used) {
    memset(f, 0, sizeof *f);
    *used = 0;
    if (obj == NULL || obj == Py_None) return 0;
    PyObject *key, *headers, *bits;
    long long base;
    if (!PyArg_ParseTuple(obj, "OOOL", &key, &headers, &bits, &base)) return -1;
    *used = 1;
    if (key != Py_None) {
        if (filter_span(f, key, &f->key) < 0) goto fail;
        f->has_key = 1;
    }
    PyObject *fast = PySequence_Fast(headers, "the header conditions must be a sequence");
    if (fast == NULL) goto fail;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > FILTER_MAX_HEADERS) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "too many header conditions");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name, *value;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "OO", &name, &value) ||
            filter_span(f, name, &f->header[i].name) < 0) {
            Py_DECREF(fast);
            goto fail;
        }
        if (value == Py_None) {
            f->header[i].value.is_null = 1;
        } else if (filter_span(f, value, &f->header[i].value) < 0) {
            Py_DECREF(fast);
            goto fail;
        }
        f->headers++;
    }
    Py_DECREF(fast);
    if (bits != Py_None) {
        Span sp;
        if (filter_span(f, bits, &sp) < 0) goto fail;
        f->bits = sp.p;
        f->bits_base = base;
        f->bits_count = (int64_t)sp.n * 8;
    }
    return 0;
fail:
    filter_release(f);
    return -1;
}

static inline int span_equal(const Span *a, const uint8_t *p, Py_ssize_t n) {
    return a->n == n && (n == 0 || memcmp(a->p, p, (size_t)n) == 0);
}

/* Whether a header key may match a name: valid UTF-8 holding no U+FFFD (see the top). */
static int header_key_plain(const uint8_t *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i + 2 < n; i++)
        if (p[i] == 0xEF && p[i + 1] == 0xBF && p[i + 2] == 0xBD) return 0;
    return utf8_valid(p, n);
}

/* Whether the record r (parsed from d) passes the filter. Its headers were checked by next_record. */
static int filter_passes(const RecFilter *f, const uint8_t *d, const Rec *r) {
    if (f->bits != NULL) {
        int64_t rel = (int64_t)((uint64_t)r->offset - (uint64_t)f->bits_base);
        if (rel < 0 || rel >= f->bits_count || !(f->bits[rel >> 3] & (1u << (rel & 7)))) return 0;
    }
    if (f->has_key && (r->key.is_null || !span_equal(&f->key, r->key.p, r->key.n))) return 0;
    for (int c = 0; c < f->headers; c++) {
        const HeaderCond *hc = &f->header[c];
        Py_ssize_t pos = r->headers_pos;
        int found = 0;
        for (int64_t h = 0; h < r->header_count && !found; h++) {
            Span k, v;
            Err err;
            if (rd_span(d, r->end, &pos, &k, &err) < 0 || rd_span(d, r->end, &pos, &v, &err) < 0) return 0;
            if (!span_equal(&hc->name, k.p, k.n) || !header_key_plain(k.p, k.n)) continue;
            if (hc->value.is_null) found = 1;
            else found = !v.is_null && span_equal(&hc->value, v.p, v.n);
        }
        if (!found) return 0;
    }
    return 1;
}

#endif /* KAFKAFS_KERNEL_FILTER_H */
