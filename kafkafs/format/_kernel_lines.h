/*
 * The kernel's write path: lines written to `append` or `kafkafs produce` (SPEC section 3's rules) into a
 * RecordBatch v2, and records (Python tuples) into a v2 records section. kafkafs/format/lineencode.py wraps
 * them; format/appendlines.py (parse_record_line), format/encode.py (encode_records, encode_batch) and
 * storage's batch_groups are the reference, which the kernel matches byte for byte
 * (tests/format/test_kernel_lines.py). The entry points, encode_lines and encode_section, are in _kernel.c.
 *
 * A line the kernel is not sure of is the reference's: a plain line (first non-blank byte not '{') is
 * copied as the value; a record object is parsed here when a key, value or header value that is JSON
 * text (an object, array, number or boolean, which the reference writes as it is written, whitespace
 * between tokens taken out) has no whitespace inside, strings with the short escapes only, no repeated
 * keys, and numbers that cannot pass a double's range (canon_number); anything else (ISO timestamps,
 * \u escapes inside a value, 1e309, a bad line and its error message) is handed to the Python parser (a
 * callable), whose record is encoded here the same way.
 */
#ifndef KAFKAFS_KERNEL_LINES_H
#define KAFKAFS_KERNEL_LINES_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_objects.h"
#include "_kernel_records.h"
#include "_kernel_span.h"
#include "_kernel_text.h"

/* ------------------------------------------------------------------------------------ varints */

static inline int put_uvarint(Out *o, uint64_t v) {
    uint8_t tmp[10];
    int n = 0;
    while (v >= 0x80) {
        tmp[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    tmp[n++] = (uint8_t)v;
    return out_write(o, tmp, n);
}

/* A value that fits 32 bits as a zig-zag varint. */
static inline int put_varint(Out *o, int64_t v) {
    uint32_t u = (uint32_t)v;
    return put_uvarint(o, (uint64_t)((u << 1) ^ (uint32_t)((int32_t)u >> 31)));
}

static inline int put_varlong(Out *o, int64_t v) {
    return put_uvarint(o, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

/* A key, value or header field: -1 (zig-zag 1) for null, else its length and bytes. */
static inline int put_field(Out *o, const uint8_t *p, Py_ssize_t n, int is_null) {
    if (is_null) return out_byte(o, 1);
    if (put_varint(o, (int64_t)n) < 0) return -1;
    return n ? out_write(o, p, n) : 0; /* an empty field's p may be NULL */
}

/* ------------------------------------------------------------------------------------ records */

#define REC_OVERHEAD 36 /* storage's _RECORD_OVERHEAD, _HEADER_OVERHEAD and _BATCH_OVERHEAD */
#define HDR_OVERHEAD 10
#define BATCH_OVERHEAD 61
#define NEED_PYTHON 1 /* a return: this is the reference's to do */

/* One batch's records as they are added: the section, and one record's parts while it is built. */
typedef struct {
    Out sect;           /* the records section */
    Out rec;            /* one record's body (before its length) */
    Out hdr;            /* one record's headers (before their count) */
    Out kbuf, vbuf;     /* unescaped or decoded key and value */
    Out hname, hval;    /* one header's name and value */
    int64_t first_ts, max_ts;
    Py_ssize_t count;
    int64_t est;        /* storage's size bound: BATCH_OVERHEAD + the records' */
    int fixed_first;    /* first_ts is the caller's, not the first record's */
} Builder;

static void builder_free(Builder *b) {
    PyMem_RawFree(b->sect.buf);
    PyMem_RawFree(b->rec.buf);
    PyMem_RawFree(b->hdr.buf);
    PyMem_RawFree(b->kbuf.buf);
    PyMem_RawFree(b->vbuf.buf);
    PyMem_RawFree(b->hname.buf);
    PyMem_RawFree(b->hval.buf);
    memset(b, 0, sizeof *b);
}

/* Adds a record with its headers already in b->hdr (hcount of them, hest their size bound).
 * 0, -1 out of memory, NEED_PYTHON when a number does not fit (the reference raises its error). */
static int builder_add(Builder *b, int64_t ts, int64_t delta_index, const Span *key, const Span *value,
                       int64_t hcount, int64_t hest) {
    if (b->count == 0) {
        if (!b->fixed_first) b->first_ts = ts;
        b->max_ts = ts;
        b->est = BATCH_OVERHEAD;
    }
    int64_t delta;
    if (__builtin_sub_overflow(ts, b->first_ts, &delta)) return NEED_PYTHON;
    if (key->n > INT32_MAX || value->n > INT32_MAX || delta_index > INT32_MAX) return NEED_PYTHON;
    Out *r = &b->rec;
    r->len = 0;
    if (out_byte(r, 0) < 0 || put_varlong(r, delta) < 0 || put_varint(r, delta_index) < 0 ||
        put_field(r, key->p, key->n, key->is_null) < 0 || put_field(r, value->p, value->n, value->is_null) < 0 ||
        put_varint(r, hcount) < 0 || (b->hdr.len && out_write(r, b->hdr.buf, b->hdr.len) < 0))
        return -1; /* (no headers yet: hdr.buf may be NULL, which memcpy must not get even for 0 bytes) */
    if (r->len > INT32_MAX) return NEED_PYTHON;
    if (put_varint(&b->sect, r->len) < 0 || out_write(&b->sect, r->buf, r->len) < 0) return -1;
    if (ts > b->max_ts) b->max_ts = ts;
    b->count++;
    b->est += REC_OVERHEAD + (key->is_null ? 0 : key->n) + (value->is_null ? 0 : value->n) + hest;
    return 0;
}

/* The batch around the section (encode.py's encode_batch: base offset 0, no producer, CreateTime),
 * its body compressed by `compress` (a callable, or NULL for none) under `codec`. New reference. */
static PyObject *builder_batch(Builder *b, int codec, int32_t epoch, PyObject *compress) {
    PyObject *body_obj = NULL;
    const uint8_t *body = (const uint8_t *)b->sect.buf;
    Py_ssize_t body_len = b->sect.len;
    if (compress != NULL && compress != Py_None) {
        body_obj = PyObject_CallFunction(compress, "y#", b->sect.buf ? b->sect.buf : "", b->sect.len);
        if (body_obj == NULL) return NULL;
        if (!PyBytes_Check(body_obj)) {
            Py_DECREF(body_obj);
            PyErr_SetString(PyExc_TypeError, "compress must return bytes");
            return NULL;
        }
        body = (const uint8_t *)PyBytes_AS_STRING(body_obj);
        body_len = PyBytes_GET_SIZE(body_obj);
    }
    Py_ssize_t size = 61 + body_len;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) {
        Py_XDECREF(body_obj);
        return NULL;
    }
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    int64_t n = b->count;
#define BE(at, v, bytes)                                                  \
    do {                                                                  \
        uint64_t v_ = (uint64_t)(v);                                      \
        for (int i_ = (bytes)-1; i_ >= 0; i_--, v_ >>= 8) (at)[i_] = (uint8_t)v_; \
    } while (0)
    BE(p, 0, 8);                        /* base offset */
    BE(p + 8, size - 12, 4);            /* length */
    BE(p + 12, epoch, 4);               /* partition leader epoch */
    p[16] = 2;                          /* magic */
    BE(p + 21, codec, 2);               /* attributes */
    BE(p + 23, n > 0 ? n - 1 : 0, 4);   /* last offset delta */
    BE(p + 27, n ? b->first_ts : -1, 8);
    BE(p + 35, n ? b->max_ts : -1, 8);
    BE(p + 43, -1, 8);                  /* producer id */
    BE(p + 51, -1, 2);                  /* producer epoch */
    BE(p + 53, -1, 4);                  /* base sequence */
    BE(p + 57, n, 4);
    if (body_len) memcpy(p + 61, body, (size_t)body_len);
    BE(p + 17, crc32c(p + 21, (size_t)(size - 21)), 4);
#undef BE
    Py_XDECREF(body_obj);
    return out;
}

/* ------------------------------------------------------------------------------------ JSON */

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* The end of the string at p (its opening quote), past the closing quote, or NULL; *plain set when it
 * holds no escape. Escapes are checked only for their form (the caller decides what it takes). */
static const uint8_t *string_end(const uint8_t *p, const uint8_t *e, int *plain) {
    const uint8_t *s = ++p;
    *plain = 1;
    while (p < e) {
#ifdef KAFKAFS_SWAR
        p = s + skip_plain(s, p - s, e - s);
        if (p >= e) break;
#endif
        uint8_t c = *p;
        if (c == '"') {
            return utf8_valid(s, p - s) ? p + 1 : NULL;
        }
        if (c == '\\') {
            *plain = 0;
            if (p + 1 >= e) return NULL;
            p += 2;
            continue;
        }
        if (c < 0x20) return NULL;
        p++;
    }
    return NULL;
}

/* Four hex digits at p (within e): _kernel_json.h's hex4. */
static inline int hex_at(const uint8_t *p, const uint8_t *e, uint32_t *out) {
    int v;
    if (!hex4(p, 0, e - p, &v)) return -1;
    *out = (uint32_t)v;
    return 0;
}

/* A JSON string the reference takes (RFC 8259's escapes; a \u escape of a surrogate only as a pair, as
 * orjson wants it): its end, or NULL. */
static const uint8_t *canon_string(const uint8_t *p, const uint8_t *e) {
    int plain;
    const uint8_t *end = string_end(p, e, &plain);
    if (end == NULL || plain) return end;
    const uint8_t *stop = end - 1;
    for (const uint8_t *q = p + 1; q < stop; q++) {
        if (*q != '\\') continue;
        uint8_t c = *++q; /* string_end saw a byte after every backslash */
        if (c == 'u') {
            uint32_t cp, lo;
            if (hex_at(q + 1, stop, &cp) < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return NULL;
            q += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (stop - q < 7 || q[1] != '\\' || q[2] != 'u' || hex_at(q + 3, stop, &lo) < 0 || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    return NULL;
                q += 6;
            }
        } else if (!memchr("\"\\/bfnrt", c, 8)) {
            return NULL;
        }
    }
    return end;
}

/* A JSON number (RFC 8259's form), which the reference writes as it is written (appendlines keeps
 * numbers as written: 765.90, 1E5, -0): its end, or NULL when it is not one or when it could pass a
 * double's range, which orjson refuses ("number is infinity when parsed as double": 1e309); so
 * integer digits plus a positive exponent at most 300, an exponent of at most 3 digits after its
 * leading zeros. A digit after a leading 0 is the caller's to refuse (it is not a separator). */
static const uint8_t *canon_number(const uint8_t *p, const uint8_t *e) {
    const uint8_t *q = p;
    if (q < e && *q == '-') q++;
    if (q >= e || *q < '0' || *q > '9') return NULL;
    const uint8_t *int_start = q;
    if (*q == '0') q++;
    else
        while (q < e && *q >= '0' && *q <= '9') q++;
    Py_ssize_t n_int = q - int_start;
    if (q < e && *q == '.') {
        const uint8_t *frac = ++q;
        while (q < e && *q >= '0' && *q <= '9') q++;
        if (q == frac) return NULL; /* "1." */
    }
    Py_ssize_t up = 0; /* the exponent, when positive */
    if (q < e && (*q == 'e' || *q == 'E')) {
        q++;
        int neg = 0;
        if (q < e && (*q == '+' || *q == '-')) neg = *q++ == '-';
        const uint8_t *digits = q;
        while (q < e && *q == '0') q++;
        const uint8_t *sig = q;
        int exp = 0;
        while (q < e && *q >= '0' && *q <= '9') {
            if (q - sig == 3) return NULL; /* 1e1000: past any double either way (the reference's) */
            exp = exp * 10 + (*q++ - '0');
        }
        if (q == digits) return NULL; /* "1e", "1e+" */
        if (!neg) up = exp;
    }
    if (n_int + up > 300) return NULL; /* might be infinity as a double */
    return q;
}

/* A JSON value with no whitespace, whose text the reference writes as it is (and whose parser takes it): its
 * end, or NULL (which only means: not this fast path's). */
static const uint8_t *canon_value(const uint8_t *p, const uint8_t *e, int depth) {
    if (p >= e || depth > 64) return NULL;
    switch (*p) {
    case '"':
        return canon_string(p, e);
    case '{': {
        p++;
        if (p < e && *p == '}') return p + 1;
        for (;;) { /* a repeated key is written as it is too */
            if (p >= e || *p != '"') return NULL;
            p = canon_string(p, e);
            if (p == NULL) return NULL;
            if (p >= e || *p != ':') return NULL;
            p = canon_value(p + 1, e, depth + 1);
            if (p == NULL || p >= e) return NULL;
            if (*p == '}') return p + 1;
            if (*p != ',') return NULL;
            p++;
        }
    }
    case '[':
        p++;
        if (p < e && *p == ']') return p + 1;
        for (;;) {
            p = canon_value(p, e, depth + 1);
            if (p == NULL || p >= e) return NULL;
            if (*p == ']') return p + 1;
            if (*p != ',') return NULL;
            p++;
        }
    case 't':
        return e - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return e - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        return e - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default:
        return canon_number(p, e);
    }
}

/* The string at p (its opening quote) as UTF-8 bytes: a span into the line when it has no escape, else
 * decoded into `buf`. Returns its end, or NULL (not valid, or a lone surrogate: the reference's). */
static const uint8_t *string_bytes(const uint8_t *p, const uint8_t *e, Span *out, Out *buf, int *oom) {
    int plain;
    const uint8_t *end = string_end(p, e, &plain);
    if (end == NULL) return NULL;
    out->is_null = 0;
    if (plain) {
        out->p = p + 1;
        out->n = end - p - 2;
        return end;
    }
    buf->len = 0;
    const uint8_t *q = p + 1, *stop = end - 1;
    while (q < stop) {
        const uint8_t *r = q;
        while (r < stop && *r != '\\') r++;
        if (r > q && out_write(buf, q, r - q) < 0) goto oom;
        if (r >= stop) break;
        uint8_t c = r[1];
        char ch;
        uint32_t cp;
        q = r + 2;
        switch (c) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u':
            if (hex_at(q, stop, &cp) < 0) return NULL;
            q += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return NULL;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (stop - q < 6 || q[0] != '\\' || q[1] != 'u' || hex_at(q + 2, stop, &lo) < 0 || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    return NULL;
                q += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            {
                uint8_t u[4];
                int n;
                if (cp < 0x80) {
                    u[0] = (uint8_t)cp;
                    n = 1;
                } else if (cp < 0x800) {
                    u[0] = (uint8_t)(0xC0 | cp >> 6);
                    u[1] = (uint8_t)(0x80 | (cp & 0x3F));
                    n = 2;
                } else if (cp < 0x10000) {
                    u[0] = (uint8_t)(0xE0 | cp >> 12);
                    u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                    u[2] = (uint8_t)(0x80 | (cp & 0x3F));
                    n = 3;
                } else {
                    u[0] = (uint8_t)(0xF0 | cp >> 18);
                    u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
                    u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                    u[3] = (uint8_t)(0x80 | (cp & 0x3F));
                    n = 4;
                }
                if (out_write(buf, u, n) < 0) goto oom;
            }
            continue;
        default:
            return NULL;
        }
        if (out_byte(buf, ch) < 0) goto oom;
    }
    out->p = (const uint8_t *)buf->buf;
    out->n = buf->len;
    if (out->p == NULL) out->p = (const uint8_t *)"";
    return end;
oom:
    *oom = 1;
    return NULL;
}

static int b64val(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* {"$base64": "..."} at p, whitespace allowed around its parts: its end with the bytes decoded into buf,
 * or NULL (not that form, or base64 the reference should judge). */
static const uint8_t *base64_object(const uint8_t *p, const uint8_t *e, Span *out, Out *buf, int *oom) {
    p = skip_ws(p + 1, e);
    if (e - p < 9 || memcmp(p, "\"$base64\"", 9) != 0) return NULL;
    p = skip_ws(p + 9, e);
    if (p >= e || *p != ':') return NULL;
    p = skip_ws(p + 1, e);
    if (p >= e || *p != '"') return NULL;
    const uint8_t *s = p + 1, *q = s;
    while (q < e && *q != '"' && *q != '\\') q++;
    if (q >= e || *q != '"') return NULL;
    Py_ssize_t n = q - s, pad = 0;
    while (pad < n && pad < 3 && s[n - 1 - pad] == '=') pad++;
    if (n % 4 || pad > 2) return NULL;
    buf->len = 0;
    for (Py_ssize_t i = 0; i < n; i += 4) {
        int v[4];
        int last = i + 4 == n;
        for (int j = 0; j < 4; j++) {
            v[j] = last && j >= 4 - pad ? 0 : b64val(s[i + j]);
            if (v[j] < 0) return NULL;
        }
        uint8_t bytes[3] = {(uint8_t)(v[0] << 2 | v[1] >> 4), (uint8_t)(v[1] << 4 | v[2] >> 2), (uint8_t)(v[2] << 6 | v[3])};
        if (out_write(buf, bytes, last ? 3 - pad : 3) < 0) {
            *oom = 1;
            return NULL;
        }
    }
    p = skip_ws(q + 1, e);
    if (p >= e || *p != '}') return NULL;
    out->p = buf->buf ? (const uint8_t *)buf->buf : (const uint8_t *)"";
    out->n = buf->len;
    out->is_null = 0;
    return p + 1;
}

/* A key, value or header value (appendlines.py's _to_bytes of what orjson parses): its end, or NULL. */
static const uint8_t *value_bytes(const uint8_t *p, const uint8_t *e, Span *out, Out *buf, int *oom) {
    if (p >= e) return NULL;
    if (*p == 'n') {
        if (e - p < 4 || memcmp(p, "null", 4) != 0) return NULL;
        out->p = NULL;
        out->n = 0;
        out->is_null = 1;
        return p + 4;
    }
    if (*p == '"') return string_bytes(p, e, out, buf, oom);
    if (*p == '{') {
        const uint8_t *k = skip_ws(p + 1, e);
        if (e - k >= 9 && memcmp(k, "\"$base64\"", 9) == 0) return base64_object(p, e, out, buf, oom);
    }
    const uint8_t *end = canon_value(p, e, 0); /* objects, arrays, numbers, booleans: their compact text */
    if (end == NULL) return NULL;
    out->p = p;
    out->n = end - p;
    out->is_null = 0;
    return end;
}

/* One header into b->hdr from its name and value. */
static int put_header(Builder *b, const Span *name, const Span *value, int64_t *hest) {
    if (put_field(&b->hdr, name->p, name->n, 0) < 0 || put_field(&b->hdr, value->p, value->n, value->is_null) < 0)
        return -1;
    *hest += HDR_OVERHEAD + name->n + (value->is_null ? 0 : value->n);
    return 0;
}

/* "headers": null, [{"key": .., "value": ..}, ..] or {name: value, ..}: its end, or NULL. */
static const uint8_t *headers_value(const uint8_t *p, const uint8_t *e, Builder *b, int64_t *count, int64_t *hest,
                                    int *oom) {
    if (p >= e) return NULL;
    if (*p == 'n') return e - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    int is_list = *p == '[';
    if (!is_list && *p != '{') return NULL;
    char close = is_list ? ']' : '}';
    p = skip_ws(p + 1, e);
    if (p < e && *p == close) return p + 1;
    const uint8_t *names[16];
    Py_ssize_t lens[16];
    int seen = 0;
    for (;;) {
        Span name, value;
        if (is_list) {
            if (p >= e || *p != '{') return NULL;
            p = skip_ws(p + 1, e);
            int have_key = 0, have_value = 0;
            value.is_null = 1;
            value.p = NULL;
            value.n = 0;
            if (p < e && *p == '}') return NULL; /* no "key": the reference's error */
            for (;;) {
                if (e - p >= 5 && memcmp(p, "\"key\"", 5) == 0 && !have_key) {
                    p = skip_ws(p + 5, e);
                    if (p >= e || *p != ':') return NULL;
                    p = skip_ws(p + 1, e);
                    if (p >= e || *p != '"') return NULL;
                    p = string_bytes(p, e, &name, &b->hname, oom);
                    have_key = 1;
                } else if (e - p >= 7 && memcmp(p, "\"value\"", 7) == 0 && !have_value) {
                    p = skip_ws(p + 7, e);
                    if (p >= e || *p != ':') return NULL;
                    p = value_bytes(skip_ws(p + 1, e), e, &value, &b->hval, oom);
                    have_value = 1;
                } else {
                    return NULL;
                }
                if (p == NULL) return NULL;
                p = skip_ws(p, e);
                if (p < e && *p == '}') break;
                if (p >= e || *p != ',') return NULL;
                p = skip_ws(p + 1, e);
            }
            if (!have_key) return NULL;
            p++;
        } else {
            if (p >= e || *p != '"') return NULL;
            const uint8_t *k = p;
            p = string_bytes(p, e, &name, &b->hname, oom);
            if (p == NULL || seen == 16 || name.p != k + 1) return NULL; /* escaped names: the reference's */
            for (int i = 0; i < seen; i++)
                if (lens[i] == p - k && memcmp(names[i], k, (size_t)(p - k)) == 0) return NULL; /* repeated */
            names[seen] = k;
            lens[seen++] = p - k;
            p = skip_ws(p, e);
            if (p >= e || *p != ':') return NULL;
            p = value_bytes(skip_ws(p + 1, e), e, &value, &b->hval, oom);
            if (p == NULL) return NULL;
        }
        if (put_header(b, &name, &value, hest) < 0) {
            *oom = 1;
            return NULL;
        }
        (*count)++;
        p = skip_ws(p, e);
        if (p < e && *p == close) return p + 1;
        if (p >= e || *p != ',') return NULL;
        p = skip_ws(p + 1, e);
    }
}

enum { F_KEY, F_VALUE, F_HEADERS, F_TIMESTAMP, F_OTHER_FIRST };
static const char *const FIELD_NAMES[] = {"key", "value", "headers", "timestamp", "topic", "partition", "offset",
                                          "timestampType", "control", "producerId"};
#define N_FIELDS 10

/* A record object line, parsed when it is the fast path's: 0 and the record's parts (headers written
 * into b->hdr), NEED_PYTHON, or -1 out of memory. */
static int parse_object(const uint8_t *p, const uint8_t *e, Builder *b, int *has_ts, int64_t *ts, Span *key,
                        Span *value, int64_t *hcount, int64_t *hest) {
    int oom = 0;
    unsigned seen = 0;
    *has_ts = 0;
    key->is_null = value->is_null = 1;
    key->p = value->p = NULL;
    key->n = value->n = 0;
    *hcount = *hest = 0;
    b->hdr.len = 0;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') goto end;
    for (;;) {
        if (p >= e || *p != '"') return NEED_PYTHON;
        const uint8_t *n0 = p + 1, *n1 = n0;
        while (n1 < e && *n1 != '"' && *n1 != '\\') n1++;
        if (n1 >= e || *n1 != '"') return NEED_PYTHON;
        int field = -1;
        for (int i = 0; i < N_FIELDS; i++)
            if ((size_t)(n1 - n0) == strlen(FIELD_NAMES[i]) && memcmp(n0, FIELD_NAMES[i], (size_t)(n1 - n0)) == 0) {
                field = i;
                break;
            }
        if (field < 0 || seen & (1u << field)) return NEED_PYTHON; /* unknown or repeated: the reference's */
        seen |= 1u << field;
        p = skip_ws(n1 + 1, e);
        if (p >= e || *p != ':') return NEED_PYTHON;
        p = skip_ws(p + 1, e);
        switch (field) {
        case F_KEY:
            p = value_bytes(p, e, key, &b->kbuf, &oom);
            break;
        case F_VALUE:
            p = value_bytes(p, e, value, &b->vbuf, &oom);
            break;
        case F_HEADERS:
            p = headers_value(p, e, b, hcount, hest, &oom);
            break;
        case F_TIMESTAMP:
            if (p < e && *p == 'n') {
                p = e - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
                break;
            }
            {
                const uint8_t *q = p;
                int neg = q < e && *q == '-';
                if (neg) q++;
                const uint8_t *d = q;
                uint64_t v = 0;
                while (q < e && *q >= '0' && *q <= '9' && q - d <= 18) v = v * 10 + (uint64_t)(*q++ - '0');
                if (q == d || q - d > 18 || (q - d > 1 && *d == '0') || (q < e && (*q == '.' || *q == 'e' || *q == 'E'))) {
                    p = NULL;
                    break;
                }
                if (neg && v > 1) { /* only -1 ("none") of the negatives; -0 is 0 */
                    p = NULL;
                    break;
                }
                *ts = neg ? -(int64_t)v : (int64_t)v; /* -1 ("none") is kept as it is */
                *has_ts = 1;
                p = q;
            }
            break;
        default:
            p = canon_value(p, e, 0); /* a rendered line's own fields: any JSON, ignored */
            break;
        }
        if (oom) return -1;
        if (p == NULL) return NEED_PYTHON;
        p = skip_ws(p, e);
        if (p < e && *p == '}') break;
        if (p >= e || *p != ',') return NEED_PYTHON;
        p = skip_ws(p + 1, e);
    }
end:
    p = skip_ws(p + 1, e);
    return p == e ? 0 : NEED_PYTHON;
}

/* ------------------------------------------------------------------------------------ Python records */

/* A record (timestamp, key, value, headers) given by Python (a timestamp None is now when none_is_now);
 * 0, -1 with an error, NEED_PYTHON. */
static int builder_add_py(Builder *b, PyObject *rec, int none_is_now, int64_t now, int64_t index) {
    PyObject *fast = PySequence_Fast(rec, "a record must be a sequence");
    if (fast == NULL) return -1;
    int rc = NEED_PYTHON;
    Py_buffer kv = {0}, vv = {0};
    kv.obj = vv.obj = NULL;
    PyObject *hs = NULL;
    if (PySequence_Fast_GET_SIZE(fast) != 4) goto done;
    PyObject *ts_o = PySequence_Fast_GET_ITEM(fast, 0);
    int64_t ts = now;
    if (ts_o == Py_None && !none_is_now) goto done;
    if (ts_o != Py_None) {
        if (!PyLong_Check(ts_o)) goto done;
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(ts_o, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto done;
        }
        if (overflow) goto done;
        ts = v;
    }
    Span key, value;
    if (span_of(PySequence_Fast_GET_ITEM(fast, 1), &key, &kv) < 0 ||
        span_of(PySequence_Fast_GET_ITEM(fast, 2), &value, &vv) < 0) {
        PyErr_Clear();
        goto done;
    }
    hs = PySequence_Fast(PySequence_Fast_GET_ITEM(fast, 3), "headers");
    if (hs == NULL) {
        PyErr_Clear();
        goto done;
    }
    b->hdr.len = 0;
    int64_t hest = 0;
    Py_ssize_t hn = PySequence_Fast_GET_SIZE(hs);
    for (Py_ssize_t h = 0; h < hn; h++) {
        PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(hs, h), "header");
        if (pair == NULL) {
            PyErr_Clear();
            goto done;
        }
        if (PySequence_Fast_GET_SIZE(pair) != 2 || !PyUnicode_Check(PySequence_Fast_GET_ITEM(pair, 0))) {
            Py_DECREF(pair);
            goto done;
        }
        Py_ssize_t nlen;
        const char *name = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(pair, 0), &nlen);
        Span ns = {(const uint8_t *)name, nlen, 0}, hv;
        Py_buffer hvv;
        hvv.obj = NULL;
        if (name == NULL || span_of(PySequence_Fast_GET_ITEM(pair, 1), &hv, &hvv) < 0) {
            PyErr_Clear();
            Py_DECREF(pair);
            goto done;
        }
        int w = hv.n > INT32_MAX || nlen > INT32_MAX ? NEED_PYTHON : put_header(b, &ns, &hv, &hest);
        if (hvv.obj) PyBuffer_Release(&hvv);
        Py_DECREF(pair);
        if (w) {
            if (w < 0) {
                PyErr_NoMemory();
                rc = -1;
            }
            goto done;
        }
    }
    rc = builder_add(b, ts, index, &key, &value, hn, hest);
    if (rc < 0) PyErr_NoMemory();
done:
    if (kv.obj) PyBuffer_Release(&kv);
    if (vv.obj) PyBuffer_Release(&vv);
    Py_XDECREF(hs);
    Py_DECREF(fast);
    return rc;
}

#endif /* KAFKAFS_KERNEL_LINES_H */
