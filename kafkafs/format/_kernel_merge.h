/*
 * consume's interleaving in the kernel (kafkafs/consume_merge.py drives it): Merger, which writes the
 * lines of many partitions in timestamp order (ties by partition) without a Python object per record
 * (the type, its methods and merge_module_init, which _kernel.c's module init calls). Its input,
 * render_span_lines (a span's lines with each one's end and timestamp), is in _kernel.c.
 *
 * Merger's order is heapq.merge's over each partition's (timestamp, partition, offset, line) tuples, the
 * order consume printed before (consume.py's _Reader.lines is the reference): each step writes the
 * smallest head of the partitions, whose own lines stay in offset order even when their timestamps do
 * not rise. The keys never tie (one stream per partition), so that order is one and the same whatever
 * the heap does. A stream whose loaded lines are all written must be loaded again (or finished) before
 * anything else is written: run() stops and names it.
 */
#ifndef KAFKAFS_KERNEL_MERGE_H
#define KAFKAFS_KERNEL_MERGE_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernel_text.h"

/* ------------------------------------------------------------------------------------ Merger */

typedef struct {
    PyObject *data, *stamps, *ends; /* the loaded chunk (owned references) */
    const char *d;
    const int64_t *s, *e;
    Py_ssize_t i, n; /* the next line to write, the lines loaded */
    long long partition;
    int finished;
} MStream;

/* A stream's head: its next line's timestamp and its partition (the key), in one array so that the
 * tree's compares touch nothing else; a stream with no line to write has the largest key. */
typedef struct {
    int64_t ts;
    long long partition;
} MKey;

/* Threads: one Merger belongs to one consume; its methods run with the GIL held (no two at once). */
typedef struct {
    PyObject_HEAD MStream *streams;
    Py_ssize_t k;
    MKey *keys;       /* per stream */
    Py_ssize_t *tree; /* the loser tree: tree[0] the winner, tree[1..k-1] the losers (2k: the build's) */
    int64_t stop_ts;
    int has_stop;
    Out out; /* lines written and not yet returned (run keeps them while under max_bytes) */
} Merger;

static void mstream_clear(MStream *s) {
    Py_CLEAR(s->data);
    Py_CLEAR(s->stamps);
    Py_CLEAR(s->ends);
    s->d = NULL;
    s->s = s->e = NULL;
    s->i = s->n = 0;
}

static void merger_dealloc(Merger *self) {
    if (self->streams)
        for (Py_ssize_t j = 0; j < self->k; j++) mstream_clear(&self->streams[j]);
    PyMem_Free(self->streams);
    PyMem_Free(self->keys);
    PyMem_Free(self->tree);
    Py_XDECREF(self->out.bytes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Merger(partitions, stop_ts): one stream per partition number, in that order; stop_ts None or the
 * timestamp a partition stops before (consume's e@TS). */
static int merger_init(Merger *self, PyObject *args, PyObject *kwds) {
    (void)kwds;
    PyObject *parts, *stop;
    if (!PyArg_ParseTuple(args, "OO", &parts, &stop)) return -1;
    PyObject *fast = PySequence_Fast(parts, "partitions must be a sequence");
    if (fast == NULL) return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(fast);
    if (self->streams) { /* __init__ called again */
        for (Py_ssize_t j = 0; j < self->k; j++) mstream_clear(&self->streams[j]);
        PyMem_Free(self->streams);
        PyMem_Free(self->keys);
        PyMem_Free(self->tree);
        self->streams = NULL;
        self->keys = NULL;
        self->tree = NULL;
        Py_CLEAR(self->out.bytes);
        memset(&self->out, 0, sizeof self->out);
        self->k = 0;
    }
    self->streams = (MStream *)PyMem_Calloc((size_t)(k ? k : 1), sizeof(MStream));
    self->keys = (MKey *)PyMem_Calloc((size_t)(k ? k : 1), sizeof(MKey));
    self->tree = (Py_ssize_t *)PyMem_Calloc((size_t)(2 * k + 2), sizeof(Py_ssize_t));
    if (!self->streams || !self->keys || !self->tree) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    self->k = k;
    for (Py_ssize_t j = 0; j < k; j++) {
        long long p = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, j));
        if (p == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        self->streams[j].partition = p;
    }
    Py_DECREF(fast);
    self->has_stop = stop != Py_None;
    if (self->has_stop) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(stop, &overflow);
        if (v == -1 && PyErr_Occurred()) return -1;
        /* past 64 bits: no timestamp reaches it (above) or every one does (below) */
        self->stop_ts = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : v;
        if (overflow > 0) self->has_stop = 0;
    }
    return 0;
}

static int stream_index(Merger *self, Py_ssize_t j) {
    if (j < 0 || j >= self->k) {
        PyErr_SetString(PyExc_IndexError, "no such stream");
        return -1;
    }
    return 0;
}

/* load(j, data, stamps, ends) -> (lines kept, stopped): stream j's next lines (line i is
 * data[ends[i-1]:ends[i]], ends[-1] taken as 0), after the last loaded ones are all written. With a
 * stop timestamp, the lines from the first that reaches it are dropped and the stream is finished
 * (stopped True). */
static PyObject *merger_load(Merger *self, PyObject *args) {
    Py_ssize_t j;
    PyObject *data, *stamps, *ends;
    if (!PyArg_ParseTuple(args, "nSSS", &j, &data, &stamps, &ends)) return NULL;
    if (stream_index(self, j) < 0) return NULL;
    MStream *s = &self->streams[j];
    if (s->i < s->n || s->finished) {
        PyErr_SetString(PyExc_ValueError, "the stream still has lines to write, or is finished");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(stamps) / (Py_ssize_t)sizeof(int64_t);
    if (PyBytes_GET_SIZE(stamps) % (Py_ssize_t)sizeof(int64_t) || PyBytes_GET_SIZE(ends) != PyBytes_GET_SIZE(stamps)) {
        PyErr_SetString(PyExc_ValueError, "stamps and ends must be int64 arrays of one length");
        return NULL;
    }
    const int64_t *e = (const int64_t *)PyBytes_AS_STRING(ends);
    int64_t prev = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (e[i] < prev || e[i] > PyBytes_GET_SIZE(data)) {
            PyErr_SetString(PyExc_ValueError, "line ends must rise within the data");
            return NULL;
        }
        prev = e[i];
    }
    const int64_t *st = (const int64_t *)PyBytes_AS_STRING(stamps);
    Py_ssize_t kept = n;
    int stopped = 0;
    if (self->has_stop)
        for (Py_ssize_t i = 0; i < n; i++)
            if (st[i] >= self->stop_ts) {
                kept = i;
                stopped = 1;
                break;
            }
    mstream_clear(s);
    Py_INCREF(data);
    Py_INCREF(stamps);
    Py_INCREF(ends);
    s->data = data;
    s->stamps = stamps;
    s->ends = ends;
    s->d = PyBytes_AS_STRING(data);
    s->s = st;
    s->e = e;
    s->i = 0;
    s->n = kept;
    s->finished = stopped;
    return Py_BuildValue("(nO)", kept, stopped ? Py_True : Py_False);
}

/* finish(j): stream j has no more lines. */
static PyObject *merger_finish(Merger *self, PyObject *args) {
    Py_ssize_t j;
    if (!PyArg_ParseTuple(args, "n", &j)) return NULL;
    if (stream_index(self, j) < 0) return NULL;
    self->streams[j].finished = 1;
    Py_RETURN_NONE;
}

static inline int kless(const MKey *keys, Py_ssize_t a, Py_ssize_t b) {
    return keys[a].ts < keys[b].ts || (keys[a].ts == keys[b].ts && keys[a].partition < keys[b].partition);
}

static inline void set_key(MKey *key, const MStream *s) {
    if (s->i < s->n) {
        key->ts = s->s[s->i];
        key->partition = s->partition;
    } else {
        key->ts = INT64_MAX;
        key->partition = LLONG_MAX;
    }
}

/* run(max_lines, max_bytes) -> (data, lines, need): the next lines in order, until a stream whose
 * lines are all written needs loading (need: its index), every stream is finished and written
 * (need -1), or max_lines lines / at least max_bytes bytes are written (need -2). Nothing is written
 * while some unfinished stream has no line loaded (need names it). lines counts the lines written by
 * this call; data holds them, and those of earlier calls, except while need >= 0 and less than
 * max_bytes are written: then data is empty and the lines are kept (drain() gives them).
 *
 * A loser tree over the streams (Knuth's replacement selection): after a line, one compare a level
 * from its stream's leaf to the root. A run of one stream's lines is copied at once. */
static PyObject *merger_run(Merger *self, PyObject *args) {
    Py_ssize_t max_lines, max_bytes;
    if (!PyArg_ParseTuple(args, "nn", &max_lines, &max_bytes)) return NULL;
    MStream *st = self->streams;
    MKey *keys = self->keys;
    Py_ssize_t k = self->k, *tree = self->tree;
    if (k == 0) return Py_BuildValue("(y#nn)", "", (Py_ssize_t)0, (Py_ssize_t)0, (Py_ssize_t)-1);
    for (Py_ssize_t j = 0; j < k; j++) {
        if (st[j].i >= st[j].n && !st[j].finished)
            return Py_BuildValue("(y#nn)", "", (Py_ssize_t)0, (Py_ssize_t)0, j);
        set_key(&keys[j], &st[j]);
    }
    /* the build: each node's winner bottom up (in scratch), its loser kept */
    {
        Py_ssize_t *w = (Py_ssize_t *)PyMem_Malloc((size_t)(2 * k) * sizeof(Py_ssize_t));
        if (w == NULL) return PyErr_NoMemory();
        for (Py_ssize_t j = 0; j < k; j++) w[k + j] = j;
        for (Py_ssize_t node = k - 1; node >= 1; node--) {
            Py_ssize_t l = w[2 * node], r = w[2 * node + 1];
            if (kless(keys, r, l)) {
                w[node] = r;
                tree[node] = l;
            } else {
                w[node] = l;
                tree[node] = r;
            }
        }
        tree[0] = k > 1 ? w[1] : 0;
        PyMem_Free(w);
    }
    Out o = self->out; /* what earlier calls wrote and kept */
    if (o.bytes == NULL) {
        Py_ssize_t cap = max_bytes > 0 && max_bytes < PY_SSIZE_T_MAX / 2 ? max_bytes + 65536 : 65536;
        o.bytes = PyBytes_FromStringAndSize(NULL, cap);
        if (o.bytes == NULL) return NULL;
        o.buf = PyBytes_AS_STRING(o.bytes);
        o.cap = cap;
        o.len = 0;
    }
    Py_ssize_t lines = 0, need = -1;
    int oom = 0;
    PyThreadState *ts = gil_release();
    o.ts = &ts;
    Py_ssize_t run = -1;  /* the stream whose lines are being gathered */
    int64_t run_from = 0; /* where in its data they start */
#define FLUSH_RUN()                                                                                   \
    do {                                                                                              \
        if (run >= 0) {                                                                               \
            const MStream *r_ = &st[run];                                                             \
            int64_t end_ = r_->i ? r_->e[r_->i - 1] : 0;                                              \
            if (end_ > run_from && out_write(&o, r_->d + run_from, (Py_ssize_t)(end_ - run_from)) < 0) \
                oom = 1;                                                                              \
            run = -1;                                                                                 \
        }                                                                                             \
    } while (0)
    for (;;) {
        Py_ssize_t j = tree[0];
        MStream *s = &st[j];
        if (s->i >= s->n) { /* the winner has no line: every stream is written */
            FLUSH_RUN();
            need = -1;
            break;
        }
        if (j != run) {
            FLUSH_RUN();
            if (oom) break;
            run = j;
            run_from = s->i ? s->e[s->i - 1] : 0;
        }
        if (lines >= max_lines || o.len + ((s->i ? s->e[s->i - 1] : 0) - run_from) >= max_bytes) {
            FLUSH_RUN();
            need = -2;
            break;
        }
        s->i++;
        lines++;
        if (s->i >= s->n && !s->finished) { /* its lines are all written: it must be loaded again */
            FLUSH_RUN();
            need = j;
            break;
        }
        set_key(&keys[j], s);
        if (s->i < s->n) { /* its next line is wanted once the others have had theirs: into the cache */
            const char *p = s->d + s->e[s->i - 1];
            __builtin_prefetch(p);
            __builtin_prefetch(p + 64);
            __builtin_prefetch(p + 128);
            __builtin_prefetch(p + 192);
        }
        Py_ssize_t cur = j;
        for (Py_ssize_t node = (j + k) / 2; node >= 1; node /= 2)
            if (kless(keys, tree[node], cur)) {
                Py_ssize_t t = tree[node];
                tree[node] = cur;
                cur = t;
            }
        tree[0] = cur;
    }
#undef FLUSH_RUN
    gil_restore(&ts);
    o.ts = NULL;
    if (oom) {
        Py_XDECREF(o.bytes);
        memset(&self->out, 0, sizeof self->out);
        return PyErr_NoMemory();
    }
    if (need >= 0 && o.len < max_bytes) { /* kept for the next call: fewer, larger writes */
        self->out = o;
        return Py_BuildValue("(y#nn)", "", (Py_ssize_t)0, lines, need);
    }
    memset(&self->out, 0, sizeof self->out);
    if (_PyBytes_Resize(&o.bytes, o.len) < 0) return NULL;
    return Py_BuildValue("(Nnn)", o.bytes, lines, need);
}

/* drain() -> bytes: the lines run() wrote and kept (run returns them itself once it stops for any
 * reason but a stream to load, or they reach max_bytes). */
static PyObject *merger_drain(Merger *self, PyObject *args) {
    (void)args;
    Out o = self->out;
    memset(&self->out, 0, sizeof self->out);
    if (o.bytes == NULL) return PyBytes_FromStringAndSize("", 0);
    if (_PyBytes_Resize(&o.bytes, o.len) < 0) return NULL;
    return o.bytes;
}

static PyMethodDef merger_methods[] = {
    {"drain", (PyCFunction)merger_drain, METH_NOARGS, "drain() -> bytes"},
    {"load", (PyCFunction)merger_load, METH_VARARGS, "load(j, data, stamps, ends) -> (kept, stopped)"},
    {"finish", (PyCFunction)merger_finish, METH_VARARGS, "finish(j)"},
    {"run", (PyCFunction)merger_run, METH_VARARGS, "run(max_lines, max_bytes) -> (data, lines, need)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MergerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kafkafs.format._kernel.Merger",
    .tp_basicsize = sizeof(Merger),
    .tp_dealloc = (destructor)merger_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Merger(partitions, stop_ts): many partitions' lines in timestamp order (_kernel_merge.h)",
    .tp_methods = merger_methods,
    .tp_init = (initproc)merger_init,
    .tp_new = PyType_GenericNew,
};

/* Called from the module's init: adds Merger; -1 with an error set. */
static int merge_module_init(PyObject *m) {
    if (PyType_Ready(&MergerType) < 0) return -1;
    Py_INCREF(&MergerType);
    if (PyModule_AddObject(m, "Merger", (PyObject *)&MergerType) < 0) {
        Py_DECREF(&MergerType);
        return -1;
    }
    return 0;
}

#endif /* KAFKAFS_KERNEL_MERGE_H */
