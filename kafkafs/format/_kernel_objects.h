/*
 * The Python objects the kernel raises, makes and takes: kafkafs.errors.CorruptRecordError,
 * kafkafs.format.records.Header and the shared empty tuple of records without headers (set once by
 * setup(), in _kernel.c), raise_corrupt, and span_of (a bytes-like or None handed by Python, as a span).
 */
#ifndef KAFKAFS_KERNEL_OBJECTS_H
#define KAFKAFS_KERNEL_OBJECTS_H

#include <Python.h>

#include "_kernel_records.h"

static PyObject *CorruptError = NULL; /* kafkafs.errors.CorruptRecordError */
static PyObject *HeaderType = NULL;   /* kafkafs.format.records.Header */
static PyObject *NoHeaders = NULL;    /* the shared empty tuple for records without headers */

/* Raise CorruptRecordError (ValueError before setup) with msg; returns NULL. */
static PyObject *raise_corrupt(const char *msg) {
    PyErr_SetString(CorruptError ? CorruptError : PyExc_ValueError, msg);
    return NULL;
}

/* A bytes-like or None as a span; -1 with a Python error otherwise. */
static int span_of(PyObject *obj, Span *sp, Py_buffer *view) {
    view->obj = NULL;
    if (obj == Py_None) {
        sp->p = NULL;
        sp->n = 0;
        sp->is_null = 1;
        return 0;
    }
    if (PyBytes_Check(obj)) {
        sp->p = (const uint8_t *)PyBytes_AS_STRING(obj);
        sp->n = PyBytes_GET_SIZE(obj);
        sp->is_null = 0;
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    sp->p = (const uint8_t *)view->buf;
    sp->n = view->len;
    sp->is_null = 0;
    return 0;
}

#endif /* KAFKAFS_KERNEL_OBJECTS_H */
