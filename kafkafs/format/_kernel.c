/*
 * kafkafs.format._kernel: the compiled record kernel.
 *
 * Decodes the records section of one RecordBatch v2 (already CRC-checked and decompressed by the
 * Python layer) and renders its JSON lines (SPEC section 3) in one pass, byte for byte as the Python
 * reference does (kafkafs/format/records.py, jsonembed.py, jsonrender.py; tests/format/
 * test_kernel_differential.py holds them together). Every read is bounds-checked against the end of
 * the record it belongs to; damage raises CorruptRecordError, never reads outside the buffer.
 *
 * This file holds every function Python calls (the k_* functions, in the method table at the end,
 * wrapped by kafkafs/format/kernel.py and the modules it names) and the module; the headers hold what
 * they are made of, each one standing alone behind its include guard (tests/format/test_kernel_layout.py):
 *   _kernel_text.h     the GIL rule, the output buffer, UTF-8, JSON strings, base64
 *   _kernel_json.h     embeddable JSON: validated, compacted
 *   _kernel_value.h    a key, value or header by mode (auto, string, base64), control record names
 *   _kernel_records.h  varints, one record of a records section
 *   _kernel_objects.h  the Python objects the kernel raises, makes and takes (setup(), raise_corrupt, span_of)
 *   _kernel_filter.h   which records a reader wants (key, headers, a bitmap of offsets)
 *   _kernel_render.h   the lines of one records section (render)
 *   _kernel_span.h     CRC-32C and whole batches of a .log at once (render_span, span_cuts, crc32c)
 *   _kernel_merge.h    consume's interleaving: Merger (render_span_lines feeds it)
 *   _kernel_lines.h    the write path: lines and records into a v2 batch (encode_lines, encode_section)
 *   _kernel_indent.h   indent_json (by-offset/N.json)
 *   _kernel_omap.h     the cleaner's offset map: MD5 and its probe (omap_put, omap_retain, md5_halves)
 *   _kernel_keys.h     the key index: a segment's entries, sorting, the table (keys_*)
 *   _kernel_arrow.h    ArrowBuilder: Spark's scan into Arrow buffers (with _kernel_arrowbuf.h)
 *
 * Modes: 0 auto, 1 string, 2 base64. render's what: 0 bytes, 1 line lengths, 2 (bytes, offsets, line
 * ends), 3 (bytes, number of lines), 4 (bytes, offsets, timestamps, line ends) as int64 bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_arrow.h"   /* ArrowBuilder: Spark's scan into Arrow buffers */
#include "_kernel_filter.h"  /* which records a reader wants: key, headers, a bitmap of offsets */
#include "_kernel_indent.h"  /* indent_json: by-offset/N.json */
#include "_kernel_keys.h"    /* the key index: entries of a segment, sorting, the table */
#include "_kernel_lines.h"   /* the write path: lines and records into a v2 batch */
#include "_kernel_merge.h"   /* consume's interleaving: Merger */
#include "_kernel_objects.h" /* CorruptRecordError, Header, raise_corrupt, span_of */
#include "_kernel_omap.h"    /* the cleaner's offset map: MD5 and probe */
#include "_kernel_records.h" /* varints, one record */
#include "_kernel_render.h"  /* the lines of one records section */
#include "_kernel_span.h"    /* CRC-32C, whole batches of a .log at once */
#include "_kernel_text.h"    /* the GIL rule, the output buffer, UTF-8, JSON strings, base64 */
#include "_kernel_value.h"   /* a key, value or header by mode */

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
    Out o = {NULL, 0, 0, what == 1, 0, NULL, NULL, 0};
    I64s offsets = {NULL, 0, 0}, ends = {NULL, 0, 0}, stamps = {NULL, 0, 0};
    Bounds b;
    memset(&b, 0, sizeof b);
    if (filtered) b.filter = &filter;
    Err err;
    if (mode < 0 || mode > 2 || what < 0 || what > 4) {
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
    rc = render_section(&rd, count, &st, &b, &o, what == 2 || what == 4 ? &offsets : NULL, what == 1 || what >= 2 ? &ends : NULL,
                        what == 4 ? &stamps : NULL, &lines, &err);
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
    } else if (what == 4) { /* the merge's (_kernel_merge.h): arrays as bytes of native int64 */
        result = Py_BuildValue("(y#NNN)", o.buf ? o.buf : "", o.len, i64s_bytes(&offsets), i64s_bytes(&stamps),
                               i64s_bytes(&ends));
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
    PyMem_RawFree(stamps.v);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&data);
    return result;
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
    Out o = {NULL, 0, 0, 0, 0, NULL, NULL, 0};
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
    Out o = {NULL, 0, 0, 0, 0, NULL, NULL, 0};
    if (put_column_value(&o, obj, mode) < 0) {
        PyMem_RawFree(o.buf);
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize(o.buf ? o.buf : "", o.len);
    PyMem_RawFree(o.buf);
    return result;
}

/* ------------------------------------------------------------------------------------ spans: many batches of a .log at once (_kernel_span.h, _kernel_merge.h) */

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

/* span_walk over buf with the GIL released, the one release of render_span, render_span_into and
 * render_span_lines: lines (or their lengths) into o, the rest into so. 0, or -1 with MemoryError set. */
static int span_walk_released(const Py_buffer *prefix, const Py_buffer *buf, int mode, Out *o, SpanOut *so,
                              int64_t min_offset, int final, int64_t upper, const RecFilter *filter) {
    PyThreadState *ts = gil_release();
    o->ts = &ts;
    int rc = span_walk((const uint8_t *)buf->buf, buf->len, (const char *)prefix->buf, prefix->len, mode, o, so,
                       min_offset, final, upper, filter);
    gil_restore(&ts);
    o->ts = NULL;
    if (rc < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* (first, consumed, lines, batch_ends, last_offsets, line_ends[, full]): what render_span (first: its data)
 * and render_span_into (first: the bytes written; with_full) return. Takes first's reference (NULL: an
 * error is set); NULL on failure. */
static PyObject *span_result(PyObject *first, const SpanOut *so, int with_full) {
    PyObject *be = i64s_bytes(&so->batch_ends), *lo = i64s_bytes(&so->last_offsets), *le = i64s_bytes(&so->line_ends);
    if (first && be && lo && le) {
        if (with_full)
            return Py_BuildValue("(NnnNNNO)", first, so->consumed, so->lines, be, lo, le, so->full ? Py_True : Py_False);
        return Py_BuildValue("(NnnNNN)", first, so->consumed, so->lines, be, lo, le);
    }
    Py_XDECREF(first);
    Py_XDECREF(be);
    Py_XDECREF(lo);
    Py_XDECREF(le);
    return NULL;
}

/* Frees the arrays span_walk gathered in so. */
static void span_out_free(SpanOut *so) {
    PyMem_RawFree(so->batch_ends.v);
    PyMem_RawFree(so->last_offsets.v);
    PyMem_RawFree(so->line_ends.v);
    PyMem_RawFree(so->each_ends.v);
    PyMem_RawFree(so->each_stamps.v);
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
    Out o = {NULL, 0, 0, lengths, 0, NULL, NULL, 0};
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
    if (span_walk_released(&prefix, &buf, mode, &o, &so, (int64_t)min_offset, final, (int64_t)upper,
                           filtered ? &filter : NULL) < 0)
        goto done;
    PyObject *data;
    if (lengths) {
        data = PyBytes_FromStringAndSize("", 0);
    } else {
        if (_PyBytes_Resize(&o.bytes, o.len) < 0) goto done;
        data = o.bytes;
        o.bytes = NULL;
    }
    result = span_result(data, &so, 0);
done:
    Py_XDECREF(o.bytes);
    span_out_free(&so);
    filter_release(&filter);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&buf);
    return result;
}

/* render_span_into(prefix, buf, mode, min_offset, final, upper, out, at[, filter]) -> (written, consumed,
 * lines, batch_ends, last_offsets, line_ends, full): render_span's walk (lines, not lengths) with the lines
 * written straight into out[at:] (a writable buffer: a bytearray, a memoryview slice of one), the GIL
 * released for the whole walk. out[at:at + written] holds the lines of the batches taken; line_ends count
 * from at (as render_span's from its data). The walk also stops before a batch whose lines do not fit in
 * out[at:len(out)], and then full is True (a batch that fits exactly is taken). out[at:len(out)] is the
 * call's own: bytes past at + written may have been written over (the writers write ahead of what they
 * keep), so renders side by side in one buffer each get their own slice. */
static PyObject *k_render_span_into(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer prefix, buf, out;
    int mode, final;
    long long min_offset, upper;
    Py_ssize_t at;
    PyObject *filter_obj = NULL;
    if (!PyArg_ParseTuple(args, "y*y*iLpLw*n|O", &prefix, &buf, &mode, &min_offset, &final, &upper, &out, &at,
                          &filter_obj))
        return NULL;
    RecFilter filter;
    int filtered = 0;
    PyObject *result = NULL;
    SpanOut so;
    memset(&so, 0, sizeof so);
    if (filter_parse(filter_obj, &filter, &filtered) < 0) goto release;
    if (mode < 0 || mode > 2) {
        PyErr_SetString(PyExc_ValueError, "bad mode");
        goto done;
    }
    if (at < 0 || at > out.len) {
        PyErr_SetString(PyExc_ValueError, "at is outside out");
        goto done;
    }
    Out o = {(char *)out.buf + at, 0, out.len - at, 0, 0, NULL, NULL, 1};
    if (span_walk_released(&prefix, &buf, mode, &o, &so, (int64_t)min_offset, final, (int64_t)upper,
                           filtered ? &filter : NULL) < 0)
        goto done;
    result = span_result(PyLong_FromSsize_t(o.len), &so, 1);
done:
    filter_release(&filter);
release:
    span_out_free(&so);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    return result;
}

/* render_span_lines(prefix, buf, mode) -> (data, consumed, batches, last_offset, stamps, ends):
 * render_span's walk (as render_span(prefix, buf, mode, False, -1, True, -1): span_cuts, which cut buf,
 * judged the order of offsets) with, per line, its timestamp and its end in data (int64 bytes);
 * batches: how many it took; last_offset: the last one's last offset (-1 when none was taken). */
static PyObject *k_render_span_lines(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer prefix, buf;
    int mode;
    if (!PyArg_ParseTuple(args, "y*y*i", &prefix, &buf, &mode)) return NULL;
    PyObject *result = NULL;
    Out o = {NULL, 0, 0, 0, 0, NULL, NULL, 0};
    SpanOut so;
    memset(&so, 0, sizeof so);
    so.each = 1;
    if (mode < 0 || mode > 2) {
        PyErr_SetString(PyExc_ValueError, "bad mode");
        goto done;
    }
    Py_ssize_t cap = buf.len < PY_SSIZE_T_MAX / 4 ? buf.len * 3 + 4096 : buf.len;
    o.bytes = PyBytes_FromStringAndSize(NULL, cap);
    if (o.bytes == NULL) goto done;
    o.buf = PyBytes_AS_STRING(o.bytes);
    o.cap = cap;
    if (span_walk_released(&prefix, &buf, mode, &o, &so, -1, 1, -1, NULL) < 0) goto done;
    if (_PyBytes_Resize(&o.bytes, o.len) < 0) goto done;
    long long last = so.last_offsets.n ? (long long)so.last_offsets.v[so.last_offsets.n - 1] : -1;
    PyObject *st = i64s_bytes(&so.each_stamps), *en = i64s_bytes(&so.each_ends);
    if (st && en) {
        result = Py_BuildValue("(NnnLNN)", o.bytes, so.consumed, so.last_offsets.n, last, st, en);
        o.bytes = NULL;
    } else {
        Py_XDECREF(st);
        Py_XDECREF(en);
    }
done:
    Py_XDECREF(o.bytes);
    span_out_free(&so);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&buf);
    return result;
}

/* ------------------------------------------------------------------------------------ the write path (_kernel_lines.h) */

/* encode_lines(data, start, max_lines, max_bytes, first_number, now, limit, epoch, codec, compress,
 * parse) -> (batch or None, end, count): the lines of data (split at b"\n"; the last one ends at the end
 * of data) from byte start, as produce groups them (until max_lines lines, or their bytes,
 * newlines not counted, reach max_bytes), as one v2 batch (encode_batch's bytes: timestamps None are
 * now, CreateTime, base offset 0, leader epoch epoch). end: where the next group starts (len(data) + 1
 * after the last line); count: the lines taken. parse(line, number) is the reference parser for the
 * lines this one does not take (it raises their errors). batch None: the group is the reference's
 * (it would not fit one batch of limit bytes, or a number does not fit). */
static PyObject *k_encode_lines(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    Py_ssize_t start, max_lines, max_bytes;
    long long first_number, now, limit;
    int epoch, codec;
    PyObject *compress, *parse;
    if (!PyArg_ParseTuple(args, "y*nnnLLLiiOO", &data, &start, &max_lines, &max_bytes, &first_number, &now, &limit,
                          &epoch, &codec, &compress, &parse))
        return NULL;
    Builder b;
    memset(&b, 0, sizeof b);
    PyObject *result = NULL;
    const uint8_t *d = (const uint8_t *)data.buf;
    Py_ssize_t n = data.len, pos = start, count = 0, size = 0;
    int python = 0;
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_ValueError, "start is outside the data");
        goto done;
    }
    while (pos <= n && count < max_lines && size < max_bytes) {
        const uint8_t *nl = memchr(d + pos, '\n', (size_t)(n - pos));
        Py_ssize_t end = nl ? nl - d : n;
        const uint8_t *p = d + pos, *e = d + end;
        const uint8_t *q = p;
        int odd_space = 0;
        while (q < e && (*q == ' ' || *q == '\t' || *q == '\r' || *q == 0x0b || *q == 0x0c)) {
            odd_space |= *q == 0x0b || *q == 0x0c;
            q++;
        }
        int rc;
        if (q >= e || *q != '{') { /* a plain line: the value of a record with no key */
            Span key = {NULL, 0, 1}, value = {p, end - pos, 0};
            b.hdr.len = 0;
            rc = builder_add(&b, now, count, &key, &value, 0, 0);
        } else {
            int has_ts;
            int64_t ts = now, hcount, hest;
            Span key, value;
            rc = odd_space ? NEED_PYTHON : parse_object(q, e, &b, &has_ts, &ts, &key, &value, &hcount, &hest);
            if (rc == 0) rc = builder_add(&b, has_ts ? ts : now, count, &key, &value, hcount, hest);
            if (rc == NEED_PYTHON) { /* the reference parses it (and raises its error) */
                PyObject *rec = PyObject_CallFunction(parse, "y#L", p, (Py_ssize_t)(end - pos),
                                                      first_number + (long long)count);
                if (rec == NULL) goto done;
                rc = builder_add_py(&b, rec, 1, now, count);
                Py_DECREF(rec);
                if (rc == -1 && PyErr_Occurred()) goto done;
            }
        }
        if (rc < 0) {
            PyErr_NoMemory();
            goto done;
        }
        if (rc == NEED_PYTHON) python = 1; /* keep counting the lines: the group is the reference's */
        size += end - pos;
        count++;
        pos = end + 1;
    }
    if (python || (b.est > limit && count > 1)) {
        result = Py_BuildValue("(Onn)", Py_None, pos, count);
        goto done;
    }
    PyObject *batch = builder_batch(&b, codec, epoch, compress);
    if (batch != NULL) result = Py_BuildValue("(Nnn)", batch, pos, count);
done:
    builder_free(&b);
    PyBuffer_Release(&data);
    return result;
}

/* encode_section(records, first_ts, offset_deltas) -> bytes or None: encode.py's encode_records of
 * (timestamp, key, value, headers) tuples; None when a record is not the kind it takes (the reference
 * encodes it, or raises its error). */
static PyObject *k_encode_section(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *records, *deltas;
    long long first_ts;
    if (!PyArg_ParseTuple(args, "OLO", &records, &first_ts, &deltas)) return NULL;
    PyObject *fast = PySequence_Fast(records, "records must be a sequence");
    if (fast == NULL) return NULL;
    PyObject *dfast = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    Builder b;
    memset(&b, 0, sizeof b);
    b.fixed_first = 1;
    b.first_ts = first_ts;
    PyObject *result = NULL;
    if (deltas != Py_None) {
        dfast = PySequence_Fast(deltas, "offset_deltas must be a sequence");
        if (dfast == NULL) goto done;
        if (PySequence_Fast_GET_SIZE(dfast) != n) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t index = i;
        if (dfast) {
            long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(dfast, i));
            if ((v == -1 && PyErr_Occurred()) || v < INT32_MIN || v > INT32_MAX) {
                PyErr_Clear();
                result = Py_None;
                Py_INCREF(result);
                goto done;
            }
            index = v;
        }
        int rc = builder_add_py(&b, PySequence_Fast_GET_ITEM(fast, i), 0, 0, index);
        if (rc == -1) goto done;
        if (rc == NEED_PYTHON) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(b.sect.buf ? b.sect.buf : "", b.sect.len);
done:
    builder_free(&b);
    Py_XDECREF(dfast);
    Py_DECREF(fast);
    return result;
}

/* ------------------------------------------------------------------------------------ indent_json (_kernel_indent.h) */

static PyObject *k_indent_json(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer in, stepbuf;
    if (!PyArg_ParseTuple(args, "y*y*", &in, &stepbuf)) return NULL;
    const unsigned char *s = in.buf;
    Py_ssize_t n = in.len, depth = 0, start, end, next_start, next_end;
    const char *step = stepbuf.buf;
    Py_ssize_t step_len = stepbuf.len;
    Out o = {NULL, 0, 0, 0, 0, NULL, NULL, 0};
    int failed = 0;
    int kind = indent_next(s, n, 0, &start, &end);
    while (kind != TOK_NONE && !failed) {
        unsigned char c = s[start];
        int next = indent_next(s, n, end, &next_start, &next_end);
        if (kind == TOK_PUNCT && (c == '{' || c == '[')) {
            unsigned char closer = c == '{' ? '}' : ']';
            if (next == TOK_PUNCT && s[next_start] == closer) {
                char pair[2] = {(char)c, (char)closer};
                failed = out_write(&o, pair, 2) < 0;
                kind = indent_next(s, n, next_end, &start, &end);
                continue;
            }
            depth++;
            failed = out_byte(&o, (char)c) < 0 || indent_line(&o, step, step_len, depth) < 0;
        } else if (kind == TOK_PUNCT && (c == '}' || c == ']')) {
            depth--;
            failed = indent_line(&o, step, step_len, depth) < 0 || out_byte(&o, (char)c) < 0;
        } else if (kind == TOK_PUNCT && c == ',') {
            failed = out_byte(&o, ',') < 0 || indent_line(&o, step, step_len, depth) < 0;
        } else if (kind == TOK_PUNCT) { /* ':' */
            failed = OUT_LIT(&o, ": ") < 0;
        } else {
            failed = out_write(&o, s + start, end - start) < 0;
        }
        kind = next;
        start = next_start;
        end = next_end;
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&stepbuf);
    PyObject *result = NULL;
    if (failed)
        PyErr_NoMemory();
    else
        result = PyBytes_FromStringAndSize(o.buf ? o.buf : "", o.len);
    PyMem_RawFree(o.buf);
    return result;
}

/* ------------------------------------------------------------------------------------ the cleaner's offset map (_kernel_omap.h) */

/* omap_put(keys, offsets, lo, hi, off, limit, size) -> (taken, size): OffsetMap.put_many's loop. */
static PyObject *k_omap_put(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *keys, *offsets;
    Py_buffer lo, hi, off;
    long long limit, size;
    if (!PyArg_ParseTuple(args, "OOw*w*w*LL", &keys, &offsets, &lo, &hi, &off, &limit, &size)) return NULL;
    OmapInput in = {0};
    int64_t slots = 0;
    PyObject *result = NULL;
    if (omap_columns(&lo, &hi, &off, &slots) == 0 && omap_input(keys, offsets, &in) == 0) {
        int64_t *los = lo.buf, *his = hi.buf, *offs = off.buf;
        Py_ssize_t taken = in.n;
        Py_BEGIN_ALLOW_THREADS
        omap_hash(&in, INT64_MAX);
        for (Py_ssize_t j = 0; j < OMAP_PREFETCH; j++) omap_prefetch(&in, j, INT64_MAX, los, his, offs, slots);
        for (Py_ssize_t i = 0; i < in.n; i++) {
            omap_prefetch(&in, i + OMAP_PREFETCH, INT64_MAX, los, his, offs, slots);
            if (in.len[i] < 0) continue;
            if (size >= limit) { /* Kafka checks before every put, a key already there included */
                taken = i;
                break;
            }
            int64_t l = in.hlo[i], h = in.hhi[i];
            int64_t s = omap_slot(los, his, offs, slots, l, h);
            if (offs[s] < 0) {
                los[s] = l;
                his[s] = h;
                size++;
            }
            offs[s] = in.offset[i];
        }
        Py_END_ALLOW_THREADS
        result = Py_BuildValue("nL", taken, size);
    }
    omap_input_free(&in);
    PyBuffer_Release(&lo);
    PyBuffer_Release(&hi);
    PyBuffer_Release(&off);
    return result;
}

/* omap_retain(keys, offsets, lo, hi, off, latest) -> bytearray of 0/1: OffsetMap.retain_flags. */
static PyObject *k_omap_retain(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *keys, *offsets;
    Py_buffer lo, hi, off;
    long long latest;
    if (!PyArg_ParseTuple(args, "OOw*w*w*L", &keys, &offsets, &lo, &hi, &off, &latest)) return NULL;
    OmapInput in = {0};
    int64_t slots = 0;
    PyObject *result = NULL;
    if (omap_columns(&lo, &hi, &off, &slots) == 0 && omap_input(keys, offsets, &in) == 0) {
        result = PyByteArray_FromStringAndSize(NULL, in.n);
        if (result != NULL) {
            uint8_t *flags = (uint8_t *)PyByteArray_AS_STRING(result);
            const int64_t *los = lo.buf, *his = hi.buf, *offs = off.buf;
            Py_BEGIN_ALLOW_THREADS
            omap_hash(&in, latest);
            for (Py_ssize_t j = 0; j < OMAP_PREFETCH; j++) omap_prefetch(&in, j, latest, los, his, offs, slots);
            for (Py_ssize_t i = 0; i < in.n; i++) {
                omap_prefetch(&in, i + OMAP_PREFETCH, latest, los, his, offs, slots);
                int64_t o = in.offset[i];
                if (o > latest) {
                    flags[i] = 1;
                } else if (in.len[i] < 0) {
                    flags[i] = 0;
                } else {
                    int64_t found = offs[omap_slot(los, his, offs, slots, in.hlo[i], in.hhi[i])];
                    flags[i] = found < 0 || o >= found;
                }
            }
            Py_END_ALLOW_THREADS
        }
    }
    omap_input_free(&in);
    PyBuffer_Release(&lo);
    PyBuffer_Release(&hi);
    PyBuffer_Release(&off);
    return result;
}

/* md5_halves(data) -> (lo, hi): the halves of data's MD5 (for the differential tests). */
static PyObject *k_md5_halves(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    int64_t l, h;
    md5_halves(data.buf, (size_t)data.len, &l, &h);
    PyBuffer_Release(&data);
    return Py_BuildValue("LL", (long long)l, (long long)h);
}

/* ------------------------------------------------------------------------------------ the key index (_kernel_keys.h) */

static PyObject *k_keys_span(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    long long seg_base;
    PyObject *filter_obj = NULL;
    if (!PyArg_ParseTuple(args, "y*L|O", &buf, &seg_base, &filter_obj)) return NULL;
    RecFilter filter;
    int filtered;
    if (filter_parse(filter_obj, &filter, &filtered) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    KeysOut ko;
    memset(&ko, 0, sizeof ko);
    const uint8_t *d = (const uint8_t *)buf.buf;
    Py_ssize_t n = buf.len, pos = 0;
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    while (n - pos >= 61) {
        const uint8_t *p = d + pos;
        int64_t base = be64(p);
        int32_t length = be32(p + 8);
        if (p[16] != 2 || length < 49) break;
        Py_ssize_t size = (Py_ssize_t)length + 12;
        if (size > n - pos) break;
        int32_t last_delta = be32(p + 23);
        if (base < 0 || (last_delta > 0 && base > INT64_MAX - last_delta)) break;
        int attributes = (int16_t)((uint16_t)p[21] << 8 | p[22]);
        if (attributes & 0x07) break;
        if (crc32c(p + 21, (size_t)(size - 21)) != (uint32_t)be32(p + 17)) break;
        int32_t count = be32(p + 57);
        Err err;
        if (check_count(size - 61, count, &err) < 0) break;
        Reader rd = {p + 61, size - 61, 0, base, be64(p + 27), be64(p + 35), (attributes & 0x08) != 0};
        Py_ssize_t marks[3] = {ko.entries.n, ko.txns.n, ko.longs.n};
        rc = keys_records(&rd, count, attributes, be64(p + 43), seg_base, filtered ? &filter : NULL, d, &ko, &err);
        if (rc == -2) break;
        if (rc < 0) { /* damage, or an offset out of range: the batch is the caller's */
            ko.entries.n = marks[0];
            ko.txns.n = marks[1];
            ko.longs.n = marks[2];
            rc = 0;
            break;
        }
        if (ko.txns.n > marks[1]) ((int64_t *)(ko.txns.p + marks[1]))[1] = base + last_delta;
        pos += size;
    }
    Py_END_ALLOW_THREADS
    PyObject *result = rc == -2 ? PyErr_NoMemory() : keys_result(&ko, d, pos, 1);
    keys_out_free(&ko);
    filter_release(&filter);
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *k_keys_section(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    long long base, first_ts, max_ts, producer_id, count, seg_base, last_offset;
    int attributes;
    PyObject *filter_obj = NULL;
    if (!PyArg_ParseTuple(args, "y*LLLLiLLL|O", &data, &base, &last_offset, &first_ts, &max_ts, &attributes,
                          &producer_id, &count, &seg_base, &filter_obj))
        return NULL;
    RecFilter filter;
    int filtered;
    if (filter_parse(filter_obj, &filter, &filtered) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    KeysOut ko;
    memset(&ko, 0, sizeof ko);
    Err err;
    PyObject *result = NULL;
    int rc = check_count(data.len, count, &err);
    if (rc == 0) {
        Reader rd = {(const uint8_t *)data.buf, data.len, 0, base, first_ts, max_ts, (attributes & 0x08) != 0};
        Py_BEGIN_ALLOW_THREADS
        rc = keys_records(&rd, count, attributes, producer_id, seg_base, filtered ? &filter : NULL,
                          (const uint8_t *)data.buf, &ko, &err);
        Py_END_ALLOW_THREADS
        if (rc == 0 && ko.txns.n) ((int64_t *)ko.txns.p)[1] = last_offset;
    }
    if (rc == -2) PyErr_NoMemory();
    else if (rc < 0) raise_corrupt(err.msg);
    else result = keys_result(&ko, (const uint8_t *)data.buf, 0, 0);
    keys_out_free(&ko);
    filter_release(&filter);
    PyBuffer_Release(&data);
    return result;
}

static PyObject *k_keys_sort(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "w*", &buf)) return NULL;
    if (buf.len % (Py_ssize_t)sizeof(KeyEntry)) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "not a whole number of key entries");
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sort_entries((KeyEntry *)buf.buf, buf.len / (Py_ssize_t)sizeof(KeyEntry));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (rc < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* keys_counts(entries, bits, counts): adds to counts (a writable array of 2**bits uint64) how many
 * entries have each value of the top bits of h1 (the fanout of an index file is their running sum). */
static PyObject *k_keys_counts(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf, counts;
    int bits;
    if (!PyArg_ParseTuple(args, "y*iw*", &buf, &bits, &counts)) return NULL;
    PyObject *result = NULL;
    if (bits < 0 || bits > 24 || counts.len != (Py_ssize_t)(sizeof(uint64_t) << bits)) {
        PyErr_SetString(PyExc_ValueError, "counts must hold 2**bits uint64 (bits 0..24)");
    } else {
        const KeyEntry *e = (const KeyEntry *)buf.buf;
        Py_ssize_t n = buf.len / (Py_ssize_t)sizeof(KeyEntry);
        uint64_t *c = (uint64_t *)counts.buf;
        Py_BEGIN_ALLOW_THREADS
        if (bits == 0) c[0] += (uint64_t)n;
        else
            for (Py_ssize_t i = 0; i < n; i++) c[e[i].h1 >> (64 - bits)]++;
        Py_END_ALLOW_THREADS
        Py_INCREF(Py_None);
        result = Py_None;
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&counts);
    return result;
}

static PyObject *k_keys_find(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    unsigned long long h1, h2;
    if (!PyArg_ParseTuple(args, "y*KK", &buf, &h1, &h2)) return NULL;
    const KeyEntry *e = (const KeyEntry *)buf.buf;
    Py_ssize_t n = buf.len / (Py_ssize_t)sizeof(KeyEntry), lo = 0, hi = n;
    while (lo < hi) { /* the first entry not below (h1, h2) */
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (e[mid].h1 < h1 || (e[mid].h1 == h1 && e[mid].h2 < h2)) lo = mid + 1;
        else hi = mid;
    }
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = lo; out != NULL && i < n && e[i].h1 == h1 && e[i].h2 == h2; i++) {
        PyObject *item = Py_BuildValue("(II)", e[i].rel, e[i].flags);
        if (item == NULL || PyList_Append(out, item) < 0) Py_CLEAR(out);
        Py_XDECREF(item);
    }
    PyBuffer_Release(&buf);
    return out;
}

/* keys_table(slices, aborted, bitmaps, tombstones) -> (kept, distinct).
 *
 * slices: sorted entry buffers, newest segment first (so the first slice holding a hash holds its
 * latest record); aborted: per slice None or u32 [lo, hi] rel pairs (sorted, disjoint) whose
 * transactional entries do not count; bitmaps: per slice None or a writable bitmap by rel. For each
 * hash, the last entry of the newest slice that has one not aborted is its latest; when it is not a
 * tombstone (or tombstones is true) it is kept: its bit is set in its slice's bitmap. kept counts the
 * hashes kept, distinct every hash with a latest entry. */
static PyObject *k_keys_table(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *slices_o, *aborted_o, *bitmaps_o;
    int tombstones;
    if (!PyArg_ParseTuple(args, "OOOp", &slices_o, &aborted_o, &bitmaps_o, &tombstones)) return NULL;
    PyObject *slices = PySequence_Fast(slices_o, "slices must be a sequence");
    PyObject *aborted = slices ? PySequence_Fast(aborted_o, "aborted must be a sequence") : NULL;
    PyObject *bitmaps = aborted ? PySequence_Fast(bitmaps_o, "bitmaps must be a sequence") : NULL;
    PyObject *result = NULL;
    Py_buffer *views = NULL;
    uint64_t *set = NULL;
    uint8_t *used = NULL;
    if (bitmaps == NULL) goto done;
    Py_ssize_t ns = PySequence_Fast_GET_SIZE(slices);
    if (PySequence_Fast_GET_SIZE(aborted) != ns || PySequence_Fast_GET_SIZE(bitmaps) != ns) {
        PyErr_SetString(PyExc_ValueError, "slices, aborted and bitmaps differ in length");
        goto done;
    }
    views = (Py_buffer *)PyMem_Calloc((size_t)(3 * ns + 1), sizeof(Py_buffer));
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_buffer *sv = views, *av = views + ns, *bv = views + 2 * ns;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < ns; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(slices, i), &sv[i], PyBUF_SIMPLE) < 0) goto done;
        if (sv[i].len % (Py_ssize_t)sizeof(KeyEntry)) {
            PyErr_SetString(PyExc_ValueError, "a slice is not a whole number of key entries");
            goto done;
        }
        total += sv[i].len / (Py_ssize_t)sizeof(KeyEntry);
    }
    for (Py_ssize_t i = 0; i < ns; i++) {
        PyObject *a = PySequence_Fast_GET_ITEM(aborted, i), *b = PySequence_Fast_GET_ITEM(bitmaps, i);
        if (a != Py_None && PyObject_GetBuffer(a, &av[i], PyBUF_SIMPLE) < 0) goto done;
        if (b != Py_None && PyObject_GetBuffer(b, &bv[i], PyBUF_WRITABLE) < 0) {
            if (a != Py_None) PyBuffer_Release(&av[i]);
            goto done;
        }
    }
    Py_ssize_t cap = 16;
    while (cap < 2 * total) cap *= 2;
    set = (uint64_t *)PyMem_RawMalloc((size_t)cap * 2 * sizeof(uint64_t));
    used = (uint8_t *)PyMem_RawCalloc((size_t)cap, 1);
    if (set == NULL || used == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t kept = 0, distinct = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t s = 0; s < ns; s++) {
        const KeyEntry *e = (const KeyEntry *)sv[s].buf;
        Py_ssize_t n = sv[s].len / (Py_ssize_t)sizeof(KeyEntry);
        const uint32_t *ranges = av[s].obj ? (const uint32_t *)av[s].buf : NULL;
        Py_ssize_t pairs = ranges ? av[s].len / (Py_ssize_t)(2 * sizeof(uint32_t)) : 0;
        uint8_t *bits = bv[s].obj ? (uint8_t *)bv[s].buf : NULL;
        Py_ssize_t nbits = bits ? bv[s].len * 8 : 0;
        Py_ssize_t i = 0;
        while (i < n) {
            Py_ssize_t j = i + 1;
            while (j < n && e[j].h1 == e[i].h1 && e[j].h2 == e[i].h2) j++;
            Py_ssize_t latest = -1;
            for (Py_ssize_t k = j - 1; k >= i; k--) {
                if ((e[k].flags & KEY_TRANSACTIONAL) && pairs && in_ranges(ranges, pairs, e[k].rel)) continue;
                latest = k;
                break;
            }
            if (latest >= 0) {
                uint64_t h1 = e[i].h1, h2 = e[i].h2;
                Py_ssize_t slot = (Py_ssize_t)((h1 ^ (h2 * 0x9E3779B97F4A7C15ULL)) & (uint64_t)(cap - 1));
                int fresh = 1;
                while (used[slot]) {
                    if (set[2 * slot] == h1 && set[2 * slot + 1] == h2) {
                        fresh = 0;
                        break;
                    }
                    slot = (slot + 1) & (cap - 1);
                }
                if (fresh) {
                    used[slot] = 1;
                    set[2 * slot] = h1;
                    set[2 * slot + 1] = h2;
                    distinct++;
                    if (tombstones || !(e[latest].flags & KEY_TOMBSTONE)) {
                        kept++;
                        uint32_t rel = e[latest].rel;
                        if (bits && (Py_ssize_t)rel < nbits) bits[rel >> 3] |= (uint8_t)(1u << (rel & 7));
                    }
                }
            }
            i = j;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(nn)", kept, distinct);
done:
    if (views != NULL) {
        Py_ssize_t ns2 = slices ? PySequence_Fast_GET_SIZE(slices) : 0;
        for (Py_ssize_t i = 0; i < 3 * ns2; i++)
            if (views[i].obj) PyBuffer_Release(&views[i]);
        PyMem_Free(views);
    }
    PyMem_RawFree(set);
    PyMem_RawFree(used);
    Py_XDECREF(slices);
    Py_XDECREF(aborted);
    Py_XDECREF(bitmaps);
    return result;
}

/* ------------------------------------------------------------------------------------ the module */

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
    {"render_span_into", k_render_span_into, METH_VARARGS,
     "render_span_into(prefix, buf, mode, min_offset, final, upper, out, at[, filter])"},
    {"crc32c", k_crc32c, METH_VARARGS, "crc32c(data, hardware=-1)"},
    {"encode_lines", k_encode_lines, METH_VARARGS,
     "encode_lines(data, start, max_lines, max_bytes, first_number, now, limit, epoch, codec, compress, parse)"},
    {"encode_section", k_encode_section, METH_VARARGS, "encode_section(records, first_ts, offset_deltas)"},
    {"render_span_lines", k_render_span_lines, METH_VARARGS, "render_span_lines(prefix, buf, mode)"},
    {"span_cuts", k_span_cuts, METH_VARARGS, "span_cuts(buf, step, min_offset, final, upper)"},
    {"indent_json", k_indent_json, METH_VARARGS, "indent_json(compact, step)"},
    {"omap_put", k_omap_put, METH_VARARGS, "omap_put(keys, offsets, lo, hi, off, limit, size) -> (taken, size)"},
    {"omap_retain", k_omap_retain, METH_VARARGS, "omap_retain(keys, offsets, lo, hi, off, latest) -> bytearray"},
    {"md5_halves", k_md5_halves, METH_VARARGS, "md5_halves(data) -> (lo, hi)"},
    {"keys_span", k_keys_span, METH_VARARGS, "keys_span(buf, seg_base[, filter]) -> (entries, txns, longs, consumed)"},
    {"keys_section", k_keys_section, METH_VARARGS,
     "keys_section(data, base, last, first_ts, max_ts, attributes, producer_id, count, seg_base[, filter]) -> "
     "(entries, txns, longs)"},
    {"keys_sort", k_keys_sort, METH_VARARGS, "keys_sort(entries) sorts in place"},
    {"keys_counts", k_keys_counts, METH_VARARGS, "keys_counts(entries, bits, counts) adds the counts of each prefix"},
    {"keys_find", k_keys_find, METH_VARARGS, "keys_find(entries, h1, h2) -> [(rel, flags)]"},
    {"keys_table", k_keys_table, METH_VARARGS, "keys_table(slices, aborted, bitmaps, tombstones) -> (kept, distinct)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernel", "kafkafs's compiled record kernel", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernel(void) {
    crc32c_init();
    text_init();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && arrow_module_init(m) < 0) Py_CLEAR(m); /* ArrowBuilder: _kernel_arrow.h */
    if (m != NULL && merge_module_init(m) < 0) Py_CLEAR(m); /* Merger: _kernel_merge.h */
    return m;
}
