/*
 * The key index, compiled (kafkafs/format/keyindex.py is the reference and the wrapper; the
 * differential tests hold the two equal byte for byte).
 *
 * An entry is 24 bytes, native byte order: h1 u64, h2 u64 (the two little-endian halves of the key's
 * MD5, as the cleaner's offset map hashes keys), rel u32 (offset - the segment's base offset), flags
 * u32 (1: the value is null, a tombstone; 2: the record is in a transactional batch). Control batches
 * and records without a key have no entry. A transactional data batch adds (base offset, last offset,
 * producer id), three int64s, to the batch list; a key whose by-key name would pass 240 bytes adds
 * (rel, key) to the long keys, which the caller names by their SHA-256.
 *
 * keys_span(buf, seg_base[, filter]) -> (entries, txns, longs, consumed): the whole uncompressed v2
 *     batches at the start of a buffer of a .log, checked as render_span checks them; stops before
 *     the first one it does not take (the caller takes it the slow way).
 * keys_section(data, base, first_ts, max_ts, attributes, producer_id, count, seg_base[, filter])
 *     -> (entries, txns, longs): one records section (decompressed by the caller); damage raises.
 * keys_sort(entries): sorts in place by (h1, h2, rel).
 * keys_find(entries, h1, h2) -> [(rel, flags), ...]: the entries of a hash in sorted entries.
 * keys_table(slices, aborted, bitmaps, tombstones) -> (kept, distinct): the latest entry of each
 *     hash over sorted slices given newest first (k_keys_table, in _kernel.c, says how).
 *
 * These entry points are in _kernel.c; here is what they are made of: the entries of a records
 * section, sorting, the ranges of the table.
 */
#ifndef KAFKAFS_KERNEL_KEYS_H
#define KAFKAFS_KERNEL_KEYS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_filter.h"
#include "_kernel_omap.h"
#include "_kernel_records.h"
#include "_kernel_text.h"

typedef struct {
    uint64_t h1, h2;
    uint32_t rel, flags;
} KeyEntry;

#define KEY_TOMBSTONE 1u
#define KEY_TRANSACTIONAL 2u
#define KEY_NAME_MAX 240

typedef struct {
    uint8_t *p;
    Py_ssize_t n, cap;
} Grow;

static int grow_add(Grow *g, const void *src, Py_ssize_t n) {
    if (g->cap - g->n < n) {
        Py_ssize_t cap = g->cap ? g->cap : 4096;
        while (cap - g->n < n) cap *= 2;
        uint8_t *np = (uint8_t *)PyMem_RawRealloc(g->p, (size_t)cap);
        if (np == NULL) return -1;
        g->p = np;
        g->cap = cap;
    }
    memcpy(g->p + g->n, src, (size_t)n);
    g->n += n;
    return 0;
}

static PyObject *grow_bytes(const Grow *g) { return PyBytes_FromStringAndSize(g->p ? (const char *)g->p : "", g->n); }

/* The length of a key's by-key name (keynames.py): "$empty"; the UTF-8 text with %, / and NUL (and a
 * leading . or $) written as %XX; else "$base64:" and its base64url without padding. */
static Py_ssize_t key_name_len(const uint8_t *p, Py_ssize_t n) {
    if (n == 0) return 6;
    if (utf8_valid(p, n)) {
        Py_ssize_t len = n;
        for (Py_ssize_t i = 0; i < n; i++)
            if (p[i] == '%' || p[i] == '/' || p[i] == 0) len += 2;
        if (p[0] == '.' || p[0] == '$') len += 2;
        return len;
    }
    return 8 + (n * 4 + 2) / 3;
}

typedef struct {
    Grow entries, txns, longs; /* longs: (rel int64, position in d int64, length int64) */
} KeysOut;

static void keys_out_free(KeysOut *ko) {
    PyMem_RawFree(ko->entries.p);
    PyMem_RawFree(ko->txns.p);
    PyMem_RawFree(ko->longs.p);
}

/* The entries of one records section; 0, -1 damage (err set), -2 out of memory, -3 an offset outside
 * the segment's 32-bit range (err set). Needs no GIL. */
static int keys_records(Reader *rd, long long count, int attributes, int64_t producer_id, int64_t seg_base,
                        const RecFilter *filter, const uint8_t *origin, KeysOut *ko, Err *err) {
    int control = (attributes & 0x20) != 0, transactional = (attributes & 0x10) != 0;
    for (long long i = 0; i < count; i++) {
        Rec r;
        if (next_record(rd, &r, err) < 0) return -1;
        if (r.offset < rd->base_offset) {
            snprintf(err->msg, sizeof err->msg, "record offset %lld below the batch's", (long long)r.offset);
            return -1;
        }
        if (control || r.key.is_null) continue;
        int64_t rel = (int64_t)((uint64_t)r.offset - (uint64_t)seg_base);
        if (rel < 0 || rel > (int64_t)UINT32_MAX) {
            snprintf(err->msg, sizeof err->msg, "record offset %lld is outside its segment's range", (long long)r.offset);
            return -3;
        }
        if (filter != NULL && !filter_passes(filter, rd->d, &r)) continue;
        KeyEntry e;
        int64_t lo, hi;
        md5_halves(r.key.p, (size_t)r.key.n, &lo, &hi);
        e.h1 = (uint64_t)lo;
        e.h2 = (uint64_t)hi;
        e.rel = (uint32_t)rel;
        e.flags = (r.value.is_null ? KEY_TOMBSTONE : 0) | (transactional ? KEY_TRANSACTIONAL : 0);
        if (grow_add(&ko->entries, &e, sizeof e) < 0) return -2;
        if (r.key.n > 80 && key_name_len(r.key.p, r.key.n) > KEY_NAME_MAX) {
            int64_t item[3] = {rel, (int64_t)(r.key.p - origin), (int64_t)r.key.n};
            if (grow_add(&ko->longs, item, sizeof item) < 0) return -2;
        }
    }
    if (rd->pos != rd->end) {
        snprintf(err->msg, sizeof err->msg, "%lld bytes left over after %lld records", (long long)(rd->end - rd->pos),
                 count);
        return -1;
    }
    if (transactional && !control) {
        int64_t item[3] = {rd->base_offset, 0, producer_id};
        return grow_add(&ko->txns, item, sizeof item) < 0 ? -2 : 0;
    }
    return 0;
}

/* (entries, txns, longs) as Python objects; the long keys are copied from origin. */
static PyObject *keys_result(const KeysOut *ko, const uint8_t *origin, Py_ssize_t consumed, int with_consumed) {
    Py_ssize_t nl = ko->longs.n / (Py_ssize_t)(3 * sizeof(int64_t));
    PyObject *longs = PyList_New(nl);
    if (longs == NULL) return NULL;
    const int64_t *l = (const int64_t *)ko->longs.p;
    for (Py_ssize_t i = 0; i < nl; i++) {
        PyObject *item = Py_BuildValue("(Ly#)", (long long)l[3 * i], (const char *)origin + l[3 * i + 1],
                                       (Py_ssize_t)l[3 * i + 2]);
        if (item == NULL) {
            Py_DECREF(longs);
            return NULL;
        }
        PyList_SET_ITEM(longs, i, item);
    }
    PyObject *entries = grow_bytes(&ko->entries), *txns = entries ? grow_bytes(&ko->txns) : NULL;
    if (txns == NULL) {
        Py_XDECREF(entries);
        Py_DECREF(longs);
        return NULL;
    }
    if (with_consumed) return Py_BuildValue("(NNNn)", entries, txns, longs, consumed);
    return Py_BuildValue("(NNN)", entries, txns, longs);
}

/* ------------------------------------------------------------------------------------ sorting */

static inline int entry_less(const KeyEntry *a, const KeyEntry *b) {
    if (a->h1 != b->h1) return a->h1 < b->h1;
    if (a->h2 != b->h2) return a->h2 < b->h2;
    return a->rel < b->rel;
}

/* Stable LSD radix sort on the top 32 bits of h1 (two 16-bit passes through tmp), then insertion sort
 * for the rest of the order (runs that share those bits are short: hashes are uniform). 0, or -1 when
 * out of memory. */
static int sort_entries(KeyEntry *e, Py_ssize_t n) {
    if (n < 2) return 0;
    if (n > 64) {
        KeyEntry *tmp = (KeyEntry *)PyMem_RawMalloc((size_t)n * sizeof(KeyEntry));
        Py_ssize_t *count = (Py_ssize_t *)PyMem_RawMalloc(65536 * sizeof(Py_ssize_t));
        if (tmp == NULL || count == NULL) {
            PyMem_RawFree(tmp);
            PyMem_RawFree(count);
            return -1;
        }
        KeyEntry *src = e, *dst = tmp;
        for (int shift = 32; shift <= 48; shift += 16) {
            memset(count, 0, 65536 * sizeof(Py_ssize_t));
            for (Py_ssize_t i = 0; i < n; i++) count[(src[i].h1 >> shift) & 0xFFFF]++;
            Py_ssize_t sum = 0;
            for (int b = 0; b < 65536; b++) {
                Py_ssize_t c = count[b];
                count[b] = sum;
                sum += c;
            }
            for (Py_ssize_t i = 0; i < n; i++) dst[count[(src[i].h1 >> shift) & 0xFFFF]++] = src[i];
            KeyEntry *t = src;
            src = dst;
            dst = t;
        }
        /* two passes: the result is back in e */
        PyMem_RawFree(tmp);
        PyMem_RawFree(count);
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        if (!entry_less(&e[i], &e[i - 1])) continue;
        KeyEntry x = e[i];
        Py_ssize_t j = i;
        while (j > 0 && entry_less(&x, &e[j - 1])) {
            e[j] = e[j - 1];
            j--;
        }
        e[j] = x;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ lookups */

/* ------------------------------------------------------------------------------------ the table */

/* Whether rel falls in one of the sorted, disjoint [lo, hi] pairs of ranges (u32 pairs). */
static int in_ranges(const uint32_t *ranges, Py_ssize_t pairs, uint32_t rel) {
    Py_ssize_t lo = 0, hi = pairs;
    while (lo < hi) { /* the first pair whose hi is >= rel */
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (ranges[2 * mid + 1] < rel) lo = mid + 1;
        else hi = mid;
    }
    return lo < pairs && ranges[2 * lo] <= rel;
}

#endif /* KAFKAFS_KERNEL_KEYS_H */
