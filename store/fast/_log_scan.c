/* The dispatch's walk over commit-log records, compiled (store/log/reader.py _scan).
 *
 * scan(buf, pos, limit, max_count, budget, any_before) walks TOTALSIZE from ``pos`` while
 * fewer than ``max_count`` records were taken and an 8-byte header fits below ``limit``; it
 * stops before a record that would take the chunk past ``budget`` bytes (unless it would be
 * the chunk's first record: ``any_before`` says whether earlier segments gave some). It
 * returns (positions, new_pos, status, magic, total): status 0 = stopped, 1 = end-of-segment
 * blank at new_pos, 2 = a bad record header at new_pos (its magic and size, for the error).
 * A message record is either version (V1 or V2: RocketMQ's MessageVersion, store/codec/layout.py).
 * Same decisions as the Python loop, ~0.35 us per record cheaper (one unpack, three checks and
 * a list append each in Python).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "_format.h"

PyDoc_STRVAR(scan_doc, "scan(buf, pos, limit, max_count, budget, any_before) -> "
                       "(positions, new_pos, status, magic, total)");

static PyObject *scan(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, limit, max_count, budget;
    int any_before;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nnnnp:scan", &view, &pos, &limit, &max_count, &budget,
                          &any_before)) {
        return NULL;
    }
    PyObject *positions = PyList_New(0);
    if (positions == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    if (limit > view.len) {
        limit = view.len;
    }
    Py_ssize_t start = pos, count = 0;
    int status = 0;
    uint32_t magic = 0;
    int32_t total = 0;
    while (count < max_count && pos >= 0 && pos + BLANK_HEADER_SIZE <= limit) {
        total = (int32_t)be32(buf + pos + OFF_TOTAL_SIZE);
        magic = be32(buf + pos + OFF_MAGIC);
        if (magic == BLANK_MAGIC_CODE) {
            status = 1;
            break;
        }
        if ((count > 0 || any_before) && pos - start + (Py_ssize_t)total > budget) {
            break; /* before validating: a caller may stop just short of bad data */
        }
        if ((magic != MESSAGE_MAGIC_CODE && magic != MESSAGE_MAGIC_CODE_V2) || total <= 0 ||
            pos + (Py_ssize_t)total > limit) {
            status = 2;
            break;
        }
        PyObject *at = PyLong_FromSsize_t(pos);
        if (at == NULL || PyList_Append(positions, at) < 0) {
            Py_XDECREF(at);
            Py_DECREF(positions);
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(at);
        pos += total;
        count++;
    }
    PyBuffer_Release(&view);
    if (status == 0) { /* the header fields only describe an end or a bad record */
        magic = 0;
        total = 0;
    }
    return Py_BuildValue("(NniIi)", positions, pos, status, (unsigned int)magic, (int)total);
}

/* gather_tails(buf, positions, pad) -> (data, meta) or None: the tails (TOPICLENGTH .. end of
 * PROPERTIES; TOPICLENGTH is two bytes in a V2 record, one in V1) of the records at ``positions`` (int64, native order) of ``buf``, back to back
 * in ``data`` (a bytearray: the columnar decoders mark separators in it) followed by ``pad``
 * zero bytes, and ``meta``: three int64 columns (each tail's start and end in ``data``, its
 * PROPERTIES start). None for a record the checks refuse, exactly where
 * store/fast/record_tails.py's numpy twin refuses it (a truncated header, a bad magic, a
 * negative body length, lengths that do not add up). One pass in C where the twin spent
 * ~0.35 us a record joining tails and checking lengths with array arithmetic. */
PyDoc_STRVAR(gather_tails_doc, "gather_tails(buf, positions, pad) -> (data, meta) | None");

static PyObject *gather_tails(PyObject *module, PyObject *args) {
    Py_buffer view, at;
    Py_ssize_t pad;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*y*n:gather_tails", &view, &at, &pad)) {
        return NULL;
    }
    PyObject *result = NULL, *data = NULL, *meta = NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const int64_t *pos = (const int64_t *)at.buf;
    Py_ssize_t count = at.len / (Py_ssize_t)sizeof(int64_t), total_tail = 0;
    if (pad < 0 || at.len % (Py_ssize_t)sizeof(int64_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "positions must be int64 and pad >= 0");
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) { /* pass 1: check every record, size the tails */
        int64_t p = pos[i];
        if (p < 0 || p + RECORD_HEADER_SIZE > view.len) {
            goto refused;
        }
        int wide = be32(buf + p + OFF_MAGIC) == MESSAGE_MAGIC_CODE ? 0 : 1;
        if (wide && be32(buf + p + OFF_MAGIC) != MESSAGE_MAGIC_CODE_V2) {
            goto refused;
        }
        int64_t body = (int32_t)be32(buf + p + OFF_BODY_LENGTH);
        int64_t end = p + (int32_t)be32(buf + p + OFF_TOTAL_SIZE);
        int64_t tail = p + RECORD_HEADER_SIZE + body;
        if (body < 0 || end > view.len || tail + 3 + wide > end) {
            goto refused;
        }
        int64_t props = wide ? tail + 4 + (((int64_t)buf[tail] << 8) | buf[tail + 1])
                             : tail + 3 + buf[tail];
        if (props > end || props + (((int64_t)buf[props - 2] << 8) | buf[props - 1]) != end) {
            goto refused;
        }
        total_tail += end - tail;
    }
    data = PyByteArray_FromStringAndSize(NULL, total_tail + pad);
    meta = PyBytes_FromStringAndSize(NULL, 3 * count * (Py_ssize_t)sizeof(int64_t));
    if (data == NULL || meta == NULL) {
        goto done;
    }
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(data);
    int64_t *starts = (int64_t *)PyBytes_AS_STRING(meta), *ends = starts + count,
            *props_at = ends + count;
    int64_t written = 0;
    for (Py_ssize_t i = 0; i < count; i++) { /* pass 2: copy */
        int64_t p = pos[i];
        int64_t tail = p + RECORD_HEADER_SIZE + (int32_t)be32(buf + p + OFF_BODY_LENGTH);
        int64_t length = p + (int32_t)be32(buf + p + OFF_TOTAL_SIZE) - tail;
        memcpy(out + written, buf + tail, (size_t)length);
        starts[i] = written;
        props_at[i] = be32(buf + p + OFF_MAGIC) == MESSAGE_MAGIC_CODE
                          ? written + 3 + buf[tail]
                          : written + 4 + (((int64_t)buf[tail] << 8) | buf[tail + 1]);
        written += length;
        ends[i] = written;
    }
    memset(out + written, 0, (size_t)pad);
    result = PyTuple_Pack(2, data, meta);
    goto done;
refused:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(data);
    Py_XDECREF(meta);
    PyBuffer_Release(&view);
    PyBuffer_Release(&at);
    return result;
}

/* scan_properties(data, starts, props, ends, topic_ids, prefixes) -> (tags, key_rows, key_hashes,
 * odd): what dispatch takes from every record's PROPERTIES, in one pass over the tails that
 * ``gather_tails`` joined (``data``; ``starts``/``props``/``ends`` its int64 columns).
 * ``topic_ids`` (int64, per record) index ``prefixes`` (int64: the hashCode of "topic#" as
 * uint32). Returned, as int64 columns (``tags`` and ``key_hashes`` in bytearrays: the caller
 * writes the odd values in): ``tags``, per record the Java hashCode (int32) of its last TAGS
 * value (0 without); ``key_rows`` and ``key_hashes``, per index key in entry order (per record
 * its last UNIQ_KEY, then its last KEYS value's space-separated tokens; empty ones dropped)
 * its record and RocketMQ's indexKeyHash of "topic#key". ``odd`` lists the values
 * with a byte >= 0x80, whose hash Java takes over UTF-16 units: (0, record, start, end) for a
 * TAGS value, (1, entry, start, end) for a key; the caller hashes those with the reference.
 * The numpy twin (store/fast/dispatch_properties.py) splits the same pairs with array passes
 * over every byte of the chunk (~0.25 us a 1 KiB record with a UNIQ_KEY; this: ~0.03). */
PyDoc_STRVAR(scan_properties_doc,
             "scan_properties(data, starts, props, ends, topic_ids, prefixes) -> "
             "(tags, key_rows, key_hashes, odd)");

typedef struct {
    int64_t *rows, *hashes;
    Py_ssize_t len, cap;
} KeyColumns;

static int keys_push(KeyColumns *keys, int64_t row, int64_t hash) {
    if (keys->len == keys->cap) {
        Py_ssize_t cap = keys->cap ? 2 * keys->cap : 256;
        int64_t *rows = PyMem_Realloc(keys->rows, (size_t)cap * sizeof(int64_t));
        if (rows == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        keys->rows = rows;
        int64_t *hashes = PyMem_Realloc(keys->hashes, (size_t)cap * sizeof(int64_t));
        if (hashes == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        keys->hashes = hashes;
        keys->cap = cap;
    }
    keys->rows[keys->len] = row;
    keys->hashes[keys->len] = hash;
    keys->len++;
    return 0;
}

/* Java's String.hashCode polynomial over bytes, from ``h``; *high set when a byte is >= 0x80. */
static inline uint32_t java_hash(uint32_t h, const unsigned char *p, Py_ssize_t n, int *high) {
    unsigned char any = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        h = 31u * h + p[i];
        any |= p[i];
    }
    *high = (any & 0x80) != 0;
    return h;
}

/* RocketMQ's indexKeyHashMethod: abs of the int32, 0 for Integer.MIN_VALUE. */
static inline int64_t index_hash(uint32_t h) {
    int64_t s = (int32_t)h;
    return s == INT32_MIN ? 0 : (s < 0 ? -s : s);
}

/* A pair is ``name`` when it is just ``name`` or starts with ``name\x01``; *value its value. */
static inline int pair_is(const unsigned char *p, Py_ssize_t len, const char *name, Py_ssize_t n,
                          Py_ssize_t *value) {
    if (len < n || memcmp(p, name, (size_t)n) != 0 || (len > n && p[n] != 1)) {
        return 0;
    }
    *value = len > n ? n + 1 : n;
    return 1;
}

static int odd_push(PyObject *odd, int kind, Py_ssize_t index, int64_t a, int64_t b) {
    PyObject *item = Py_BuildValue("(inLL)", kind, index, (long long)a, (long long)b);
    if (item == NULL) {
        return -1;
    }
    int rc = PyList_Append(odd, item);
    Py_DECREF(item);
    return rc;
}

static int push_key(KeyColumns *keys, PyObject *odd, const unsigned char *d, int64_t row,
                    uint32_t prefix, int64_t a, int64_t b) {
    int high;
    uint32_t h = java_hash(prefix, d + a, (Py_ssize_t)(b - a), &high);
    if (high && odd_push(odd, 1, keys->len, a, b) < 0) {
        return -1;
    }
    return keys_push(keys, row, high ? 0 : index_hash(h));
}

static PyObject *scan_properties(PyObject *module, PyObject *args) {
    Py_buffer v[6];
    (void)module;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*:scan_properties", &v[0], &v[1], &v[2], &v[3],
                          &v[4], &v[5])) {
        return NULL;
    }
    PyObject *result = NULL, *tags = NULL, *rows = NULL, *hashes = NULL, *odd = NULL;
    KeyColumns keys = {NULL, NULL, 0, 0};
    const unsigned char *d = (const unsigned char *)v[0].buf;
    const int64_t *starts = v[1].buf, *props = v[2].buf, *ends = v[3].buf, *topic_ids = v[4].buf,
                  *prefixes = v[5].buf;
    Py_ssize_t count = v[1].len / 8, topics = v[5].len / 8;
    if (v[1].len % 8 || v[2].len != v[1].len || v[3].len != v[1].len || v[4].len != v[1].len ||
        v[5].len % 8) {
        PyErr_SetString(PyExc_ValueError, "columns must be int64 of one length per record");
        goto done;
    }
    tags = PyByteArray_FromStringAndSize(NULL, count * 8); /* writable: odd values go in */
    odd = PyList_New(0);
    if (tags == NULL || odd == NULL) {
        goto done;
    }
    int64_t *codes = (int64_t *)PyByteArray_AS_STRING(tags);
    for (Py_ssize_t r = 0; r < count; r++) {
        int64_t a = props[r], e = ends[r], topic = topic_ids[r];
        if (starts[r] < 0 || a < starts[r] || e < a || e > v[0].len || topic < 0 ||
            topic >= topics) {
            PyErr_SetString(PyExc_ValueError, "a record's columns are outside the data");
            goto done;
        }
        int64_t tag_a = -1, tag_b = 0, uniq_a = -1, uniq_b = 0, keys_a = -1, keys_b = 0;
        for (int64_t p = a; p < e;) { /* the pairs: runs between \x02 separators */
            const unsigned char *sep = memchr(d + p, PROPERTY_SEPARATOR, (size_t)(e - p));
            int64_t q = sep == NULL ? e : sep - d;
            Py_ssize_t len = (Py_ssize_t)(q - p), value;
            if (pair_is(d + p, len, "TAGS", 4, &value)) {
                tag_a = p + value, tag_b = q;
            } else if (pair_is(d + p, len, "KEYS", 4, &value)) {
                keys_a = p + value, keys_b = q;
            } else if (pair_is(d + p, len, "UNIQ_KEY", 8, &value)) {
                uniq_a = p + value, uniq_b = q;
            }
            p = q + 1;
        }
        codes[r] = 0;
        if (tag_a >= 0) {
            int high;
            uint32_t h = java_hash(0, d + tag_a, (Py_ssize_t)(tag_b - tag_a), &high);
            if (high && odd_push(odd, 0, r, tag_a, tag_b) < 0) {
                goto done;
            }
            codes[r] = high ? 0 : (int32_t)h;
        }
        uint32_t prefix = (uint32_t)prefixes[topic];
        if (uniq_a >= 0 && uniq_b > uniq_a &&
            push_key(&keys, odd, d, r, prefix, uniq_a, uniq_b) < 0) {
            goto done;
        }
        for (int64_t p = keys_a; keys_a >= 0 && p <= keys_b;) { /* tokens split on spaces */
            const unsigned char *space = memchr(d + p, ' ', (size_t)(keys_b - p));
            int64_t q = space == NULL ? keys_b : space - d;
            if (q > p && push_key(&keys, odd, d, r, prefix, p, q) < 0) {
                goto done;
            }
            p = q + 1;
        }
    }
    rows = PyBytes_FromStringAndSize((const char *)keys.rows, keys.len * 8);
    hashes = PyByteArray_FromStringAndSize((const char *)keys.hashes, keys.len * 8);
    if (rows != NULL && hashes != NULL) {
        result = PyTuple_Pack(4, tags, rows, hashes, odd);
    }
done:
    PyMem_Free(keys.rows);
    PyMem_Free(keys.hashes);
    Py_XDECREF(tags);
    Py_XDECREF(rows);
    Py_XDECREF(hashes);
    Py_XDECREF(odd);
    for (int i = 0; i < 6; i++) {
        PyBuffer_Release(&v[i]);
    }
    return result;
}

/* topic_ids(data, starts, topic_lengths) -> (bytearray of int64, list of bytes): per record an
 * index into the list of the chunk's distinct topics (in first-seen order), given each record's
 * tail start in ``data`` (TOPICLENGTH there, the topic after it) and topic length. A chunk's
 * records come in runs of one topic (a send batch each), so a topic is looked up once a run
 * (one bytes object and one dict lookup); the records of a run share its id. Its twin in
 * store/fast/dispatch_columns.py (``_topic_runs_numpy`` and a dict a run) cost ~1 us a run in
 * Python: 0.07 us a message at 256 topics' 16-message batches (issue 33). */
PyDoc_STRVAR(topic_ids_doc,
             "topic_ids(data, starts, topic_lengths) -> (bytearray int64 ids, list of bytes)");

static PyObject *topic_ids(PyObject *module, PyObject *args) {
    Py_buffer view, at, lens;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*y*y*:topic_ids", &view, &at, &lens)) {
        return NULL;
    }
    PyObject *result = NULL, *ids_array = NULL, *names = NULL, *seen = NULL;
    const unsigned char *d = (const unsigned char *)view.buf;
    const int64_t *starts = at.buf, *len = lens.buf;
    Py_ssize_t count = at.len / 8;
    if (at.len % 8 || lens.len != at.len) {
        PyErr_SetString(PyExc_ValueError, "starts and topic_lengths are int64, one per record");
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (starts[i] < 0 || len[i] < 0 || starts[i] + 1 + len[i] > view.len) {
            PyErr_SetString(PyExc_ValueError, "a topic lies outside the data");
            goto done;
        }
    }
    ids_array = PyByteArray_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    names = PyList_New(0);
    seen = PyDict_New();
    if (ids_array == NULL || names == NULL || seen == NULL) {
        goto done;
    }
    int64_t *ids = (int64_t *)PyByteArray_AS_STRING(ids_array);
    int64_t current = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i == 0 || len[i] != len[i - 1] ||
            memcmp(d + starts[i] + 1, d + starts[i - 1] + 1, (size_t)len[i]) != 0) {
            PyObject *name = PyBytes_FromStringAndSize((const char *)d + starts[i] + 1, len[i]);
            if (name == NULL) {
                goto done;
            }
            PyObject *found = PyDict_GetItemWithError(seen, name); /* borrowed */
            if (found != NULL) {
                current = PyLong_AsLongLong(found);
            } else if (PyErr_Occurred()) {
                Py_DECREF(name);
                goto done;
            } else {
                current = PyList_GET_SIZE(names);
                PyObject *number = PyLong_FromLongLong(current);
                int failed = number == NULL || PyDict_SetItem(seen, name, number) < 0 ||
                             PyList_Append(names, name) < 0;
                Py_XDECREF(number);
                if (failed) {
                    Py_DECREF(name);
                    goto done;
                }
            }
            Py_DECREF(name);
        }
        ids[i] = current;
    }
    result = PyTuple_Pack(2, ids_array, names);
done:
    Py_XDECREF(ids_array);
    Py_XDECREF(names);
    Py_XDECREF(seen);
    PyBuffer_Release(&view);
    PyBuffer_Release(&at);
    PyBuffer_Release(&lens);
    return result;
}

PyDoc_STRVAR(append_runs_doc,
             "append_runs(queues, keys, firsts, bounds, ends, data, room, tail_max, advanced) -> "
             "(rest, used)");

/* Dispatch's usual runs, compiled (the twin of store/queue/consume_queue.py
 * ConsumeQueue.append_next, looped by store/dispatch/dispatcher.py apply_ready): run i is
 * keys[i] = (topic, queue id), from logical offset firsts[i], its packed units
 * data[bounds[i]:bounds[i + 1]], its last record ending at ends[i]. The queue
 * queues[keys[i]] takes the run here when it is the queue's next units, its tail (a
 * bytearray) has room below tail_max, the tails' budget has room (``room`` bytes in all for
 * this call) and the units lie in the newest file's allocated part; the queue's _write_pos
 * and max_physical_offset move and advanced[key] becomes its new max offset. Any other run
 * is left, with every later run of its queue (a queue's runs keep their order), for the
 * Python loop: its index goes into ``rest``. A run that finds its tail full spills it
 * (spill_run). ``used``: tail bytes added, net of spilled tails (the caller adds them to the
 * tails' total). At 256 topics ~64 runs of 16 units a 1 MiB chunk: ~1.3 us of
 * Python a run, ~0.3 us here (issue 33). A queue is a QueueState (below: ConsumeQueue's base)
 * and its files QueueFileStates, else the run is left; tests/store/test_queue_tails.py runs
 * both paths on the same runs. */
/* A tail grown to ``size`` bytes: its allocation doubles (up to tail_max) instead of growing
 * by exactly the run, which bytearray does for any growth over 1/8 (a 320 B run into a tail
 * of 320-4,096 B: a realloc, most often a copy of the whole tail, a run; memmove and realloc
 * were ~0.05 us a message more at 256 topics than at one in perf of the bench's broker, not
 * all of it tails). The shrink back to ``size`` keeps the allocation (bytearray keeps it down
 * to half). The tails' budget counts their lengths; their allocations are at most twice
 * those, and under tail_max each. */
static int grow_tail(PyObject *tail, Py_ssize_t size, long long tail_max) {
    PyByteArrayObject *bytes = (PyByteArrayObject *)tail;
    if (size + (bytes->ob_start - bytes->ob_bytes) < bytes->ob_alloc) {
        return PyByteArray_Resize(tail, size); /* room already (as PyByteArray_Resize sees) */
    }
    Py_ssize_t ahead = 2 * size;
    if (ahead > tail_max) {
        ahead = (Py_ssize_t)tail_max;
    }
    if (ahead > size && PyByteArray_Resize(tail, ahead) < 0) {
        return -1;
    }
    return PyByteArray_Resize(tail, size);
}

/* The state of a queue that the compiled append reads and moves, in the object itself: the
 * base of store/queue/consume_queue.py ConsumeQueue (``QueueState``) and of its files
 * (``QueueFileState``). As Python attributes each was an int object of its own: a run read 7
 * of them across 3 cold objects and wrote 2 new ones, ~12 cache misses a run at 256 topics
 * (PyMember_GetOne and PyObject_GetAttr were ~0.06 us a message more than at one topic in perf
 * of the bench's broker). The Python code reads and sets them as before. */
typedef struct {
    PyObject_HEAD PyObject *files; /* list of the queue's files, oldest first */
    PyObject *tail;                /* bytearray of units past file_pos, or None */
    long long write_pos;           /* ConsumeQueue._write_pos */
    long long file_pos;            /* ConsumeQueue._file_pos */
    long long max_physical;        /* ConsumeQueue.max_physical_offset */
} QueueState;

static int QueueState_traverse(QueueState *self, visitproc visit, void *arg) {
    Py_VISIT(self->files);
    Py_VISIT(self->tail);
    return 0;
}

static int QueueState_clear(QueueState *self) {
    Py_CLEAR(self->files);
    Py_CLEAR(self->tail);
    return 0;
}

static void QueueState_dealloc(QueueState *self) {
    PyObject_GC_UnTrack(self);
    QueueState_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef QueueState_members[] = {
    {"files", T_OBJECT_EX, offsetof(QueueState, files), 0, "the queue's files, oldest first"},
    {"_tail", T_OBJECT_EX, offsetof(QueueState, tail), 0, "units in memory past _file_pos"},
    {"_write_pos", T_LONGLONG, offsetof(QueueState, write_pos), 0, "after the last unit"},
    {"_file_pos", T_LONGLONG, offsetof(QueueState, file_pos), 0, "after the units in files"},
    {"max_physical_offset", T_LONGLONG, offsetof(QueueState, max_physical), 0,
     "end of the newest unit's record"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject QueueStateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wharf.store.fast._log_scan.QueueState",
    .tp_basicsize = sizeof(QueueState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "ConsumeQueue's base: the state the compiled append reads and moves.",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)QueueState_traverse,
    .tp_clear = (inquiry)QueueState_clear,
    .tp_dealloc = (destructor)QueueState_dealloc,
    .tp_members = QueueState_members,
};

typedef struct {
    PyObject_HEAD long long start; /* byte offset of its first unit in the whole queue */
    long long size;                /* bytes */
    long long allocated;           /* bytes from the start known allocated */
    long long fd;                  /* the file cache's descriptor, or -1 */
} QueueFileState;

static void QueueFileState_dealloc(PyObject *self) { Py_TYPE(self)->tp_free(self); }

static PyMemberDef QueueFileState_members[] = {
    {"start", T_LONGLONG, offsetof(QueueFileState, start), 0, "offset of its first unit"},
    {"size", T_LONGLONG, offsetof(QueueFileState, size), 0, "bytes"},
    {"allocated", T_LONGLONG, offsetof(QueueFileState, allocated), 0, "bytes allocated"},
    {"fd", T_LONGLONG, offsetof(QueueFileState, fd), 0, "descriptor, or -1"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject QueueFileStateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wharf.store.fast._log_scan.QueueFileState",
    .tp_basicsize = sizeof(QueueFileState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "ConsumeQueueFile's base: the fields the compiled append reads.",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = QueueFileState_dealloc,
    .tp_members = QueueFileState_members,
};

/* A run taken (appended to the tail, or starting a new one): the queue's units now end at
 * ``pos``, its newest record at ``end``, and advanced[key] is its new max offset. 1, or -1 with
 * the error (the queue has moved all the same). */
static int advance(QueueState *q, PyObject *key, long long pos, long long end,
                   PyObject *advanced) {
    q->write_pos = pos;
    if (end > q->max_physical) {
        q->max_physical = end;
    }
    PyObject *top = PyLong_FromLongLong(pos / CQ_STORE_UNIT_SIZE);
    if (top == NULL) {
        return -1;
    }
    int failed = PyDict_SetItem(advanced, key, top);
    Py_DECREF(top);
    return failed < 0 ? -1 : 1;
}

/* A full tail written out, the run starting the next one: ConsumeQueue._write's spill (the
 * full tail goes into the file at _file_pos, a new tail holds the run), taken here when the
 * file is open in the cache (fd >= 0) and the tails' budget allows the run. At 256 topics 1
 * run in ~13 fills its queue's 4 KiB tail; in Python each was ~10 us of calls (append_packed,
 * _write, the cache's fd, _pwrite_all). The queue is dirty already: a tail means units past
 * its flushed position (write_pos = file_pos + tail > flushed). The file keeps its place in
 * the cache's recency order (a queue this busy is used again at once; a file closed meanwhile
 * sends the run to Python, which reopens it). A failed pwrite leaves the run to Python too,
 * which writes the same bytes again and raises the error. */
static int spill_run(QueueState *q, QueueFileState *f, PyObject *key, const char *units,
                     long long n, long long end, long long room, long long used,
                     PyObject *advanced, long long *added) {
    PyObject *tail = q->tail;
    Py_ssize_t tail_len = PyByteArray_GET_SIZE(tail);
    if (f->fd < 0 || tail_len == 0 || used - tail_len + n > room) {
        return 0;
    }
    const char *out = PyByteArray_AS_STRING(tail);
    long long at = q->file_pos - f->start;
    Py_ssize_t done = 0;
    while (done < tail_len) {
        ssize_t wrote = pwrite((int)f->fd, out + done, (size_t)(tail_len - done), at + done);
        if (wrote <= 0) {
            return 0; /* Python's path writes it again and raises */
        }
        done += wrote;
    }
    PyObject *next = PyByteArray_FromStringAndSize(units, (Py_ssize_t)n);
    if (next == NULL) {
        return -1;
    }
    /* A new tail object: a capture in flight holds the old one (ConsumeQueue.tail_written). */
    q->tail = next;
    Py_DECREF(tail);
    q->file_pos = q->write_pos;
    *added = n - tail_len;
    return advance(q, key, q->write_pos + n, end, advanced);
}

/* 1: the run was taken; 0: not the usual run (left); -1: an error. */
static int take_run(PyObject *queue, PyObject *key, const char *units, long long n,
                    long long first, long long end, long long room, long long tail_max,
                    long long used, PyObject *advanced, long long *added) {
    if (!PyObject_TypeCheck(queue, &QueueStateType)) {
        return 0; /* not a ConsumeQueue of this module: the general path */
    }
    QueueState *q = (QueueState *)queue;
    PyObject *tail = q->tail, *files = q->files;
    if (tail == NULL || !PyByteArray_Check(tail)) {
        return 0; /* no tail (None): the general path */
    }
    Py_ssize_t tail_len = PyByteArray_GET_SIZE(tail);
    long long pos = q->write_pos;
    if (first * CQ_STORE_UNIT_SIZE != pos || n >= tail_max) {
        return 0;
    }
    if (files == NULL || !PyList_Check(files) || PyList_GET_SIZE(files) == 0) {
        return 0;
    }
    PyObject *file = PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1); /* borrowed */
    if (!PyObject_TypeCheck(file, &QueueFileStateType)) {
        return 0;
    }
    QueueFileState *f = (QueueFileState *)file;
    if (q->file_pos < f->start || pos + n - f->start > f->allocated) {
        return 0;
    }
    if (tail_len + n >= tail_max) {
        return spill_run(q, f, key, units, n, end, room, used, advanced, added);
    }
    if (used + n > room) {
        return 0;
    }
    if (grow_tail(tail, tail_len + (Py_ssize_t)n, tail_max) < 0) {
        return -1;
    }
    memcpy(PyByteArray_AS_STRING(tail) + tail_len, units, (size_t)n);
    *added = n;
    return advance(q, key, pos + n, end, advanced);
}

static PyObject *append_runs(PyObject *module, PyObject *args) {
    PyObject *queues, *keys, *firsts, *bounds, *ends, *advanced;
    Py_buffer data;
    long long room, tail_max;
    (void)module;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!y*LLO!:append_runs", &PyDict_Type, &queues,
                          &PyList_Type, &keys, &PyList_Type, &firsts, &PyList_Type, &bounds,
                          &PyList_Type, &ends, &data, &room, &tail_max, &PyDict_Type,
                          &advanced)) {
        return NULL;
    }
    PyObject *result = NULL, *rest = NULL, *held = NULL, **found = NULL;
    Py_ssize_t count = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(firsts) != count || PyList_GET_SIZE(ends) != count ||
        PyList_GET_SIZE(bounds) != count + 1) {
        PyErr_SetString(PyExc_ValueError, "one first and end a key, one bound more");
        goto done;
    }
    rest = PyList_New(0);
    held = PySet_New(NULL);
    found = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(PyObject *));
    if (rest == NULL || held == NULL || found == NULL) {
        if (found == NULL) {
            PyErr_NoMemory();
        }
        goto done;
    }
    /* Every run's queue first, asked for from memory, then what each points to: at 256 topics
     * a chunk's ~64 queues are cold, and taken one by one each run waited on its queue, then on
     * its tail and files in turn (append_runs ~0.04 us a message more than at one topic in
     * perf of the bench's broker). The pointers are borrowed: nothing here changes ``queues``
     * or runs Python code. */
    for (Py_ssize_t i = 0; i < count; i++) {
        found[i] = PyDict_GetItemWithError(queues, PyList_GET_ITEM(keys, i));
        if (found[i] == NULL && PyErr_Occurred()) {
            goto done;
        }
        if (found[i] != NULL) {
            __builtin_prefetch(found[i]);
            __builtin_prefetch((const char *)found[i] + 63);
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (found[i] != NULL && PyObject_TypeCheck(found[i], &QueueStateType)) {
            QueueState *q = (QueueState *)found[i];
            if (q->tail != NULL) {
                __builtin_prefetch(q->tail);
            }
            if (q->files != NULL) {
                __builtin_prefetch(q->files);
            }
        }
    }
    long long used = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        int taken = 0;
        int is_held = PySet_GET_SIZE(held) ? PySet_Contains(held, key) : 0;
        if (is_held < 0) {
            goto done;
        }
        if (!is_held) {
            PyObject *queue = found[i]; /* borrowed */
            if (queue != NULL) {
                long long a = PyLong_AsLongLong(PyList_GET_ITEM(bounds, i));
                long long b = PyLong_AsLongLong(PyList_GET_ITEM(bounds, i + 1));
                long long first = PyLong_AsLongLong(PyList_GET_ITEM(firsts, i));
                long long end = PyLong_AsLongLong(PyList_GET_ITEM(ends, i));
                if (PyErr_Occurred()) {
                    goto done;
                }
                if (a < 0 || b < a || b > data.len || (b - a) % CQ_STORE_UNIT_SIZE) {
                    PyErr_SetString(PyExc_ValueError, "a run's units lie outside the data");
                    goto done;
                }
                long long added = 0;
                taken = take_run(queue, key, (const char *)data.buf + a, b - a, first, end, room,
                                 tail_max, used, advanced, &added);
                if (taken < 0) {
                    goto done;
                }
                used += added; /* a spill's is negative: the written tail leaves the budget */
            }
        }
        if (!taken) {
            PyObject *index = PyLong_FromSsize_t(i);
            int failed = index == NULL || PyList_Append(rest, index) < 0 ||
                         PySet_Add(held, key) < 0;
            Py_XDECREF(index);
            if (failed) {
                goto done;
            }
        }
    }
    result = Py_BuildValue("(OL)", rest, used);
done:
    PyMem_Free(found);
    Py_XDECREF(rest);
    Py_XDECREF(held);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(put_index_entries_doc,
             "put_index_entries(mm, slot_num, entries_pos, first_number, begin_timestamp, "
             "hashes, offsets, stamps) -> new_slots");

/* An IndexFile's entries written in log order (the twin of store/index/index_file.py
 * _put_entries_scalar, and of store/fast/index_batch.py's numpy pass): entry i is number
 * first_number + i; its prevIndex is what its hash's slot holds if that is a valid entry
 * number (0 < value < its own), and the slot then holds it. In log order a slot's earlier entry
 * of the same batch is simply what the slot holds, so there is no sort: the numpy pass grouped
 * the batch by slot with a stable argsort, whose keys come in runs of 16 at 256 topics (one
 * batch's ids are a counter), ~130 instructions a message more than at one topic (callgrind,
 * tests/bench/send_instructions.py). hashes, offsets, stamps: int64, one per entry. Returns how
 * many slots became used. */
#define SLOT_AHEAD 8 /* slots asked for this many entries ahead */

static PyObject *put_index_entries(PyObject *module, PyObject *args) {
    Py_buffer mm, hashes, offsets, stamps;
    long long slot_num, entries_pos, first_number, begin_timestamp;
    (void)module;
    if (!PyArg_ParseTuple(args, "w*LLLLy*y*y*:put_index_entries", &mm, &slot_num, &entries_pos,
                          &first_number, &begin_timestamp, &hashes, &offsets, &stamps)) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t count = hashes.len / (Py_ssize_t)sizeof(int64_t);
    if (hashes.len % (Py_ssize_t)sizeof(int64_t) || offsets.len != hashes.len ||
        stamps.len != hashes.len) {
        PyErr_SetString(PyExc_ValueError, "hashes, offsets and stamps: int64, one per entry");
        goto done;
    }
    if (slot_num < 1 || entries_pos < INDEX_HEADER_SIZE + slot_num * INDEX_HASH_SLOT_SIZE ||
        first_number < 0 || entries_pos + (first_number + count) * INDEX_ENTRY_SIZE > mm.len) {
        PyErr_SetString(PyExc_ValueError, "the entries or slots lie outside the index file");
        goto done;
    }
    unsigned char *base = (unsigned char *)mm.buf;
    const int64_t *hash = (const int64_t *)hashes.buf;
    const int64_t *offset = (const int64_t *)offsets.buf;
    const int64_t *stamp = (const int64_t *)stamps.buf;
    long long new_slots = 0;
    /* The slots are random reads in a table of 20 MB (5,000,000 slots): at one topic a chunk's
     * keys are a counter's and fall close together, at 256 topics they do not (this loop was
     * ~0.014 us a message more, perf of the bench's broker). Each is asked for SLOT_AHEAD
     * entries ahead, its number kept in a ring until its entry comes. */
    long long ring[SLOT_AHEAD];
    for (Py_ssize_t i = 0; i < count + SLOT_AHEAD; i++) {
        Py_ssize_t e = i - SLOT_AHEAD; /* the entry written now, if any */
        long long slot = e >= 0 ? ring[e % SLOT_AHEAD] : 0; /* read before i's replaces it */
        if (i < count) {
            long long ahead = hash[i] % slot_num;
            ahead += ahead < 0 ? slot_num : 0; /* Python's modulo: a negative hash too */
            ring[i % SLOT_AHEAD] = ahead;
            __builtin_prefetch(base + INDEX_HEADER_SIZE + ahead * INDEX_HASH_SLOT_SIZE, 1);
        }
        if (e < 0) {
            continue;
        }
        long long number = first_number + e;
        unsigned char *slot_at = base + INDEX_HEADER_SIZE + slot * INDEX_HASH_SLOT_SIZE;
        int32_t prev = (int32_t)be32(slot_at);
        if (prev <= 0 || prev >= number) {
            prev = 0;
            new_slots++;
        }
        long long diff = 0;
        if (begin_timestamp > 0) {
            diff = stamp[e] - begin_timestamp;
            diff = diff < 0 ? 0 : diff / 1000; /* negative: 0 either way (floor or not) */
            if (diff > 0x7FFFFFFF) {
                diff = 0x7FFFFFFF;
            }
        }
        unsigned char *entry = base + entries_pos + number * INDEX_ENTRY_SIZE;
        put_be32(entry + INDEX_OFF_KEY_HASH, (uint32_t)hash[e]);
        put_be64(entry + INDEX_OFF_PHY_OFFSET, (uint64_t)offset[e]);
        put_be32(entry + INDEX_OFF_TIME_DIFF, (uint32_t)diff);
        put_be32(entry + INDEX_OFF_PREV_INDEX, (uint32_t)prev);
        put_be32(slot_at, (uint32_t)number);
    }
    result = PyLong_FromLongLong(new_slots);
done:
    PyBuffer_Release(&mm);
    PyBuffer_Release(&hashes);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&stamps);
    return result;
}

/* choose_runs(units, max_count, max_bytes, log_min, codes) -> (runs, sizes, scanned,
 * removed_first): a raw pull's choice of ConsumeQueue units in runs of adjacent records (the
 * reference: store/read/get_raw.py choose_runs_python, get_message.py's choose_from_units
 * grouped by runs_of).
 * ``units``: CQ_STORE_UNIT_SIZE-byte units (offset q, size i, tags code q, big-endian);
 * ``codes``: the tag hash codes to keep, or None for every unit. ``runs``: (log offset, bytes,
 * first, count) of each run of adjacent chosen records, ``sizes``: every chosen unit's size
 * (int32, native order; a run's records are sizes[first:first + count]). The Python loop cost
 * ~0.6 us a unit at pulls of 100 (py-spy of a consume run, 2026-11-28: 25% of the broker). */
PyDoc_STRVAR(choose_runs_doc, "choose_runs(units, max_count, max_bytes, log_min, codes) -> "
                              "(runs, sizes, scanned, removed_first)");

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* runs.append((start, end - start, first, chosen - first)); -1 with an exception set. */
static int append_run(PyObject *runs, long long start, long long end, Py_ssize_t first,
                      Py_ssize_t chosen) {
    /* end - start in uint64: a crafted unit's end may have wrapped (see choose_runs); the
     * difference is the run's exact length all the same, as the Python twin's. */
    long long length = (long long)((uint64_t)end - (uint64_t)start);
    PyObject *run = Py_BuildValue("(LLnn)", start, length, first, chosen - first);
    int rc = run == NULL ? -1 : PyList_Append(runs, run);
    Py_XDECREF(run);
    return rc;
}

static PyObject *choose_runs(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t max_count, max_bytes;
    long long log_min;
    PyObject *codes_obj;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nnLO:choose_runs", &view, &max_count, &max_bytes, &log_min,
                          &codes_obj)) {
        return NULL;
    }
    PyObject *result = NULL, *runs = NULL, *sizes = NULL, *iter = NULL, *item = NULL;
    int64_t *codes = NULL;
    Py_ssize_t ncodes = 0;
    int by_code = codes_obj != Py_None;
    if (by_code) { /* a sorted C copy: a pull tests every unit against it */
        Py_ssize_t length = PyObject_Length(codes_obj);
        if (length < 0) {
            goto done;
        }
        codes = PyMem_Malloc((size_t)(length ? length : 1) * sizeof(int64_t));
        iter = PyObject_GetIter(codes_obj);
        if (codes == NULL || iter == NULL) {
            if (codes == NULL) {
                PyErr_NoMemory();
            }
            goto done;
        }
        while ((item = PyIter_Next(iter)) != NULL && ncodes < length) {
            long long code = PyLong_AsLongLong(item);
            Py_CLEAR(item);
            if (code == -1 && PyErr_Occurred()) {
                goto done;
            }
            codes[ncodes++] = code;
        }
        Py_CLEAR(item);
        if (PyErr_Occurred()) {
            goto done;
        }
        qsort(codes, (size_t)ncodes, sizeof(int64_t), cmp_i64);
    }
    if (max_count < 1) {
        max_count = 1;
    }
    Py_ssize_t nunits = view.len / CQ_STORE_UNIT_SIZE;
    Py_ssize_t cap = nunits < max_count ? nunits : max_count;
    sizes = PyBytes_FromStringAndSize(NULL, cap * (Py_ssize_t)sizeof(int32_t));
    runs = PyList_New(0);
    if (sizes == NULL || runs == NULL) {
        goto done;
    }
    int32_t *size_of = (int32_t *)PyBytes_AS_STRING(sizes);
    const unsigned char *unit = (const unsigned char *)view.buf;
    Py_ssize_t chosen = 0, scanned = 0, run_first = 0;
    long long total_bytes = 0, run_start = 0, run_end = -1;
    int removed_first = 0;
    for (Py_ssize_t i = 0; i < nunits; i++, unit += CQ_STORE_UNIT_SIZE) {
        int64_t offset = (int64_t)be64(unit + CQ_OFF_COMMIT_LOG_OFFSET);
        int32_t size = (int32_t)be32(unit + CQ_OFF_SIZE);
        if (chosen && (chosen >= max_count || total_bytes + size > max_bytes)) {
            break;
        }
        scanned++;
        if (size == CQ_BLANK_UNIT_SIZE) {
            continue;
        }
        if (by_code) {
            int64_t code = (int64_t)be64(unit + CQ_OFF_TAGS_CODE);
            if (bsearch(&code, codes, (size_t)ncodes, sizeof(int64_t), cmp_i64) == NULL) {
                continue;
            }
        }
        if (offset < log_min) {
            removed_first = removed_first || !chosen;
            continue;
        }
        if (offset != run_end) { /* a new run: close the previous one */
            if (chosen && append_run(runs, run_start, run_end, run_first, chosen) < 0) {
                goto done;
            }
            run_start = offset;
            run_first = chosen;
        }
        /* In uint64: a unit naming an offset near INT64_MAX (a damaged or crafted queue
         * file) made offset + size a signed overflow (UBSan, tests/fuzz "log_scan"). A wrapped
         * end is negative and so never equals a next unit's offset (>= log_min >= 0), as the
         * Python twin's exact end past INT64_MAX never does. */
        run_end = (long long)((uint64_t)offset + (uint64_t)(int64_t)size);
        size_of[chosen++] = size;
        total_bytes += size;
    }
    if (chosen && append_run(runs, run_start, run_end, run_first, chosen) < 0) {
        goto done;
    }
    if (chosen < cap && _PyBytes_Resize(&sizes, chosen * (Py_ssize_t)sizeof(int32_t)) < 0) {
        goto done;
    }
    result = Py_BuildValue("(OOnO)", runs, sizes, scanned, removed_first ? Py_True : Py_False);
done:
    Py_XDECREF(item);
    Py_XDECREF(iter);
    Py_XDECREF(runs);
    Py_XDECREF(sizes);
    PyMem_Free(codes);
    PyBuffer_Release(&view);
    return result;
}

/* check_run(chunk, sizes, first, count) -> body bytes, or -1: whether ``chunk`` holds, back to
 * back, messages of the sizes sizes[first:first + count] (TOTALSIZE equal to its unit's size,
 * MAGICCODE a message's, at least the fixed header), as store/read/get_raw.py
 * check_run_python; the sum of their BODYLENGTHs if so. */
PyDoc_STRVAR(check_run_doc, "check_run(chunk, sizes, first, count) -> body bytes or -1");

static PyObject *check_run(PyObject *module, PyObject *args) {
    Py_buffer chunk, sizes;
    Py_ssize_t first, count;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*y*nn:check_run", &chunk, &sizes, &first, &count)) {
        return NULL;
    }
    long long bodies = -1;
    Py_ssize_t nsizes = sizes.len / (Py_ssize_t)sizeof(int32_t);
    if (first < 0 || count < 0 || first + count > nsizes) {
        PyErr_SetString(PyExc_ValueError, "the run lies outside sizes");
        PyBuffer_Release(&chunk);
        PyBuffer_Release(&sizes);
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)chunk.buf;
    const int32_t *size_of = (const int32_t *)sizes.buf + first;
    Py_ssize_t pos = 0, last = chunk.len - RECORD_FIXED_SIZE;
    long long sum = 0;
    Py_ssize_t i = 0;
    for (; i < count; i++) {
        int32_t size = size_of[i];
        uint32_t magic = pos > last ? 0 : be32(buf + pos + OFF_MAGIC);
        if (pos > last || (int32_t)be32(buf + pos + OFF_TOTAL_SIZE) != size ||
            (magic != MESSAGE_MAGIC_CODE && magic != MESSAGE_MAGIC_CODE_V2) ||
            size < RECORD_FIXED_SIZE) {
            break;
        }
        sum += (int32_t)be32(buf + pos + OFF_BODY_LENGTH);
        pos += size;
    }
    if (i == count) {
        bodies = sum;
    }
    PyBuffer_Release(&chunk);
    PyBuffer_Release(&sizes);
    return PyLong_FromLongLong(bodies);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"gather_tails", gather_tails, METH_VARARGS, gather_tails_doc},
    {"scan_properties", scan_properties, METH_VARARGS, scan_properties_doc},
    {"topic_ids", topic_ids, METH_VARARGS, topic_ids_doc},
    {"append_runs", append_runs, METH_VARARGS, append_runs_doc},
    {"put_index_entries", put_index_entries, METH_VARARGS, put_index_entries_doc},
    {"choose_runs", choose_runs, METH_VARARGS, choose_runs_doc},
    {"check_run", check_run, METH_VARARGS, check_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "store._log_scan",
    "Compiled commit-log record walk for dispatch (see store/fast/_log_scan.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__log_scan(void) {
    if (PyType_Ready(&QueueStateType) < 0 || PyType_Ready(&QueueFileStateType) < 0) {
        return NULL;
    }
    PyObject *module = new_module_with_format(&module_def);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&QueueStateType);
    Py_INCREF(&QueueFileStateType);
    if (PyModule_AddObject(module, "QueueState", (PyObject *)&QueueStateType) < 0 ||
        PyModule_AddObject(module, "QueueFileState", (PyObject *)&QueueFileStateType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
