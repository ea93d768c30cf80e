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
            int spaced;
            if (json_check(s, n, &spaced)) {
                if (!spaced) return out_write(o, s, n);
                Py_ssize_t mark = o->len;
                int r = put_json_compact(o, s, n); /* counts only, when o does */
                if (r < 0) return -1;
                if (r == 1) return 0;
                o->len = mark; /* cannot happen: the same bytes validated above */
            }
        }
    }
    return put_string(o, s, n);
}

/* The UTF-8 sequence at s[0:n] (n >= 1): its length when it is valid, else minus the length of its
 * maximal subpart (the bytes one U+FFFD replaces), as Python's UTF-8 decoder decides (Unicode's
 * "substitution of maximal subparts": a start byte and the continuation bytes that may follow it). */
static Py_ssize_t utf8_sequence(const uint8_t *s, Py_ssize_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    Py_ssize_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1; /* an invalid start byte */
    }
    Py_ssize_t i = 1;
    for (; i < need && i < n; i++) {
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return -i;
    }
    return i == need ? need : -i; /* cut off by the end: the whole valid prefix is one subpart */
}

/* A header key: a JSON string of its bytes decoded as Python's 'replace' error handler decodes them
 * (records.py: key.decode("utf-8", "replace")), in C: no GIL needed, so none is taken. */
static int put_header_key(Out *o, const uint8_t *s, Py_ssize_t n) {
    if (utf8_valid(s, n)) return put_string(o, s, n);
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
