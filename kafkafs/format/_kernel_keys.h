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
 *     hash over sorted slices given newest first (see k_keys_table).
 *
 * Included once, by _kernel.c, after _kernel_omap.h (md5_halves) and _kernel_span.h (crc32c, be64).
 */
#ifndef KAFKAFS_KERNEL_KEYS_H
#define KAFKAFS_KERNEL_KEYS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *raise_corrupt(const char *msg); /* _kernel.c */

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

/* ------------------------------------------------------------------------------------ lookups */

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

#define KEYS_METHODS                                                                                              \
    {"keys_span", k_keys_span, METH_VARARGS, "keys_span(buf, seg_base[, filter]) -> (entries, txns, longs, consumed)"}, \
    {"keys_section", k_keys_section, METH_VARARGS,                                                                \
     "keys_section(data, base, last, first_ts, max_ts, attributes, producer_id, count, seg_base[, filter]) -> "   \
     "(entries, txns, longs)"},                                                                                   \
    {"keys_sort", k_keys_sort, METH_VARARGS, "keys_sort(entries) sorts in place"},                                \
    {"keys_counts", k_keys_counts, METH_VARARGS, "keys_counts(entries, bits, counts) adds the counts of each prefix"}, \
    {"keys_find", k_keys_find, METH_VARARGS, "keys_find(entries, h1, h2) -> [(rel, flags)]"},                      \
    {"keys_table", k_keys_table, METH_VARARGS, "keys_table(slices, aborted, bitmaps, tombstones) -> (kept, distinct)"},

#endif
