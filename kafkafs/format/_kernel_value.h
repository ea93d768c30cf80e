/*
 * A key, value or header of a record as SPEC section 3 renders it: null, embedded JSON (compacted),
 * a JSON string or base64, by mode (kafkafs/format/jsonembed.py's render_value is the definition);
 * header keys as Python's 'replace' decoding gives them, and the names of control record types.
 */
#ifndef KAFKAFS_KERNEL_VALUE_H
#define KAFKAFS_KERNEL_VALUE_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_json.h"
#include "_kernel_text.h"

/* One key, value or header value by mode (jsonembed.render_value): s[0:n], where memory may be read up
 * to lim (lim >= s + n; see the blocks in _kernel_text.h). In mode auto, a value that starts (after
 * whitespace) with '{' or '[' is walked as JSON first, its strings' UTF-8 checked as they are scanned
 * (outside strings JSON is ASCII): when it is embeddable it is valid UTF-8 too; else, as in mode string,
 * a JSON string, UTF-8 checked while it is written, or base64 when it is not UTF-8. */
static int put_value_in(Out *o, const uint8_t *s, Py_ssize_t n, int is_null, int mode, const uint8_t *lim) {
    if (is_null) return OUT_LIT(o, "null");
    if (mode == MODE_AUTO) {
        Py_ssize_t i = 0;
        while (i < n && is_ws(s[i])) i++;
        if (i < n && (s[i] == '{' || s[i] == '[')) {
            Py_ssize_t ws;
            if (json_check(s, n, lim, &ws)) {
                /* most JSON values hold no whitespace to take out: their bytes are their compact form */
                if (ws == 0) return out_write(o, s, n);
                return put_json_compact(o, s, n, ws);
            }
        }
    }
    if (mode != MODE_BASE64) {
        int r = put_text(o, s, n, lim);
        if (r != 0) return r < 0 ? -1 : 0;
    }
    return put_base64(o, s, n);
}

/* The length put_value_in gives s[0:n] (counting cannot fail: a length, not an Out in memory). */
static Py_ssize_t value_count(const uint8_t *s, Py_ssize_t n, int is_null, int mode, const uint8_t *lim) {
    if (is_null) return 4; /* null */
    if (mode == MODE_AUTO) {
        Py_ssize_t i = 0;
        while (i < n && is_ws(s[i])) i++;
        if (i < n && (s[i] == '{' || s[i] == '[')) {
            Py_ssize_t ws;
            if (json_check(s, n, lim, &ws)) return n - ws;
        }
    }
    if (mode != MODE_BASE64) {
        Py_ssize_t len = text_count(s, n, lim);
        if (len >= 0) return len + 2; /* the quotes */
    }
    return 14 + ((n + 2) / 3) * 4; /* {"$base64":"..."} */
}

/* One value with nothing known to be readable past its end. A null value may come with a null pointer:
 * no offset is applied to it (C leaves NULL + 0 undefined; UBSan reports it). */
static int put_value(Out *o, const uint8_t *s, Py_ssize_t n, int is_null, int mode) {
    return put_value_in(o, s, n, is_null, mode, s != NULL ? s + n : s);
}

/* A header key: a JSON string of its bytes decoded as Python's 'replace' error handler decodes them
 * (records.py: key.decode("utf-8", "replace")), in C: no GIL needed, so none is taken. */
static int put_header_key(Out *o, const uint8_t *s, Py_ssize_t n, const uint8_t *lim) {
    int r = put_text(o, s, n, lim);
    if (r != 0) return r < 0 ? -1 : 0;
    if (out_byte(o, '"') < 0) return -1;
    Py_ssize_t run = 0, i = 0;
    while (i < n) {
        Py_ssize_t len = utf8_sequence(s + i, n - i);
        if (len > 0) {
            i += len;
            continue;
        }
        if (put_string_body(o, s + run, i - run) < 0 || OUT_LIT(o, "\xEF\xBF\xBD") < 0) return -1;
        i -= len;
        run = i;
    }
    if (put_string_body(o, s + run, n - run) < 0) return -1;
    return out_byte(o, '"');
}

/* The length put_header_key gives s[0:n]. */
static Py_ssize_t header_key_count(const uint8_t *s, Py_ssize_t n, const uint8_t *lim) {
    Py_ssize_t len = text_count(s, n, lim);
    if (len >= 0) return len + 2;
    Out c = {NULL, 0, 0, 1, 0, NULL, NULL, 0}; /* not UTF-8 (rare): counted by the decoding itself */
    (void)put_header_key(&c, s, n, lim);     /* counted: cannot fail */
    return c.len;
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

#endif /* KAFKAFS_KERNEL_VALUE_H */
