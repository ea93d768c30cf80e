/* The cleaner's offset map, compiled: MD5 of each key and the open-addressing probe of
 * kafkafs.storage.offset_map.OffsetMap (its put_many and retain_flags, the Python reference this
 * replaces, equal slot for slot: tests/storage/test_offset_map.py holds them equal with hypothesis).
 *
 * The map is three int64 columns owned by the caller (array('q') buffers): the two halves of each
 * key's MD5 (little-endian, as struct "<qq" reads the digest) and the offset, -1 for a free slot.
 * A hash goes to slot floor(lo mod slots); on a collision the step is floor(hi mod (slots - 1)) + 1
 * (Python's modulo: never negative). The keys are read into C arrays first, then the work runs with
 * the GIL released. */
#ifndef KAFKAFS_KERNEL_OMAP_H
#define KAFKAFS_KERNEL_OMAP_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

static const uint32_t md5_k[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
};
static const uint8_t md5_r[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                  5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                  4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                  6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

static inline uint32_t md5_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void md5_block(uint32_t h[4], const uint8_t *block) {
    uint32_t m[16];
    for (int j = 0; j < 16; j++) m[j] = md5_le32(block + 4 * j);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) & 15;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) & 15;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) & 15;
        }
        f = f + a + md5_k[i] + m[g];
        a = d;
        d = c;
        c = b;
        b = b + ((f << md5_r[i]) | (f >> (32 - md5_r[i])));
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
}

/* The MD5 of data[0:len] as the two signed little-endian halves of its digest. */
static void md5_halves(const uint8_t *data, size_t len, int64_t *lo, int64_t *hi) {
    uint32_t h[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    size_t done = 0;
    for (; len - done >= 64; done += 64) md5_block(h, data + done);
    uint8_t tail[128];
    size_t rest = len - done;
    memcpy(tail, data + done, rest);
    tail[rest] = 0x80;
    size_t total = rest + 1 + 8 <= 64 ? 64 : 128;
    memset(tail + rest + 1, 0, total - rest - 1);
    uint64_t bits = (uint64_t)len * 8;
    for (int j = 0; j < 8; j++) tail[total - 8 + j] = (uint8_t)(bits >> (8 * j));
    md5_block(h, tail);
    if (total == 128) md5_block(h, tail + 64);
    *lo = (int64_t)((uint64_t)h[0] | ((uint64_t)h[1] << 32));
    *hi = (int64_t)((uint64_t)h[2] | ((uint64_t)h[3] << 32));
}

static inline int64_t omap_floor_mod(int64_t x, int64_t m) {
    int64_t r = x % m;
    return r < 0 ? r + m : r;
}

/* The slot holding (lo, hi), else the free slot where it would go. */
static inline int64_t omap_slot(const int64_t *los, const int64_t *his, const int64_t *offs, int64_t slots,
                                int64_t lo, int64_t hi) {
    int64_t s = omap_floor_mod(lo, slots), step = 0;
    while (offs[s] >= 0 && !(los[s] == lo && his[s] == hi)) {
        if (!step) step = omap_floor_mod(hi, slots - 1) + 1;
        s = (s + step) % slots;
    }
    return s;
}

typedef struct {
    PyObject *keys; /* a tuple: holds the key objects while the GIL is released */
    const uint8_t **data;
    Py_ssize_t *len; /* -1: no key */
    int64_t *offset;
    int64_t *hlo, *hhi; /* the keys' hashes (omap_hash) */
    Py_ssize_t n;
} OmapInput;

/* How far ahead the probe loops prefetch the slot a later key starts at: the map is far larger than
 * the caches, so each first probe is a cache miss in each of the three columns; hashing all the keys
 * first lets those misses overlap. */
#define OMAP_PREFETCH 6

/* Hash the keys (those with an offset at most up_to; the others are not probed). No GIL needed. */
static void omap_hash(OmapInput *in, int64_t up_to) {
    for (Py_ssize_t i = 0; i < in->n; i++)
        if (in->len[i] >= 0 && in->offset[i] <= up_to) md5_halves(in->data[i], (size_t)in->len[i], &in->hlo[i], &in->hhi[i]);
}

static inline void omap_prefetch(const OmapInput *in, Py_ssize_t j, int64_t up_to, const int64_t *los,
                                 const int64_t *his, const int64_t *offs, int64_t slots) {
    if (j < in->n && in->len[j] >= 0 && in->offset[j] <= up_to) {
        int64_t s = omap_floor_mod(in->hlo[j], slots);
        __builtin_prefetch(&offs[s]);
        __builtin_prefetch(&los[s]);
        __builtin_prefetch(&his[s]);
    }
}

static void omap_input_free(OmapInput *in) {
    Py_XDECREF(in->keys);
    PyMem_Free((void *)in->data);
    PyMem_Free(in->len);
    PyMem_Free(in->offset);
    PyMem_Free(in->hlo);
    PyMem_Free(in->hhi);
}

static int omap_input(PyObject *keys, PyObject *offsets, OmapInput *in) {
    memset(in, 0, sizeof(*in));
    in->keys = PySequence_Tuple(keys);
    PyObject *offs = in->keys ? PySequence_Fast(offsets, "offsets must be a sequence") : NULL;
    if (offs == NULL) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(in->keys);
    if (PySequence_Fast_GET_SIZE(offs) != n) {
        Py_DECREF(offs);
        PyErr_SetString(PyExc_ValueError, "keys and offsets differ in length");
        return -1;
    }
    in->n = n;
    in->data = PyMem_Malloc(sizeof(*in->data) * (size_t)(n ? n : 1));
    in->len = PyMem_Malloc(sizeof(*in->len) * (size_t)(n ? n : 1));
    in->offset = PyMem_Malloc(sizeof(*in->offset) * (size_t)(n ? n : 1));
    in->hlo = PyMem_Malloc(sizeof(*in->hlo) * (size_t)(n ? n : 1));
    in->hhi = PyMem_Malloc(sizeof(*in->hhi) * (size_t)(n ? n : 1));
    if (!in->data || !in->len || !in->offset || !in->hlo || !in->hhi) {
        Py_DECREF(offs);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(in->keys, i);
        if (key == Py_None) {
            in->data[i] = NULL;
            in->len[i] = -1;
        } else if (PyBytes_Check(key)) {
            in->data[i] = (const uint8_t *)PyBytes_AS_STRING(key);
            in->len[i] = PyBytes_GET_SIZE(key);
        } else {
            Py_DECREF(offs);
            PyErr_SetString(PyExc_TypeError, "a key must be bytes or None");
            return -1;
        }
        long long o = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(offs, i));
        if (o == -1 && PyErr_Occurred()) {
            Py_DECREF(offs);
            return -1;
        }
        in->offset[i] = (int64_t)o;
    }
    Py_DECREF(offs);
    return 0;
}

/* The three columns: equal lengths, whole int64s, at least 2 slots. */
static int omap_columns(Py_buffer *lo, Py_buffer *hi, Py_buffer *off, int64_t *slots) {
    if (lo->len != hi->len || lo->len != off->len || lo->len % 8 || lo->len < 16) {
        PyErr_SetString(PyExc_ValueError, "the map's columns must be int64 arrays of the same length (2 slots or more)");
        return -1;
    }
    *slots = (int64_t)(lo->len / 8);
    return 0;
}

#endif /* KAFKAFS_KERNEL_OMAP_H */
