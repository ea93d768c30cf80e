/*
 * The kernel's Arrow side: ArrowBuilder, which appends the records of v2 batches straight into the
 * buffers of Arrow arrays for Spark's scan (kafkafs/spark/scan.py's _Columns is the reference;
 * tests/spark/test_arrow_differential.py holds them together). The type and its methods live here, with
 * arrow_module_init, which _kernel.c's module init calls.
 *
 * Columns (buffers as pyarrow.Array.from_buffers takes them): offset and timestamp (microseconds)
 * int64, timestampType int32, key and value binary (validity bits, int32 offsets, data) and, with
 * headers, list<struct<key string, value binary>> (list validity and int32 offsets; key offsets and
 * data; value validity, offsets and data). A record without headers has a null list, as in Spark.
 *
 * Methods: add_section (one records section, CRC-checked and decompressed by the caller), add_columns
 * (an already decoded batch: legacy magic), walk (whole uncompressed v2 batches of a segment buffer,
 * CRC-checked here: no Python per batch), finish (the buffers, and a fresh start). Rows of a batch are
 * bounded by offsets [first, end) by bisection over the batch's offsets, as scan.py does. A builder
 * holds the GIL throughout and is used by one thread at a time.
 */
#ifndef KAFKAFS_KERNEL_ARROW_H
#define KAFKAFS_KERNEL_ARROW_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_objects.h"
#include "_kernel_records.h"
#include "_kernel_span.h"
#include "_kernel_text.h"

#include "_kernel_arrowbuf.h"

typedef struct {
    PyObject_HEAD int include_headers;
    int64_t rows, heads, bytes;
    GBuf offset, timestamp, tstype;
    BinCol key, value;
    GBuf list_valid, list_offs; /* headers: the list */
    int64_t list_nulls;
    BinCol hkey, hvalue; /* headers: the struct's children */
    Rec *recs;           /* scratch: the records of one section */
    Py_ssize_t recs_cap;
} ArrowBuilder;

static int ab_start(ArrowBuilder *ab) {
    ab->rows = ab->heads = ab->bytes = ab->list_nulls = 0;
    if (bin_start(&ab->key) < 0 || bin_start(&ab->value) < 0) return -1;
    if (ab->include_headers && (gb_i32(&ab->list_offs, 0) < 0 || bin_start(&ab->hkey) < 0 || bin_start(&ab->hvalue) < 0))
        return -1;
    return 0;
}

/* A header key as Python decodes it (UTF-8, "replace"): valid UTF-8 as it is, else via Python. */
static int ab_header_key(ArrowBuilder *ab, const uint8_t *p, Py_ssize_t n) {
    if (utf8_valid(p, n)) return bin_add(&ab->hkey, ab->heads, p, n);
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p, n, "replace");
    if (text == NULL) return -1;
    Py_ssize_t len;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &len);
    int rc = utf8 == NULL ? -1 : bin_add(&ab->hkey, ab->heads, (const uint8_t *)utf8, len);
    Py_DECREF(text);
    return rc;
}

/* The row's common columns (not its key, value or headers). */
static inline int ab_row(ArrowBuilder *ab, int64_t offset, int64_t millis, int32_t tstype) {
    int64_t micros = (int64_t)((uint64_t)millis * 1000u); /* wraps as pyarrow.compute.multiply does */
    return gb_i64(&ab->offset, offset) < 0 || gb_i64(&ab->timestamp, micros) < 0 || gb_i32(&ab->tstype, tstype) < 0
               ? -1
               : 0;
}

static inline Py_ssize_t bisect_left(const Rec *r, Py_ssize_t n, int64_t x) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (r[mid].offset < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Decodes a whole records section into ab->recs (nothing appended yet); -1 with err set on damage,
 * -2 with a Python error. */
static int ab_parse(ArrowBuilder *ab, Reader *rd, long long count, Err *err) {
    if (check_count(rd->end, count, err) < 0) return -1;
    if (count > ab->recs_cap) {
        Py_ssize_t cap = (Py_ssize_t)count < 128 ? 128 : (Py_ssize_t)count;
        Rec *nr = (Rec *)PyMem_Realloc(ab->recs, (size_t)cap * sizeof(Rec));
        if (nr == NULL) {
            PyErr_NoMemory();
            return -2;
        }
        ab->recs = nr;
        ab->recs_cap = cap;
    }
    for (long long i = 0; i < count; i++)
        if (next_record(rd, &ab->recs[i], err) < 0) return -1;
    if (rd->pos != rd->end) {
        snprintf(err->msg, sizeof err->msg, "%lld bytes left over after %lld records", (long long)(rd->end - rd->pos),
                 count);
        return -1;
    }
    return 0;
}

/* Appends the parsed records of a section that lie in [first, end) (has_end: end applies). */
static long long ab_append(ArrowBuilder *ab, const uint8_t *d, Py_ssize_t count, int32_t tstype, int64_t first,
                           int has_end, int64_t end) {
    const Rec *recs = ab->recs;
    Py_ssize_t lo = count && recs[0].offset >= first ? 0 : bisect_left(recs, count, first);
    Py_ssize_t hi = count;
    if (has_end && count && recs[count - 1].offset >= end) hi = bisect_left(recs, count, end);
    for (Py_ssize_t i = lo; i < hi; i++) {
        const Rec *r = &recs[i];
        if (ab_row(ab, r->offset, r->timestamp, tstype) < 0 ||
            bin_add(&ab->key, ab->rows, r->key.is_null ? NULL : r->key.p, r->key.n) < 0 ||
            bin_add(&ab->value, ab->rows, r->value.is_null ? NULL : r->value.p, r->value.n) < 0)
            return -1;
        ab->bytes += r->key.n + r->value.n;
        if (ab->include_headers) {
            if (gb_bit(&ab->list_valid, ab->rows, r->header_count > 0) < 0) return -1;
            if (r->header_count == 0) ab->list_nulls++;
            Py_ssize_t pos = r->headers_pos;
            for (int64_t h = 0; h < r->header_count; h++) {
                Span k, v;
                Err err;
                (void)rd_span(d, r->end, &pos, &k, &err); /* both checked by next_record */
                (void)rd_span(d, r->end, &pos, &v, &err);
                if (ab_header_key(ab, k.p, k.n) < 0 ||
                    bin_add(&ab->hvalue, ab->heads, v.is_null ? NULL : v.p, v.n) < 0)
                    return -1;
                ab->heads++;
                ab->bytes += k.n + v.n;
            }
            if (ab->heads > INT32_MAX) {
                PyErr_SetString(PyExc_OverflowError, "too many headers for one Arrow batch");
                return -1;
            }
            if (gb_i32(&ab->list_offs, (int32_t)ab->heads) < 0) return -1;
        }
        ab->rows++;
    }
    return hi > lo ? hi - lo : 0;
}

static int ab_bound_end(PyObject *obj, int64_t *end, int *has_end) {
    *has_end = obj != Py_None;
    if (!*has_end) return 0;
    *end = PyLong_AsLongLong(obj);
    return *end == -1 && PyErr_Occurred() ? -1 : 0;
}

/* add_section(data, base_offset, first_ts, max_ts, attributes, count, first, end) -> rows added */
static PyObject *ab_add_section(ArrowBuilder *ab, PyObject *args) {
    Py_buffer data;
    long long base_offset, first_ts, max_ts, count, first;
    int attributes;
    PyObject *end_o;
    if (!PyArg_ParseTuple(args, "y*LLLiLLO", &data, &base_offset, &first_ts, &max_ts, &attributes, &count, &first,
                          &end_o))
        return NULL;
    PyObject *result = NULL;
    int64_t end = 0;
    int has_end;
    Err err;
    Reader rd = {(const uint8_t *)data.buf, data.len, 0, base_offset, first_ts, max_ts, (attributes & 0x08) != 0};
    if (ab_bound_end(end_o, &end, &has_end) < 0) goto done;
    int rc = ab_parse(ab, &rd, count, &err);
    if (rc == -1) raise_corrupt(err.msg);
    if (rc < 0) goto done;
    long long n = ab_append(ab, rd.d, (Py_ssize_t)count, (attributes & 0x08) ? 1 : 0, first, has_end, end);
    if (n >= 0) result = PyLong_FromLongLong(n);
done:
    PyBuffer_Release(&data);
    return result;
}

/* A bytes-like item or None as a pointer (NULL for None) and length; the view must be released. */
static int ab_item(PyObject *obj, const uint8_t **p, Py_ssize_t *n, Py_buffer *view) {
    view->obj = NULL;
    if (obj == Py_None) {
        *p = NULL;
        *n = 0;
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    *p = (const uint8_t *)view->buf;
    *n = view->len;
    return 0;
}

static int ab_add_item(BinCol *c, int64_t i, PyObject *obj, int64_t *bytes) {
    const uint8_t *p;
    Py_ssize_t n;
    Py_buffer view;
    if (ab_item(obj, &p, &n, &view) < 0) return -1;
    int rc = bin_add(c, i, p, n);
    *bytes += n;
    if (view.obj) PyBuffer_Release(&view);
    return rc;
}

/* add_columns(offsets, timestamps, keys, values, headers, tstype, lo, hi): rows lo:hi of decoded lists. */
static PyObject *ab_add_columns(ArrowBuilder *ab, PyObject *args) {
    PyObject *offsets, *timestamps, *keys, *values, *headers;
    int tstype;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!inn", &PyList_Type, &offsets, &PyList_Type, &timestamps, &PyList_Type,
                          &keys, &PyList_Type, &values, &PyList_Type, &headers, &tstype, &lo, &hi))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(offsets);
    if (PyList_GET_SIZE(timestamps) != n || PyList_GET_SIZE(keys) != n || PyList_GET_SIZE(values) != n ||
        PyList_GET_SIZE(headers) != n || lo < 0 || hi > n) {
        PyErr_SetString(PyExc_ValueError, "columns of different lengths, or rows out of range");
        return NULL;
    }
    for (Py_ssize_t i = lo; i < hi; i++) {
        long long offset = PyLong_AsLongLong(PyList_GET_ITEM(offsets, i));
        if (offset == -1 && PyErr_Occurred()) return NULL;
        long long ts = PyLong_AsLongLong(PyList_GET_ITEM(timestamps, i));
        if (ts == -1 && PyErr_Occurred()) return NULL;
        if (ab_row(ab, offset, ts, tstype) < 0 || ab_add_item(&ab->key, ab->rows, PyList_GET_ITEM(keys, i), &ab->bytes) < 0 ||
            ab_add_item(&ab->value, ab->rows, PyList_GET_ITEM(values, i), &ab->bytes) < 0)
            return NULL;
        if (ab->include_headers) {
            PyObject *hs = PySequence_Fast(PyList_GET_ITEM(headers, i), "headers must be a sequence");
            if (hs == NULL) return NULL;
            Py_ssize_t nh = PySequence_Fast_GET_SIZE(hs);
            int rc = gb_bit(&ab->list_valid, ab->rows, nh > 0);
            if (nh == 0) ab->list_nulls++;
            for (Py_ssize_t h = 0; h < nh && rc == 0; h++) {
                PyObject *pair = PySequence_Fast_GET_ITEM(hs, h);
                PyObject *k = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 ? PyTuple_GET_ITEM(pair, 0) : NULL;
                Py_ssize_t klen;
                const char *key = k ? PyUnicode_AsUTF8AndSize(k, &klen) : NULL;
                if (key == NULL) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a header must be a (str, bytes) pair");
                    rc = -1;
                    break;
                }
                rc = bin_add(&ab->hkey, ab->heads, (const uint8_t *)key, klen);
                if (rc == 0) rc = ab_add_item(&ab->hvalue, ab->heads, PyTuple_GET_ITEM(pair, 1), &ab->bytes);
                ab->bytes += klen;
                ab->heads++;
            }
            Py_DECREF(hs);
            if (rc < 0 || gb_i32(&ab->list_offs, (int32_t)ab->heads) < 0) return NULL;
        }
        ab->rows++;
    }
    return PyLong_FromSsize_t(hi > lo ? hi - lo : 0);
}

#define WALK_PARTIAL 0 /* stopped where buf holds no whole batch */
#define WALK_PYTHON 1  /* stopped at a batch to take the Python way (compressed, legacy, damaged, zeros) */
#define WALK_END 2     /* reached a batch at or past the end offset */
#define WALK_FULL 3    /* enough rows or bytes for an Arrow batch */

/* walk(buf, pos, first, end, ts_lo, max_batch, batch_rows, max_bytes) -> (pos, status): appends the
 * whole uncompressed v2 batches from pos, skipping what scan.py's _read_piece skips by header (once its CRC holds). */
static PyObject *ab_walk(ArrowBuilder *ab, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t pos;
    long long first, max_batch, batch_rows, max_bytes;
    PyObject *end_o, *ts_lo_o;
    if (!PyArg_ParseTuple(args, "y*nLOOLLL", &buf, &pos, &first, &end_o, &ts_lo_o, &max_batch, &batch_rows,
                          &max_bytes))
        return NULL;
    const uint8_t *b = (const uint8_t *)buf.buf;
    PyObject *result = NULL;
    int64_t end = 0, ts_lo = 0;
    int has_end, has_ts_lo, status = WALK_PARTIAL;
    if (ab_bound_end(end_o, &end, &has_end) < 0 || ab_bound_end(ts_lo_o, &ts_lo, &has_ts_lo) < 0) goto done;
    while (pos >= 0 && buf.len - pos >= 17) {
        const uint8_t *h = b + pos;
        static const uint8_t zeros[12];
        int64_t base = be64(h);
        int32_t length = be32(h + 8);
        if (memcmp(h, zeros, 12) == 0 || h[16] != 2 || length < 49 || (long long)length + 12 > max_batch || base < 0) {
            status = WALK_PYTHON;
            break;
        }
        if (buf.len - pos < (Py_ssize_t)length + 12) break; /* WALK_PARTIAL */
        int attributes = (h[21] << 8) | h[22];
        int64_t last_delta = be32(h + 23);
        if (last_delta > 0 && base > INT64_MAX - last_delta) {
            status = WALK_PYTHON;
            break;
        }
        int64_t last = base + last_delta, max_ts = be64(h + 35);
        Py_ssize_t next = pos + length + 12;
        int skip = last < first;
        if (!skip && has_end && base >= end) {
            status = WALK_END;
            break;
        }
        /* lastOffsetDelta, the control bit and maxTimestamp are inside the CRC: a batch is skipped by them
         * only once its CRC holds (a damaged one goes the Python way, which fails or logs it: R23-12) */
        skip = skip || (attributes & 0x20) || (has_ts_lo && max_ts < ts_lo);
        if ((!skip && (attributes & 0x07) != 0) || crc32c(h + 21, (size_t)length - 9) != (uint32_t)be32(h + 17)) {
            status = WALK_PYTHON; /* compressed (read the Python way, which checks its CRC), or damaged */
            break;
        }
        if (skip) goto skip;
        Reader rd = {h + 61, length - 49, 0, base, be64(h + 27), max_ts, (attributes & 0x08) != 0};
        Err err;
        int32_t count = be32(h + 57);
        int rc = ab_parse(ab, &rd, count, &err);
        if (rc == -2) goto done;
        if (rc == -1) {
            status = WALK_PYTHON;
            break;
        }
        if (ab_append(ab, rd.d, count, (attributes & 0x08) ? 1 : 0, first, has_end, end) < 0) goto done;
        pos = next;
        if (ab->rows >= batch_rows || ab->bytes >= max_bytes) {
            status = WALK_FULL;
            break;
        }
        continue;
    skip:
        pos = next;
    }
    result = Py_BuildValue("(ni)", pos, status);
done:
    PyBuffer_Release(&buf);
    return result;
}

/* finish() -> (rows, offset, timestamp, tstype, key, value, headers): key and value are (items, validity
 * or None, offsets, data, null count); headers None or (list validity or None, list offsets, list null
 * count, header key column, header value column). The builder starts again empty. */
static PyObject *ab_finish(ArrowBuilder *ab, PyObject *unused) {
    (void)unused;
    PyObject *parts[7] = {NULL};
    PyObject *result = NULL;
    parts[0] = PyLong_FromLongLong(ab->rows);
    parts[1] = gb_take(&ab->offset);
    parts[2] = gb_take(&ab->timestamp);
    parts[3] = gb_take(&ab->tstype);
    parts[4] = bin_take(&ab->key, ab->rows);
    parts[5] = bin_take(&ab->value, ab->rows);
    if (ab->include_headers) {
        PyObject *lv = ab->list_nulls ? gb_take(&ab->list_valid) : (gb_free(&ab->list_valid), Py_NewRef(Py_None));
        PyObject *lo = gb_take(&ab->list_offs);
        PyObject *hk = bin_take(&ab->hkey, ab->heads);
        PyObject *hv = bin_take(&ab->hvalue, ab->heads);
        if (lv && lo && hk && hv) parts[6] = Py_BuildValue("(OOLOO)", lv, lo, (long long)ab->list_nulls, hk, hv);
        Py_XDECREF(lv);
        Py_XDECREF(lo);
        Py_XDECREF(hk);
        Py_XDECREF(hv);
    } else {
        parts[6] = Py_NewRef(Py_None);
    }
    int ok = 1;
    for (int i = 0; i < 7; i++) ok = ok && parts[i] != NULL;
    if (ok && ab_start(ab) == 0) result = PyTuple_Pack(7, parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6]);
    for (int i = 0; i < 7; i++) Py_XDECREF(parts[i]);
    return result;
}

static PyObject *ab_get_rows(ArrowBuilder *ab, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(ab->rows);
}

static PyObject *ab_get_bytes(ArrowBuilder *ab, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(ab->bytes);
}

static int ab_init(ArrowBuilder *ab, PyObject *args, PyObject *kwds) {
    (void)kwds;
    int include_headers;
    if (!PyArg_ParseTuple(args, "p", &include_headers)) return -1;
    if (ab->rows || ab->offset.ba) {
        PyErr_SetString(PyExc_RuntimeError, "ArrowBuilder is initialised once");
        return -1;
    }
    ab->include_headers = include_headers;
    return ab_start(ab);
}

static void ab_dealloc(ArrowBuilder *ab) {
    gb_free(&ab->offset);
    gb_free(&ab->timestamp);
    gb_free(&ab->tstype);
    bin_free(&ab->key);
    bin_free(&ab->value);
    gb_free(&ab->list_valid);
    gb_free(&ab->list_offs);
    bin_free(&ab->hkey);
    bin_free(&ab->hvalue);
    PyMem_Free(ab->recs);
    Py_TYPE(ab)->tp_free((PyObject *)ab);
}

static PyMethodDef ab_methods[] = {
    {"add_section", (PyCFunction)ab_add_section, METH_VARARGS,
     "add_section(data, base_offset, first_ts, max_ts, attributes, count, first, end) -> rows"},
    {"add_columns", (PyCFunction)ab_add_columns, METH_VARARGS,
     "add_columns(offsets, timestamps, keys, values, headers, tstype, lo, hi) -> rows"},
    {"walk", (PyCFunction)ab_walk, METH_VARARGS,
     "walk(buf, pos, first, end, ts_lo, max_batch, batch_rows, max_bytes) -> (pos, status)"},
    {"finish", (PyCFunction)ab_finish, METH_NOARGS, "finish() -> the buffers; the builder starts again empty"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ab_getset[] = {
    {"rows", (getter)ab_get_rows, NULL, "rows appended since the last finish()", NULL},
    {"bytes", (getter)ab_get_bytes, NULL, "key, value and header bytes appended since the last finish()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ArrowBuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kafkafs.format._kernel.ArrowBuilder",
    .tp_basicsize = sizeof(ArrowBuilder),
    .tp_dealloc = (destructor)ab_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ArrowBuilder(include_headers): Kafka records appended into Arrow buffers",
    .tp_methods = ab_methods,
    .tp_getset = ab_getset,
    .tp_init = (initproc)ab_init,
    .tp_new = PyType_GenericNew,
};

/* Called from the module's init: adds ArrowBuilder; -1 with an error set. */
static int arrow_module_init(PyObject *m) {
    if (PyType_Ready(&ArrowBuilderType) < 0) return -1;
    Py_INCREF(&ArrowBuilderType);
    if (PyModule_AddObject(m, "ArrowBuilder", (PyObject *)&ArrowBuilderType) < 0) {
        Py_DECREF(&ArrowBuilderType);
        return -1;
    }
    return 0;
}

#endif /* KAFKAFS_KERNEL_ARROW_H */
