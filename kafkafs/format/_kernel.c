/*
 * kafkafs.format._kernel: the compiled record kernel.
 *
 * Decodes the records section of one RecordBatch v2 (already CRC-checked and decompressed by the
 * Python layer) and renders its JSON lines (SPEC section 3) in one pass, byte for byte as the Python
 * reference does (kafkafs/format/records.py, jsonembed.py, jsonrender.py; tests/format/
 * test_kernel_differential.py holds them together). Every read is bounds-checked against the end of
 * the record it belongs to; damage raises CorruptRecordError, never reads outside the buffer.
 *
 * Functions (wrapped by kafkafs/format/kernel.py):
 *   setup(CorruptRecordError, Header, no_headers)
 *   decode(data, base_offset, first_ts, max_ts, attributes, count)
 *       -> (offsets, timestamps, keys, values, headers)
 *   render(prefix, data, base_offset, first_ts, max_ts, attributes, producer_id, count, mode,
 *          lo, hi, ts_lo, ts_hi, what)
 *       -> bytes (what 0) | list of line lengths (what 1) | (bytes, offsets, line ends) (what 2)
 *          | (bytes, number of lines) (what 3)
 *   render_columns(prefix, offsets, timestamps, keys, values, headers, log_append, control,
 *                  transactional, producer_id, mode, start, stop) -> bytes
 *   render_value(data_or_None, mode) -> bytes
 * mode: 0 auto, 1 string, 2 base64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 512
#define MODE_AUTO 0
#define MODE_STRING 1
#define MODE_BASE64 2

static PyObject *CorruptError = NULL; /* kafkafs.errors.CorruptRecordError */
static PyObject *HeaderType = NULL;   /* kafkafs.format.records.Header */
static PyObject *NoHeaders = NULL;    /* the shared empty tuple for records without headers */

/* ------------------------------------------------------------------------------------ output */

/* An output buffer, or (count_only) just a length: the same rendering code sizes and writes. */
typedef struct {
    char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
    int count_only;
    int oom;
} Out;

static int out_grow(Out *o, Py_ssize_t need) {
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap - o->len < need) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            o->oom = 1;
            return -1;
        }
        cap *= 2;
    }
    char *nb = (char *)PyMem_RawRealloc(o->buf, (size_t)cap);
    if (nb == NULL) {
        o->oom = 1;
        return -1;
    }
    o->buf = nb;
    o->cap = cap;
    return 0;
}

static inline int out_write(Out *o, const void *p, Py_ssize_t n) {
    if (o->count_only) {
        o->len += n;
        return 0;
    }
    if (o->cap - o->len < n && out_grow(o, n) < 0) return -1;
    memcpy(o->buf + o->len, p, (size_t)n);
    o->len += n;
    return 0;
}

#define OUT_LIT(o, s) out_write((o), (s), (Py_ssize_t)(sizeof(s) - 1))

static inline int out_byte(Out *o, char c) {
    if (o->count_only) {
        o->len += 1;
        return 0;
    }
    if (o->cap - o->len < 1 && out_grow(o, 1) < 0) return -1;
    o->buf[o->len++] = c;
    return 0;
}

static int out_int(Out *o, int64_t v) {
    char tmp[24];
    int i = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--i] = (char)('0' + (u % 10));
        u /= 10;
    } while (u);
    if (v < 0) tmp[--i] = '-';
    return out_write(o, tmp + i, 24 - i);
}

/* ------------------------------------------------------------------------------------ UTF-8 */

/* Strict UTF-8, as Python's decoder accepts it: no overlongs, no surrogates, nothing past U+10FFFF. */
static int utf8_valid(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && c1 < 0xA0) return 0;
            if (c == 0xED && c1 > 0x9F) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2], c3 = s[i + 3];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80 || (c3 & 0xC0) != 0x80) return 0;
            if (c == 0xF0 && c1 < 0x90) return 0;
            if (c == 0xF4 && c1 > 0x8F) return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------------------ strings */

static const char HEX[] = "0123456789abcdef";

/* Valid UTF-8 bytes as a JSON string: escapes for '"', '\\' and bytes below 0x20, the rest as is. */
static int put_string(Out *o, const uint8_t *s, Py_ssize_t n) {
    if (out_byte(o, '"') < 0) return -1;
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (i > run && out_write(o, s + run, i - run) < 0) return -1;
        run = i + 1;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        int len = 2;
        switch (c) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case 0x08: esc[1] = 'b'; break;
            case 0x09: esc[1] = 't'; break;
            case 0x0A: esc[1] = 'n'; break;
            case 0x0C: esc[1] = 'f'; break;
            case 0x0D: esc[1] = 'r'; break;
            default:
                esc[1] = 'u';
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = HEX[c >> 4];
                esc[5] = HEX[c & 15];
                len = 6;
        }
        if (out_write(o, esc, len) < 0) return -1;
    }
    if (n > run && out_write(o, s + run, n - run) < 0) return -1;
    return out_byte(o, '"');
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int put_base64(Out *o, const uint8_t *s, Py_ssize_t n) {
    if (OUT_LIT(o, "{\"$base64\":\"") < 0) return -1;
    Py_ssize_t enc = ((n + 2) / 3) * 4;
    if (o->count_only) {
        o->len += enc;
    } else {
        if (o->cap - o->len < enc && out_grow(o, enc) < 0) return -1;
        char *w = o->buf + o->len;
        Py_ssize_t i = 0;
        for (; i + 3 <= n; i += 3) {
            uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8) | s[i + 2];
            *w++ = B64[v >> 18];
            *w++ = B64[(v >> 12) & 63];
            *w++ = B64[(v >> 6) & 63];
            *w++ = B64[v & 63];
        }
        if (n - i == 1) {
            uint32_t v = (uint32_t)s[i] << 16;
            *w++ = B64[v >> 18];
            *w++ = B64[(v >> 12) & 63];
            *w++ = '=';
            *w++ = '=';
        } else if (n - i == 2) {
            uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8);
            *w++ = B64[v >> 18];
            *w++ = B64[(v >> 12) & 63];
            *w++ = B64[(v >> 6) & 63];
            *w++ = '=';
        }
        o->len += enc;
    }
    return OUT_LIT(o, "\"}");
}

/* ------------------------------------------------------------------------------------ JSON */

static inline int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static inline int hex4(const uint8_t *s, Py_ssize_t i, Py_ssize_t n, int *out) {
    if (i + 4 > n) return 0;
    int v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = s[i + k];
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        v = (v << 4) | d;
    }
    *out = v;
    return 1;
}

/* The end of the string token starting at s[i] == '"', or -1 when it is not a valid string. */
static Py_ssize_t scan_string(const uint8_t *s, Py_ssize_t i, Py_ssize_t n) {
    i++;
    while (i < n) {
        uint8_t c = s[i];
        if (c == '"') return i + 1;
        if (c < 0x20) return -1;
        if (c != '\\') {
            i++;
            continue;
        }
        if (i + 1 >= n) return -1;
        uint8_t e = s[i + 1];
        if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
            i += 2;
            continue;
        }
        if (e != 'u') return -1;
        int code;
        if (!hex4(s, i + 2, n, &code)) return -1;
        i += 6;
        if (code >= 0xDC00 && code <= 0xDFFF) return -1; /* a low half with no high half before it */
        if (code >= 0xD800 && code <= 0xDBFF) {
            int low;
            if (i + 1 >= n || s[i] != '\\' || s[i + 1] != 'u' || !hex4(s, i + 2, n, &low)) return -1;
            if (low < 0xDC00 || low > 0xDFFF) return -1;
            i += 6;
        }
    }
    return -1;
}

/* The end of the number token at s[i], or -1 when no number grammar matches there completely. */
static Py_ssize_t scan_number(const uint8_t *s, Py_ssize_t i, Py_ssize_t n) {
    if (i < n && s[i] == '-') i++;
    if (i >= n) return -1;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && is_digit(s[i])) i++;
    } else {
        return -1;
    }
    if (i < n && s[i] == '.') {
        if (i + 1 >= n || !is_digit(s[i + 1])) return -1; /* "1." : the '.' starts no token */
        i += 2;
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        Py_ssize_t j = i + 1;
        if (j < n && (s[j] == '+' || s[j] == '-')) j++;
        if (j >= n || !is_digit(s[j])) return -1; /* "1e" : the 'e' starts no token */
        while (j < n && is_digit(s[j])) j++;
        i = j;
    }
    return i;
}

enum { S_VALUE, S_VALUE_OR_CLOSE, S_KEY, S_KEY_OR_CLOSE, S_COLON, S_COMMA_OR_CLOSE, S_DONE };

/* Writes the compact form of embeddable JSON (jsonembed.py's definition; valid UTF-8 already
 * checked) and returns 1, or returns 0 having possibly written part of it (the caller rewinds);
 * -1 when out of memory. */
static int put_json_compact(Out *o, const uint8_t *s, Py_ssize_t n) {
    uint8_t stack[MAX_DEPTH];
    int depth = 0;
    int state = S_VALUE;
    Py_ssize_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    if (i >= n || (s[i] != '{' && s[i] != '[')) return 0;
    for (;;) {
        while (i < n && is_ws(s[i])) i++;
        if (i >= n) return state == S_DONE;
        if (state == S_DONE) return 0;
        uint8_t c = s[i];
        switch (c) {
            case '{':
            case '[':
                if (state != S_VALUE && state != S_VALUE_OR_CLOSE) return 0;
                if (depth == MAX_DEPTH) return 0;
                stack[depth++] = c;
                state = c == '{' ? S_KEY_OR_CLOSE : S_VALUE_OR_CLOSE;
                if (out_byte(o, (char)c) < 0) return -1;
                i++;
                break;
            case '}':
            case ']': {
                uint8_t opener = c == '}' ? '{' : '[';
                if (depth == 0 || stack[depth - 1] != opener) return 0;
                if (!(state == S_COMMA_OR_CLOSE || (c == '}' && state == S_KEY_OR_CLOSE) ||
                      (c == ']' && state == S_VALUE_OR_CLOSE)))
                    return 0;
                depth--;
                state = depth ? S_COMMA_OR_CLOSE : S_DONE;
                if (out_byte(o, (char)c) < 0) return -1;
                i++;
                break;
            }
            case ',':
                if (state != S_COMMA_OR_CLOSE) return 0;
                state = stack[depth - 1] == '{' ? S_KEY : S_VALUE;
                if (out_byte(o, ',') < 0) return -1;
                i++;
                break;
            case ':':
                if (state != S_COLON) return 0;
                state = S_VALUE;
                if (out_byte(o, ':') < 0) return -1;
                i++;
                break;
            case '"': {
                Py_ssize_t end = scan_string(s, i, n);
                if (end < 0) return 0;
                if (state == S_KEY || state == S_KEY_OR_CLOSE) state = S_COLON;
                else if (state == S_VALUE || state == S_VALUE_OR_CLOSE) state = S_COMMA_OR_CLOSE;
                else return 0;
                if (out_write(o, s + i, end - i) < 0) return -1;
                i = end;
                break;
            }
            default: {
                if (state != S_VALUE && state != S_VALUE_OR_CLOSE) return 0;
                Py_ssize_t end;
                if (c == '-' || is_digit(c)) {
                    end = scan_number(s, i, n);
                    if (end < 0) return 0;
                } else if (c == 't' && i + 4 <= n && memcmp(s + i, "true", 4) == 0) {
                    end = i + 4;
                } else if (c == 'f' && i + 5 <= n && memcmp(s + i, "false", 5) == 0) {
                    end = i + 5;
                } else if (c == 'n' && i + 4 <= n && memcmp(s + i, "null", 4) == 0) {
                    end = i + 4;
                } else {
                    return 0;
                }
                state = S_COMMA_OR_CLOSE;
                if (out_write(o, s + i, end - i) < 0) return -1;
                i = end;
            }
        }
    }
}

/* One key, value or header value by mode (jsonembed.render_value). */
static int put_value(Out *o, const uint8_t *s, Py_ssize_t n, int is_null, int mode) {
    if (is_null) return OUT_LIT(o, "null");
    if (mode == MODE_BASE64 || !utf8_valid(s, n)) return put_base64(o, s, n);
    if (mode == MODE_AUTO) {
        Py_ssize_t i = 0;
        while (i < n && is_ws(s[i])) i++;
        if (i < n && (s[i] == '{' || s[i] == '[')) {
            /* validate first, writing nothing: most JSON values hold no whitespace to take out, and
             * then their compact form is their bytes, copied at once */
            Out dry = {NULL, 0, 0, 1, 0};
            if (put_json_compact(&dry, s, n) == 1) {
                if (dry.len == n) return out_write(o, s, n);
                if (o->count_only) {
                    o->len += dry.len;
                    return 0;
                }
                Py_ssize_t mark = o->len;
                int r = put_json_compact(o, s, n);
                if (r < 0) return -1;
                if (r == 1) return 0;
                o->len = mark; /* cannot happen: the same bytes validated above */
            }
        }
    }
    return put_string(o, s, n);
}

/* A header key: a JSON string of its bytes decoded as Python's 'replace' error handler decodes them. */
static int put_header_key(Out *o, const uint8_t *s, Py_ssize_t n, int gil_released, PyThreadState **ts) {
    if (utf8_valid(s, n)) return put_string(o, s, n);
    if (gil_released) PyEval_RestoreThread(*ts);
    int rc = -1;
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, n, "replace");
    if (text != NULL) {
        Py_ssize_t len;
        const char *utf8 = PyUnicode_AsUTF8AndSize(text, &len);
        if (utf8 != NULL) rc = put_string(o, (const uint8_t *)utf8, len);
        Py_DECREF(text);
    }
    if (rc < 0 && !o->oom && PyErr_Occurred()) PyErr_Clear();
    if (rc < 0 && !o->oom) o->oom = 1; /* treated as a failure to allocate */
    if (gil_released) *ts = PyEval_SaveThread();
    return rc;
}

static const char *control_name(const uint8_t *key, Py_ssize_t n, int is_null) {
    if (is_null || n < 4) return "UNKNOWN";
    int16_t t = (int16_t)(((uint16_t)key[2] << 8) | key[3]);
    switch (t) {
        case 0: return "ABORT";
        case 1: return "COMMIT";
        case 2: return "LEADER_CHANGE";
        case 3: return "SNAPSHOT_HEADER";
        case 4: return "SNAPSHOT_FOOTER";
        case 5: return "KRAFT_VERSION";
        case 6: return "KRAFT_VOTERS";
        default: return "UNKNOWN";
    }
}

/* ------------------------------------------------------------------------------------ records */

/* Where one decoding failed: a message for CorruptRecordError. */
typedef struct {
    char msg[160];
} Err;

static int rd_varint(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, int64_t *out, Err *err) {
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end) {
            snprintf(err->msg, sizeof err->msg, "records do not parse: index out of range");
            return -1;
        }
        uint8_t b = d[p++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            if (raw > 0xFFFFFFFFULL) {
                snprintf(err->msg, sizeof err->msg, "varint out of 32-bit range");
                return -1;
            }
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pos = p;
            return 0;
        }
        shift += 7;
        if (shift >= 35) {
            snprintf(err->msg, sizeof err->msg, "varint longer than 5 bytes");
            return -1;
        }
    }
}

static int rd_varlong(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, int64_t *out, Err *err) {
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end) {
            snprintf(err->msg, sizeof err->msg, "records do not parse: index out of range");
            return -1;
        }
        uint8_t b = d[p++];
        if (shift == 63 && b < 0x80 && (b & 0x7F) > 1) {
            snprintf(err->msg, sizeof err->msg, "varlong out of 64-bit range");
            return -1;
        }
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)((raw >> 1) ^ ((uint64_t)0 - (raw & 1)));
            *pos = p;
            return 0;
        }
        shift += 7;
        if (shift >= 70) {
            snprintf(err->msg, sizeof err->msg, "varlong longer than 10 bytes");
            return -1;
        }
    }
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

static int rd_span(const uint8_t *d, Py_ssize_t rend, Py_ssize_t *pos, Span *sp, Err *err) {
    int64_t n;
    if (rd_varint(d, rend, pos, &n, err) < 0) return -1;
    if (n < 0) { /* any negative length is null, as Kafka reads it */
        sp->p = NULL;
        sp->n = 0;
        sp->is_null = 1;
        return 0;
    }
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

static PyObject *raise_corrupt(const char *msg) {
    PyErr_SetString(CorruptError ? CorruptError : PyExc_ValueError, msg);
    return NULL;
}

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

/* ------------------------------------------------------------------------------------ render */

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

static int put_line_head(Out *o, const LineStyle *st, int64_t offset, int64_t timestamp) {
    if (out_write(o, st->prefix, st->prefix_len) < 0 || out_int(o, offset) < 0 ||
        OUT_LIT(o, ",\"timestamp\":") < 0 || out_int(o, timestamp) < 0)
        return -1;
    if (st->log_append) return OUT_LIT(o, ",\"timestampType\":\"LogAppendTime\",\"key\":");
    return OUT_LIT(o, ",\"timestampType\":\"CreateTime\",\"key\":");
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

/* Renders every passing record of the section; 0 ok, -1 damage (err set), -2 out of memory. Runs
 * without the GIL (ts holds the saved thread state; header keys that need Python take it back). */
static int render_section(Reader *rd, long long count, const LineStyle *st, const Bounds *b, Out *o, I64s *offsets,
                          I64s *ends, Py_ssize_t *lines, Err *err, PyThreadState **ts) {
    for (long long i = 0; i < count; i++) {
        Rec r;
        if (next_record(rd, &r, err) < 0) return -1;
        if (!passes(b, r.offset, r.timestamp)) continue;
        if (put_line_head(o, st, r.offset, r.timestamp) < 0 ||
            put_value(o, r.key.p, r.key.n, r.key.is_null, st->mode) < 0 || OUT_LIT(o, ",\"value\":") < 0 ||
            put_value(o, r.value.p, r.value.n, r.value.is_null, st->mode) < 0 || OUT_LIT(o, ",\"headers\":[") < 0)
            return -2;
        Py_ssize_t pos = r.headers_pos;
        for (int64_t h = 0; h < r.header_count; h++) {
            Span k, v;
            if (rd_span(rd->d, r.end, &pos, &k, err) < 0 || rd_span(rd->d, r.end, &pos, &v, err) < 0) return -1;
            if ((h && out_byte(o, ',') < 0) || OUT_LIT(o, "{\"key\":") < 0 ||
                put_header_key(o, k.p, k.n, 1, ts) < 0 || OUT_LIT(o, ",\"value\":") < 0 ||
                put_value(o, v.p, v.n, v.is_null, st->mode) < 0 || out_byte(o, '}') < 0)
                return -2;
        }
        if (out_byte(o, ']') < 0 || put_line_tail(o, st, &r.key) < 0) return -2;
        if (offsets && i64s_add(offsets, r.offset) < 0) return -2;
        if (ends && i64s_add(ends, o->len) < 0) return -2;
        (*lines)++;
    }
    if (rd->pos != rd->end) {
        snprintf(err->msg, sizeof err->msg, "%lld bytes left over after %lld records", (long long)(rd->end - rd->pos),
                 count);
        return -1;
    }
    return 0;
}

static PyObject *k_render(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer prefix, data;
    long long base_offset, first_ts, max_ts, producer_id, count;
    int attributes, mode, what;
    PyObject *lo_o, *hi_o, *ts_lo_o, *ts_hi_o;
    if (!PyArg_ParseTuple(args, "y*y*LLLiLLiOOOOi", &prefix, &data, &base_offset, &first_ts, &max_ts, &attributes,
                          &producer_id, &count, &mode, &lo_o, &hi_o, &ts_lo_o, &ts_hi_o, &what))
        return NULL;
    PyObject *result = NULL;
    Out o = {NULL, 0, 0, what == 1, 0};
    I64s offsets = {NULL, 0, 0}, ends = {NULL, 0, 0};
    Bounds b;
    memset(&b, 0, sizeof b);
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
    PyThreadState *ts = PyEval_SaveThread();
    rc = render_section(&rd, count, &st, &b, &o, what == 2 ? &offsets : NULL, what == 1 || what == 2 ? &ends : NULL,
                        &lines, &err, &ts);
    PyEval_RestoreThread(ts);
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
    Out o = {NULL, 0, 0, 0, 0};
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
        if (put_column_value(&o, key, mode) < 0) goto done;
        if (OUT_LIT(&o, ",\"value\":") < 0) goto oom;
        if (put_column_value(&o, PyList_GET_ITEM(values, i), mode) < 0) goto done;
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
    Out o = {NULL, 0, 0, 0, 0};
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
     "ts_hi, what)"},
    {"render_columns", k_render_columns, METH_VARARGS,
     "render_columns(prefix, offsets, timestamps, keys, values, headers, log_append, control, transactional, "
     "producer_id, mode, start, stop)"},
    {"render_value", k_render_value, METH_VARARGS, "render_value(data_or_None, mode)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernel", "kafkafs's compiled record kernel", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernel(void) { return PyModule_Create(&module); }
