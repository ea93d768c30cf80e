/*
 * The buffers of the kernel's Arrow side (_kernel_arrow.h): a growing buffer owned by a bytearray (handed
 * to pyarrow without a copy), validity bits, and a binary column (validity, int32 offsets, data).
 * Every function needs the GIL.
 */
#ifndef KAFKAFS_KERNEL_ARROWBUF_H
#define KAFKAFS_KERNEL_ARROWBUF_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ buffers */

/* A growing buffer owned by a bytearray, which finish() hands to pyarrow without a copy. */
typedef struct {
    PyObject *ba;
    char *p;
    Py_ssize_t len, cap;
} GBuf;

static int gb_reserve(GBuf *b, Py_ssize_t extra) {
    if (b->cap - b->len >= extra) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1024;
    while (cap - b->len < extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    if (b->ba == NULL) {
        b->ba = PyByteArray_FromStringAndSize(NULL, cap);
        if (b->ba == NULL) return -1;
    } else if (PyByteArray_Resize(b->ba, cap) < 0) {
        return -1;
    }
    b->p = PyByteArray_AS_STRING(b->ba);
    b->cap = cap;
    return 0;
}

static inline int gb_put(GBuf *b, const void *p, Py_ssize_t n) {
    if (b->cap - b->len < n && gb_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, p, (size_t)n);
    b->len += n;
    return 0;
}

static inline int gb_i64(GBuf *b, int64_t v) { return gb_put(b, &v, 8); }
static inline int gb_i32(GBuf *b, int32_t v) { return gb_put(b, &v, 4); }

/* Appends validity bit number i (bits are appended in order, least significant first). */
static inline int gb_bit(GBuf *b, int64_t i, int valid) {
    if ((i & 7) == 0) {
        if (gb_reserve(b, 1) < 0) return -1;
        b->p[b->len++] = 0;
    }
    if (valid) b->p[b->len - 1] |= (char)(1 << (i & 7));
    return 0;
}

/* The bytearray holding exactly the buffer's bytes (an empty one when nothing was written). */
static PyObject *gb_take(GBuf *b) {
    PyObject *ba = b->ba;
    if (ba == NULL) {
        ba = PyByteArray_FromStringAndSize(NULL, 0);
    } else if (PyByteArray_Resize(ba, b->len) < 0) {
        return NULL;
    }
    b->ba = NULL;
    b->p = NULL;
    b->len = b->cap = 0;
    return ba;
}

static void gb_free(GBuf *b) {
    Py_CLEAR(b->ba);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* A binary (or string) column: validity, int32 offsets, data. */
typedef struct {
    GBuf valid, offs, data;
    int64_t nulls;
} BinCol;

static int bin_start(BinCol *c) {
    c->nulls = 0;
    return gb_i32(&c->offs, 0);
}

/* Appends one item to a binary column whose item count so far is i; null when p is NULL. */
static inline int bin_add(BinCol *c, int64_t i, const uint8_t *p, Py_ssize_t n) {
    if (gb_bit(&c->valid, i, p != NULL) < 0) return -1;
    if (p == NULL) {
        c->nulls++;
    } else if (gb_put(&c->data, p, n) < 0) {
        return -1;
    }
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "an Arrow binary column passed 2 GiB");
        return -1;
    }
    return gb_i32(&c->offs, (int32_t)c->data.len);
}

static PyObject *bin_take(BinCol *c, int64_t items) {
    PyObject *valid = c->nulls ? gb_take(&c->valid) : (gb_free(&c->valid), Py_NewRef(Py_None));
    PyObject *offs = valid ? gb_take(&c->offs) : NULL;
    PyObject *data = offs ? gb_take(&c->data) : NULL;
    PyObject *t = data ? Py_BuildValue("(LOOOL)", (long long)items, valid, offs, data, (long long)c->nulls) : NULL;
    Py_XDECREF(valid);
    Py_XDECREF(offs);
    Py_XDECREF(data);
    return t;
}

static void bin_free(BinCol *c) {
    gb_free(&c->valid);
    gb_free(&c->offs);
    gb_free(&c->data);
}

#endif /* KAFKAFS_KERNEL_ARROWBUF_H */
