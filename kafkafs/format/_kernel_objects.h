/*
 * The Python objects the kernel makes and raises: kafkafs.errors.CorruptRecordError,
 * kafkafs.format.records.Header and the shared empty tuple of records without headers, set once by
 * setup() (_kernel.c), and raise_corrupt. Stands alone.
 */
#ifndef KAFKAFS_KERNEL_OBJECTS_H
#define KAFKAFS_KERNEL_OBJECTS_H

#include <Python.h>

static PyObject *CorruptError = NULL; /* kafkafs.errors.CorruptRecordError */
static PyObject *HeaderType = NULL;   /* kafkafs.format.records.Header */
static PyObject *NoHeaders = NULL;    /* the shared empty tuple for records without headers */

/* Raise CorruptRecordError (ValueError before setup) with ``msg``; returns NULL. */
static PyObject *raise_corrupt(const char *msg) {
    PyErr_SetString(CorruptError ? CorruptError : PyExc_ValueError, msg);
    return NULL;
}

#endif /* KAFKAFS_KERNEL_OBJECTS_H */
