/*
 * kafkafs.format._kernel: the compiled record kernel.
 *
 * Decodes the records section of one RecordBatch v2 (already CRC-checked and decompressed by the
 * Python layer) and renders its JSON lines (SPEC section 3) in one pass, byte for byte as the Python
 * reference does (kafkafs/format/records.py, jsonembed.py, jsonrender.py; tests/format/
 * test_kernel_differential.py holds them together). Every read is bounds-checked against the end of
 * the record it belongs to; damage raises CorruptRecordError, never reads outside the buffer.
 *
 * Files: _kernel_text.h (the GIL rule, the output buffer, UTF-8, JSON strings, base64; _kernel_json.h, embeddable JSON),
 * _kernel_records.h (varints, one record), _kernel_render.h (the lines of one records section),
 * _kernel_span.h (CRC-32C, render_span: many whole batches of a .log at once), this one (decoding
 * into columns, rendering, the module).
 *
 * Functions, wrapped by kafkafs/format/kernel.py (arguments in the method table at the end): setup,
 * decode (into columns), render (what 0: bytes, 1: line lengths, 2: (bytes, offsets, line ends),
 * 3: (bytes, number of lines)), render_columns (decoded columns), render_value, render_span,
 * crc32c. Modes: 0 auto, 1 string, 2 base64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *CorruptError = NULL; /* kafkafs.errors.CorruptRecordError */
static PyObject *HeaderType = NULL;   /* kafkafs.format.records.Header */
static PyObject *NoHeaders = NULL;    /* the shared empty tuple for records without headers */

#include "_kernel_text.h"
#include "_kernel_records.h"
#include "_kernel_filter.h" /* which records a reader wants: key, headers, a bitmap of offsets */
#include "_kernel_render.h"
#include "_kernel_span.h"
#include "_kernel_indent.h" /* indent_json, compiled: by-offset/N.json */
#include "_kernel_omap.h" /* the cleaner's offset map: MD5 and probe */
#include "_kernel_keys.h" /* the key index: entries of a segment, sorting, the table */

static PyObject *raise_corrupt(const char *msg) {
    PyErr_SetString(CorruptError ? CorruptError : PyExc_ValueError, msg);
    return NULL;
}

#include "_kernel_arrow.h" /* ArrowBuilder (arrow's): Spark's scan into Arrow buffers */

/* ------------------------------------------------------------------------------------ decode */

static PyObject *bytes_or_none(const Span *sp) {
    if (sp->is_null) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)sp->p, sp->n);
}

static PyObject *k_decode(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    long long base_offset, first_ts, max_ts, count;
    int attributes;
    if (!PyArg_ParseTuple(args, "y*LLLiL", &data, &base_offset, &first_ts, &max_ts, &attributes, &count)) return NULL;
    Err err;
    PyObject *offsets = NULL, *timestamps = NULL, *keys = NULL, *values = NULL, *headers = NULL, *result = NULL;
    if (check_count(data.len, count, &err) < 0) {
        raise_corrupt(err.msg);
        goto done;
    }
    offsets = PyList_New(count);
    timestamps = PyList_New(count);
    keys = PyList_New(count);
    values = PyList_New(count);
    headers = PyList_New(count);
    if (!offsets || !timestamps || !keys || !values || !headers) goto done;
    Reader rd = {(const uint8_t *)data.buf, data.len, 0, base_offset, first_ts, max_ts, (attributes & 0x08) != 0};
    for (Py_ssize_t i = 0; i < count; i++) {
        Rec r;
        if (next_record(&rd, &r, &err) < 0) {
            raise_corrupt(err.msg);
            goto done;
        }
        PyObject *o;
        if ((o = PyLong_FromLongLong(r.offset)) == NULL) goto done;
        PyList_SET_ITEM(offsets, i, o);
        if ((o = PyLong_FromLongLong(r.timestamp)) == NULL) goto done;
        PyList_SET_ITEM(timestamps, i, o);
        if ((o = bytes_or_none(&r.key)) == NULL) goto done;
        PyList_SET_ITEM(keys, i, o);
        if ((o = bytes_or_none(&r.value)) == NULL) goto done;
        PyList_SET_ITEM(values, i, o);
        if (r.header_count == 0) {
            Py_INCREF(NoHeaders);
            PyList_SET_ITEM(headers, i, NoHeaders);
            continue;
        }
        PyObject *list = PyList_New(r.header_count);
        if (list == NULL) goto done;
        PyList_SET_ITEM(headers, i, list);
        Py_ssize_t pos = r.headers_pos;
        for (Py_ssize_t h = 0; h < r.header_count; h++) {
            Span k, v; /* already checked by next_record */
            if (rd_span(rd.d, r.end, &pos, &k, &err) < 0 || rd_span(rd.d, r.end, &pos, &v, &err) < 0) {
                raise_corrupt(err.msg);
                goto done;
            }
            PyObject *hk = PyUnicode_DecodeUTF8((const char *)k.p, k.n, "replace");
            if (hk == NULL) goto done;
            PyObject *hv = bytes_or_none(&v);
            if (hv == NULL) {
                Py_DECREF(hk);
                goto done;
            }
            PyObject *pair = PyObject_CallFunctionObjArgs(HeaderType, hk, hv, NULL);
            Py_DECREF(hk);
            Py_DECREF(hv);
            if (pair == NULL) goto done;
            PyList_SET_ITEM(list, h, pair);
        }
    }
    if (rd.pos != data.len) {
        snprintf(err.msg, sizeof err.msg, "%lld bytes left over after %lld records", (long long)(data.len - rd.pos), count);
        raise_corrupt(err.msg);
        goto done;
    }
    result = PyTuple_Pack(5, offsets, timestamps, keys, values, headers);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(timestamps);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(headers);
    PyBuffer_Release(&data);
    return result;
}

/* ------------------------------------------------------------------------------------ render
 * (LineStyle, Bounds, I64s and render_section are in _kernel_render.h) */

static PyObject *k_render(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer prefix, data;
    long long base_offset, first_ts, max_ts, producer_id, count;
    int attributes, mode, what;
    PyObject *lo_o, *hi_o, *ts_lo_o, *ts_hi_o, *filter_obj = NULL;
    if (!PyArg_ParseTuple(args, "y*y*LLLiLLiOOOOi|O", &prefix, &data, &base_offset, &first_ts, &max_ts, &attributes,
                          &producer_id, &count, &mode, &lo_o, &hi_o, &ts_lo_o, &ts_hi_o, &what, &filter_obj))
        return NULL;
    RecFilter filter;
    int filtered;
    if (filter_parse(filter_obj, &filter, &filtered) < 0) {
        PyBuffer_Release(&prefix);
        PyBuffer_Release(&data);
        return NULL;
    }
    PyObject *result = NULL;
    Out o = {NULL, 0, 0, what == 1, 0, NULL, NULL};
    I64s offsets = {NULL, 0, 0}, ends = {NULL, 0, 0};
    Bounds b;
    memset(&b, 0, sizeof b);
    if (filtered) b.filter = &filter;
    Err err;
    if (mode < 0 || mode > 2 || what < 0 || what > 3) {
        PyErr_SetString(PyExc_ValueError, "bad mode or what");
        goto done;
    }
    if (parse_bound(lo_o, 0, &b.lo, &b.has_lo, &b.empty) < 0 || parse_bound(hi_o, 1, &b.hi, &b.has_hi, &b.empty) < 0 ||
        parse_bound(ts_lo_o, 0, &b.ts_lo, &b.has_ts_lo, &b.empty) < 0 ||
        parse_bound(ts_hi_o, 1, &b.ts_hi, &b.has_ts_hi, &b.empty) < 0)
        goto done;
    if (check_count(data.len, count, &err) < 0) {
        raise_corrupt(err.msg);
        goto done;
    }
    if (!o.count_only && out_grow(&o, data.len * 2 + count * 160 + 64) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    LineStyle st = {(const char *)prefix.buf, prefix.len, (attributes & 0x08) != 0, (attributes & 0x20) != 0,
                    (attributes & 0x10) != 0, producer_id, mode};
    Reader rd = {(const uint8_t *)data.buf, data.len, 0, base_offset, first_ts, max_ts, (attributes & 0x08) != 0};
    int rc;
    Py_ssize_t lines = 0;
    PyThreadState *ts = gil_release();
    rc = render_section(&rd, count, &st, &b, &o, what == 2 ? &offsets : NULL, what == 1 || what == 2 ? &ends : NULL,
                        &lines, &err);
    gil_restore(&ts);
    if (rc == -1) {
        raise_corrupt(err.msg);
        goto done;
    }
    if (rc == -2) {
        PyErr_NoMemory();
        goto done;
    }
    if (what == 0) {
        result = PyBytes_FromStringAndSize(o.buf, o.len);
    } else if (what == 3) {
        result = Py_BuildValue("(y#n)", o.buf, o.len, lines);
    } else if (what == 1) {
        /* ends hold the running length; lengths are their differences */
        for (Py_ssize_t i = ends.n - 1; i > 0; i--) ends.v[i] -= ends.v[i - 1];
        result = i64s_list(&ends);
    } else {
        PyObject *out = PyBytes_FromStringAndSize(o.buf, o.len);
        PyObject *offs = out ? i64s_list(&offsets) : NULL;
        PyObject *es = offs ? i64s_list(&ends) : NULL;
        if (es != NULL) result = PyTuple_Pack(3, out, offs, es);
        Py_XDECREF(out);
        Py_XDECREF(offs);
        Py_XDECREF(es);
    }
done:
    PyMem_RawFree(o.buf);
    PyMem_RawFree(offsets.v);
    PyMem_RawFree(ends.v);
    filter_release(&filter);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&data);
    return result;
}

/* A bytes-like or None item of a column as a span; -1 with a Python error otherwise. */
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

static int put_column_value(Out *o, PyObject *obj, int mode) {
    Span sp;
    Py_buffer view;
    if (span_of(obj, &sp, &view) < 0) return -1;
    int rc = put_value(o, sp.p, sp.n, sp.is_null, mode);
    if (view.obj) PyBuffer_Release(&view);
    if (rc < 0) PyErr_NoMemory();
    return rc;
}

static int put_column_headers(Out *o, PyObject *hs, int mode) {
    PyObject *fast = PySequence_Fast(hs, "headers must be a sequence");
    if (fast == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int rc = 0;
    for (Py_ssize_t h = 0; h < n && rc == 0; h++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(fast, h);
        PyObject *pf = PySequence_Fast(pair, "a header must be a (key, value) pair");
        if (pf == NULL) {
            rc = -1;
            break;
        }
        if (PySequence_Fast_GET_SIZE(pf) != 2) {
            Py_DECREF(pf);
            PyErr_SetString(PyExc_TypeError, "a header must be a (key, value) pair");
            rc = -1;
            break;
        }
        PyObject *k = PySequence_Fast_GET_ITEM(pf, 0);
        PyObject *v = PySequence_Fast_GET_ITEM(pf, 1);
        Py_DECREF(pf); /* the pair (still referenced by the headers sequence) keeps k and v alive */
        Py_ssize_t klen;
        const char *key = PyUnicode_AsUTF8AndSize(k, &klen);
        if (key == NULL) {
            rc = -1;
            break;
        }
        if ((h && out_byte(o, ',') < 0) || OUT_LIT(o, "{\"key\":") < 0 || put_string(o, (const uint8_t *)key, klen) < 0 ||
            OUT_LIT(o, ",\"value\":") < 0) {
            PyErr_NoMemory();
            rc = -1;
            break;
        }
        rc = put_column_value(o, v, mode);
        if (rc == 0 && out_byte(o, '}') < 0) {
            PyErr_NoMemory();
            rc = -1;
        }
    }
    Py_DECREF(fast);
    return rc;
}

static PyObject *k_render_columns(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer prefix;
    PyObject *offsets, *timestamps, *keys, *values, *headers;
    int log_append, control, transactional, mode;
    long long producer_id;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "y*O!O!O!O!O!pppLinn", &prefix, &PyList_Type, &offsets, &PyList_Type, &timestamps,
                          &PyList_Type, &keys, &PyList_Type, &values, &PyList_Type, &headers, &log_append, &control,
                          &transactional, &producer_id, &mode, &start, &stop))
        return NULL;
    PyObject *result = NULL;
    Out o = {NULL, 0, 0, 0, 0, NULL, NULL};
    Py_ssize_t n = PyList_GET_SIZE(offsets);
    if (PyList_GET_SIZE(timestamps) != n || PyList_GET_SIZE(keys) != n || PyList_GET_SIZE(values) != n ||
        PyList_GET_SIZE(headers) != n || mode < 0 || mode > 2) {
        PyErr_SetString(PyExc_ValueError, "columns of different lengths, or a bad mode");
        goto done;
    }
    if (start < 0) start = 0;
    if (stop > n) stop = n;
    LineStyle st = {(const char *)prefix.buf, prefix.len, log_append, control, transactional, producer_id, mode};
    for (Py_ssize_t i = start; i < stop; i++) {
        long long offset = PyLong_AsLongLong(PyList_GET_ITEM(offsets, i));
        if (offset == -1 && PyErr_Occurred()) goto done;
        long long ts = PyLong_AsLongLong(PyList_GET_ITEM(timestamps, i));
        if (ts == -1 && PyErr_Occurred()) goto done;
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (put_line_head(&o, &st, offset, ts) < 0) goto oom;
        if (control && mode == MODE_AUTO) { /* SPEC §8: a control record's key and value decoded */
            Span cks, cvs;
            Py_buffer kview, vview;
            if (span_of(key, &cks, &kview) < 0) goto done;
            if (span_of(PyList_GET_ITEM(values, i), &cvs, &vview) < 0) {
                if (kview.obj) PyBuffer_Release(&kview);
                goto done;
            }
            int crc = put_control_key(&o, &cks, mode);
            if (crc == 0) crc = OUT_LIT(&o, ",\"value\":");
            if (crc == 0) crc = put_control_value(&o, &cks, &cvs, mode);
            if (kview.obj) PyBuffer_Release(&kview);
            if (vview.obj) PyBuffer_Release(&vview);
            if (crc < 0) goto oom;
        } else {
            if (put_column_value(&o, key, mode) < 0) goto done;
            if (OUT_LIT(&o, ",\"value\":") < 0) goto oom;
            if (put_column_value(&o, PyList_GET_ITEM(values, i), mode) < 0) goto done;
        }
        if (OUT_LIT(&o, ",\"headers\":[") < 0) goto oom;
        if (put_column_headers(&o, PyList_GET_ITEM(headers, i), mode) < 0) goto done;
        if (out_byte(&o, ']') < 0) goto oom;
        Span ks;
        Py_buffer view;
        if (span_of(key, &ks, &view) < 0) goto done;
        int rc = put_line_tail(&o, &st, &ks);
        if (view.obj) PyBuffer_Release(&view);
        if (rc < 0) goto oom;
    }
    result = PyBytes_FromStringAndSize(o.buf ? o.buf : "", o.len);
    goto done;
oom:
    PyErr_NoMemory();
done:
    PyMem_RawFree(o.buf);
    PyBuffer_Release(&prefix);
    return result;
}

static PyObject *k_render_value(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obj;
    int mode;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &mode)) return NULL;
    if (mode < 0 || mode > 2) {
        PyErr_SetString(PyExc_ValueError, "bad mode");
        return NULL;
    }
    Out o = {NULL, 0, 0, 0, 0, NULL, NULL};
    if (put_column_value(&o, obj, mode) < 0) {
        PyMem_RawFree(o.buf);
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize(o.buf ? o.buf : "", o.len);
    PyMem_RawFree(o.buf);
    return result;
}

static PyObject *k_setup(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *err, *header, *empty;
    if (!PyArg_ParseTuple(args, "OOO", &err, &header, &empty)) return NULL;
    Py_INCREF(err);
    Py_INCREF(header);
    Py_INCREF(empty);
    Py_XSETREF(CorruptError, err);
    Py_XSETREF(HeaderType, header);
    Py_XSETREF(NoHeaders, empty);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", k_setup, METH_VARARGS, "setup(CorruptRecordError, Header, no_headers)"},
    {"decode", k_decode, METH_VARARGS, "decode(data, base_offset, first_ts, max_ts, attributes, count)"},
    {"render", k_render, METH_VARARGS,
     "render(prefix, data, base_offset, first_ts, max_ts, attributes, producer_id, count, mode, lo, hi, ts_lo, "
     "ts_hi, what[, filter])"},
    {"render_columns", k_render_columns, METH_VARARGS,
     "render_columns(prefix, offsets, timestamps, keys, values, headers, log_append, control, transactional, "
     "producer_id, mode, start, stop)"},
    {"render_value", k_render_value, METH_VARARGS, "render_value(data_or_None, mode)"},
    {"render_span", k_render_span, METH_VARARGS,
     "render_span(prefix, buf, mode, lengths, min_offset, final, upper[, filter])"},
    {"crc32c", k_crc32c, METH_VARARGS, "crc32c(data, hardware=-1)"},
    {"span_cuts", k_span_cuts, METH_VARARGS, "span_cuts(buf, step, min_offset, final, upper)"},
    {"indent_json", k_indent_json, METH_VARARGS, "indent_json(compact, step)"},
    {"tune_malloc", k_tune_malloc, METH_NOARGS, "tune_malloc() -> bool"},
    {"omap_put", k_omap_put, METH_VARARGS, "omap_put(keys, offsets, lo, hi, off, limit, size) -> (taken, size)"},
    {"omap_retain", k_omap_retain, METH_VARARGS, "omap_retain(keys, offsets, lo, hi, off, latest) -> bytearray"},
    {"md5_halves", k_md5_halves, METH_VARARGS, "md5_halves(data) -> (lo, hi)"},
    KEYS_METHODS /* _kernel_keys.h */
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernel", "kafkafs's compiled record kernel", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernel(void) {
    crc32c_init();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && arrow_module_init(m) < 0) Py_CLEAR(m); /* ArrowBuilder: _kernel_arrow.h */
    return m;
}
