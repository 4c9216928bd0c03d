/* The broker's half of send batches, compiled: check a batch of producer-encoded records and
 * patch the broker-owned fields (store/record_check.py holds the rules, the error texts and the
 * numpy fallback; this module follows it check for check).
 *
 * Why: both run on the event loop for every send. The numpy version does its columns in a
 * fixed ~60 us per batch, but still walks TOTALSIZE and calls the CRC per record from Python
 * (~0.7 us per record); here the walk is a C loop and the CRC is the caller's function (zlib-ng
 * in wharf.store.codec.records) called on a memoryview of the body.
 *
 * check(data, tail, max_message_size, allowed_sys_flags, crc32) returns the record starts as
 * bytes (native int64), or (record index, check code, detail) for the first bad record. The
 * checks run in the same groups and order as the Python version, so a batch with several bad
 * records is reported identically: framing of every record first, then the header checks of
 * every record, then topic / properties, then the body CRCs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_body_crc.h"
#include "_format.h"

/* Check codes: store/record_check.py maps them to its error texts. */
enum {
    BAD_SHORT_TAIL = 1,   /* detail: bytes left */
    BAD_FRAMING = 2,      /* detail: TOTALSIZE */
    BAD_MAGIC = 3,
    BAD_BODY_LENGTH = 4,
    BAD_TOO_SMALL = 5,
    BAD_SYS_FLAG = 6,
    BAD_TX_FIELDS = 7,
    BAD_TOPIC = 8,
    BAD_PROPERTIES_LENGTH = 9,
    BAD_SEPARATOR = 10,
    BAD_CRC = 11,
};

static PyObject *bad(Py_ssize_t index, int code, long long detail) {
    return Py_BuildValue("(niL)", index, code, detail);
}

/* Record starts, grown as a batch is walked (``check`` and ``check_many`` share one). */
typedef struct {
    int64_t *at;
    Py_ssize_t count, capacity;
} Starts;

static int starts_push(Starts *s, int64_t value) {
    if (s->count == s->capacity) {
        Py_ssize_t capacity = s->capacity ? s->capacity * 2 : 256;
        int64_t *grown = PyMem_Realloc(s->at, (size_t)capacity * sizeof(int64_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->at = grown;
        s->capacity = capacity;
    }
    s->at[s->count++] = value;
    return 0;
}

/* Check the batch of ``size`` bytes at ``buf`` (``base`` bytes into the caller's data) for the
 * topic ``tail``: its record starts (+ base) are pushed onto ``out``. Returns 0 when it is
 * good, -1 with an exception set, or 1 with *bad_result set to (index, code, detail) of its
 * first bad record (``out`` then holds some of its starts: the caller drops the batch). */
static int check_batch(const unsigned char *buf, Py_ssize_t size, const unsigned char *topic,
                       Py_ssize_t tail_len, long long max_message_size,
                       unsigned int allowed_sys_flags, PyObject *crc_func, int64_t base,
                       Starts *out, PyObject **bad_result) {
    Py_ssize_t first = out->count, count = 0;
    /* The topic's record version: a tail over 1 + 127 bytes has a two-byte TOPICLENGTH (V2). */
    uint32_t magic = tail_len <= 1 + MAX_TOPIC_LENGTH_V1 ? MESSAGE_MAGIC_CODE : MESSAGE_MAGIC_CODE_V2;

    /* An empty batch is a bad one (0 bytes left), as check_records refuses empty records:
     * check_many accepted a batch of size 0 with no record, where the per-batch path refuses
     * it, and went on to ``out->at + first`` with ``out->at`` NULL (no start pushed yet):
     * NULL + 0 is undefined behaviour (UBSan, found by tests/fuzz with batch_sizes [0, n]). */
    if (size <= 0) {
        *bad_result = bad(0, BAD_SHORT_TAIL, 0);
        return *bad_result == NULL ? -1 : 1;
    }

    /* 1. framing: every record's TOTALSIZE in turn */
    Py_ssize_t pos = 0;
    while (pos < size) {
        if (size - pos < RECORD_FIXED_SIZE) {
            *bad_result = bad(count, BAD_SHORT_TAIL, (long long)(size - pos));
            return *bad_result == NULL ? -1 : 1;
        }
        int32_t total = (int32_t)be32(buf + pos + OFF_TOTAL_SIZE);
        if (total < RECORD_FIXED_SIZE || pos + (Py_ssize_t)total > size) {
            *bad_result = bad(count, BAD_FRAMING, (long long)total);
            return *bad_result == NULL ? -1 : 1;
        }
        if (starts_push(out, pos) < 0) {
            return -1;
        }
        count++;
        pos += total;
    }
    const int64_t *starts = out->at + first;

    /* 2. headers */
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *h = buf + starts[i];
        Py_ssize_t end = i + 1 < count ? (Py_ssize_t)starts[i + 1] : size;
        int64_t body_len = (int32_t)be32(h + OFF_BODY_LENGTH);
        int64_t props_start = starts[i] + RECORD_HEADER_SIZE + body_len + tail_len + 2;
        int code = 0;
        if (be32(h + OFF_MAGIC) != magic) {
            code = BAD_MAGIC;
        } else if (body_len <= 0 || body_len > max_message_size) {
            code = BAD_BODY_LENGTH;
        } else if (props_start > end) {
            code = BAD_TOO_SMALL;
        } else if ((be32(h + OFF_SYS_FLAG) & ~allowed_sys_flags) != 0) {
            code = BAD_SYS_FLAG;
        } else if (be32(h + OFF_RECONSUME_TIMES) != 0 || be64(h + OFF_PREPARED_TRANSACTION_OFFSET) != 0) {
            code = BAD_TX_FIELDS;
        }
        if (code) {
            *bad_result = bad(i, code, 0);
            return *bad_result == NULL ? -1 : 1;
        }
    }

    /* 3. topic and properties (lengths add up now) */
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t end = i + 1 < count ? (Py_ssize_t)starts[i + 1] : size;
        Py_ssize_t body_end =
            (Py_ssize_t)starts[i] + RECORD_HEADER_SIZE + (int32_t)be32(buf + starts[i] + OFF_BODY_LENGTH);
        const unsigned char *t = buf + body_end;
        Py_ssize_t props_len = ((Py_ssize_t)t[tail_len] << 8) | t[tail_len + 1];
        int code = 0;
        if (memcmp(t, topic, (size_t)tail_len) != 0) {
            code = BAD_TOPIC;
        } else if (body_end + tail_len + 2 + props_len != end || props_len > MAX_PROPERTIES_LENGTH) {
            code = BAD_PROPERTIES_LENGTH;
        } else if (props_len > 0 && buf[end - 1] != PROPERTY_SEPARATOR) {
            code = BAD_SEPARATOR;
        }
        if (code) {
            *bad_result = bad(i, code, 0);
            return *bad_result == NULL ? -1 : 1;
        }
    }

    /* 4. body CRCs */
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *h = buf + starts[i];
        uint32_t crc;
        if (wharf_body_crc(crc_func, h + RECORD_HEADER_SIZE, (int32_t)be32(h + OFF_BODY_LENGTH),
                           &crc) < 0) {
            return -1;
        }
        if ((int32_t)crc != (int32_t)be32(h + OFF_BODY_CRC)) {
            *bad_result = bad(i, BAD_CRC, 0);
            return *bad_result == NULL ? -1 : 1;
        }
    }
    for (Py_ssize_t i = first; i < out->count; i++) {
        out->at[i] += base;
    }
    return 0;
}

PyDoc_STRVAR(check_doc,
             "check(data, tail, max_message_size, allowed_sys_flags, crc32)\n\n"
             "Record starts as bytes of native int64, or (index, code, detail) for the first "
             "bad record (see store/fast/record_check.py).");

static PyObject *check(PyObject *module, PyObject *args) {
    Py_buffer data, tail;
    long long max_message_size;
    unsigned int allowed_sys_flags;
    PyObject *crc_func;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*y*LIO:check", &data, &tail, &max_message_size,
                          &allowed_sys_flags, &crc_func)) {
        return NULL;
    }
    PyObject *result = NULL;
    Starts starts = {NULL, 0, 0};
    int rc = check_batch((const unsigned char *)data.buf, data.len,
                         (const unsigned char *)tail.buf, tail.len, max_message_size,
                         allowed_sys_flags, crc_func, 0, &starts, &result);
    if (rc == 0) {
        result = PyBytes_FromStringAndSize((const char *)starts.at,
                                           starts.count * (Py_ssize_t)sizeof(int64_t));
    }
    PyMem_Free(starts.at);
    PyBuffer_Release(&data);
    PyBuffer_Release(&tail);
    return result;
}

/* A list of ints as a PyMem array of int64 (NULL with an error set); ``what`` names it. The
 * per-batch columns come as lists: array("q", list) parsed each item by a format string, ~90
 * instructions an item, four columns a request (~50 instructions a message at 256 topics,
 * callgrind, tests/bench/send_instructions.py). */
static int64_t *int64s_of(PyObject *list, const char *what) {
    if (!PyList_Check(list)) {
        PyErr_Format(PyExc_TypeError, "%s: a list of ints", what);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    int64_t *out = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsLongLong(PyList_GET_ITEM(list, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            PyMem_Free(out);
            return NULL;
        }
    }
    return out;
}

PyDoc_STRVAR(check_many_doc,
             "check_many(data, sizes, tails, max_message_size, allowed_sys_flags, crc32)\n\n"
             "``check`` of several batches laid out one after another in ``data``: batch i is "
             "``sizes[i]`` bytes (a list of ints) for topic tail ``tails[i]``. (starts, "
             "counts): every record's start in ``data`` (bytes of native int64) and each "
             "batch's record count (a list); or (batch, index, code, detail) for the first "
             "bad record of the first bad batch.");

/* One call for a request's batches: ``check`` per batch cost ~0.7 us of call and argument
 * handling each, and the caller's joins of the starts more (32 topics' batches a request,
 * issue 33). */
static PyObject *check_many(PyObject *module, PyObject *args) {
    Py_buffer data;
    PyObject *sizes_list, *tails, *crc_func;
    long long max_message_size;
    unsigned int allowed_sys_flags;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*O!O!LIO:check_many", &data, &PyList_Type, &sizes_list,
                          &PyList_Type, &tails, &max_message_size, &allowed_sys_flags,
                          &crc_func)) {
        return NULL;
    }
    PyObject *result = NULL, *counts = NULL, *starts_bytes = NULL;
    Starts starts = {NULL, 0, 0};
    Py_ssize_t batches = PyList_GET_SIZE(sizes_list);
    int64_t *size = int64s_of(sizes_list, "sizes");
    if (size == NULL) {
        goto done;
    }
    if (PyList_GET_SIZE(tails) != batches) {
        PyErr_SetString(PyExc_ValueError, "one size and one tail a batch");
        goto done;
    }
    counts = PyList_New(batches);
    if (counts == NULL) {
        goto done;
    }
    int64_t base = 0;
    for (Py_ssize_t b = 0; b < batches; b++) {
        PyObject *tail = PyList_GET_ITEM(tails, b);
        if (!PyBytes_Check(tail)) {
            PyErr_SetString(PyExc_TypeError, "tails are bytes");
            goto done;
        }
        if (size[b] < 0 || base + size[b] > data.len) {
            PyErr_SetString(PyExc_ValueError, "the batch sizes exceed the data");
            goto done;
        }
        Py_ssize_t before = starts.count;
        PyObject *found = NULL;
        /* An empty buffer's data.buf may be NULL, and NULL + 0 is undefined: no offset for
         * an empty batch (which check_batch refuses before reading). */
        const unsigned char *at = size[b] ? (const unsigned char *)data.buf + base : NULL;
        int rc = check_batch(at, (Py_ssize_t)size[b],
                             (const unsigned char *)PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail),
                             max_message_size, allowed_sys_flags, crc_func, base, &starts, &found);
        if (rc < 0) {
            goto done;
        }
        if (rc > 0) {
            result = Py_BuildValue("(nO)", b, found);
            Py_DECREF(found);
            goto done;
        }
        PyObject *count = PyLong_FromSsize_t(starts.count - before);
        if (count == NULL) {
            goto done;
        }
        PyList_SET_ITEM(counts, b, count);
        base += size[b];
    }
    if (base != data.len) {
        PyErr_SetString(PyExc_ValueError, "the batch sizes do not add up to the data");
        goto done;
    }
    starts_bytes = PyBytes_FromStringAndSize((const char *)starts.at,
                                             starts.count * (Py_ssize_t)sizeof(int64_t));
    if (starts_bytes != NULL) {
        result = PyTuple_Pack(2, starts_bytes, counts);
    }
done:
    Py_XDECREF(starts_bytes);
    Py_XDECREF(counts);
    PyMem_Free(starts.at);
    PyMem_Free(size);
    PyBuffer_Release(&data);
    return result;
}

/* The broker-owned fields of one record header at ``h`` (``patch`` and ``patch_many``);
 * ``born_host`` NULL keeps the record's own (records the store encoded from messages, whose
 * born hosts are the messages'). */
static inline void patch_header(unsigned char *h, uint32_t queue_id, int64_t queue_offset,
                                int64_t physical_offset, const void *born_host,
                                int64_t store_timestamp, const void *store_host) {
    put_be32(h + OFF_QUEUE_ID, queue_id);
    put_be64(h + OFF_QUEUE_OFFSET, (uint64_t)queue_offset);
    put_be64(h + OFF_PHYSICAL_OFFSET, (uint64_t)physical_offset);
    if (born_host != NULL) {
        memcpy(h + OFF_BORN_HOST, born_host, 8);
    }
    put_be64(h + OFF_STORE_TIMESTAMP, (uint64_t)store_timestamp);
    memcpy(h + OFF_STORE_HOST, store_host, 8);
}

/* 0 when every start leaves a whole header inside ``len`` bytes; else -1 with ValueError. */
static int check_starts(const int64_t *at, Py_ssize_t count, Py_ssize_t len) {
    for (Py_ssize_t i = 0; i < count; i++) {
        if (at[i] < 0 || at[i] + RECORD_HEADER_SIZE > len) {
            PyErr_Format(PyExc_ValueError, "record start %lld is outside the buffer",
                         (long long)at[i]);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(patch_doc,
             "patch(buf, starts, queue_id, first_queue_offset, start_offset, born_host, "
             "store_timestamp, store_host)\n\n"
             "Write the broker-owned header fields of checked records in ``buf`` (writable); "
             "``starts`` is a buffer of native int64 record starts; an empty ``born_host`` keeps "
             "each record's own.");

static PyObject *patch(PyObject *module, PyObject *args) {
    Py_buffer buf, starts, born_host, store_host;
    int queue_id;
    long long first_queue_offset, start_offset, store_timestamp;
    (void)module;
    if (!PyArg_ParseTuple(args, "w*y*iLLy*Ly*:patch", &buf, &starts, &queue_id,
                          &first_queue_offset, &start_offset, &born_host, &store_timestamp,
                          &store_host)) {
        return NULL;
    }
    PyObject *result = NULL;
    if ((born_host.len != 8 && born_host.len != 0) || store_host.len != 8) {
        PyErr_SetString(PyExc_ValueError,
                        "born_host is 8 bytes (or empty: each record's own), store_host 8");
        goto done;
    }
    const void *born = born_host.len ? born_host.buf : NULL;
    if (starts.len % (Py_ssize_t)sizeof(int64_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "starts must be int64 values");
        goto done;
    }
    Py_ssize_t count = starts.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *at = (const int64_t *)starts.buf;
    unsigned char *out = (unsigned char *)buf.buf;
    if (check_starts(at, count, buf.len) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        patch_header(out + at[i], (uint32_t)queue_id, first_queue_offset + i,
                     at[i] + start_offset, born, store_timestamp, store_host.buf);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&born_host);
    PyBuffer_Release(&store_host);
    return result;
}

PyDoc_STRVAR(patch_many_doc,
             "patch_many(buf, starts, counts, queue_ids, first_queue_offsets, start_offset, "
             "born_host, store_timestamp, store_host)\n\n"
             "``patch`` of several batches laid out one after another in ``buf``: batch i is the "
             "next ``counts[i]`` records of ``starts`` (a buffer of native int64), for queue "
             "``queue_ids[i]`` from offset ``first_queue_offsets[i]`` (lists of ints).");

/* One call for a request's batches: a request of 32 topics' batches called ``patch`` (and built
 * its argument slices) 32 times, ~3 us each in Python around ~0.1 us of work (issue 33). */
static PyObject *patch_many(PyObject *module, PyObject *args) {
    Py_buffer buf, starts, born_host, store_host;
    PyObject *counts_list, *queue_list, *first_list;
    long long start_offset, store_timestamp;
    (void)module;
    if (!PyArg_ParseTuple(args, "w*y*O!O!O!Ly*Ly*:patch_many", &buf, &starts, &PyList_Type,
                          &counts_list, &PyList_Type, &queue_list, &PyList_Type, &first_list,
                          &start_offset, &born_host, &store_timestamp, &store_host)) {
        return NULL;
    }
    PyObject *result = NULL;
    int64_t *count = NULL, *queue = NULL, *first = NULL;
    const Py_ssize_t word = (Py_ssize_t)sizeof(int64_t);
    if ((born_host.len != 8 && born_host.len != 0) || store_host.len != 8) {
        PyErr_SetString(PyExc_ValueError,
                        "born_host is 8 bytes (or empty: each record's own), store_host 8");
        goto done;
    }
    const void *born = born_host.len ? born_host.buf : NULL;
    Py_ssize_t batches = PyList_GET_SIZE(counts_list);
    if (starts.len % word || PyList_GET_SIZE(queue_list) != batches ||
        PyList_GET_SIZE(first_list) != batches) {
        PyErr_SetString(PyExc_ValueError,
                        "starts must be int64 values, one count, queue id and offset per batch");
        goto done;
    }
    count = int64s_of(counts_list, "counts");
    queue = count ? int64s_of(queue_list, "queue_ids") : NULL;
    first = queue ? int64s_of(first_list, "first_queue_offsets") : NULL;
    if (first == NULL) {
        goto done;
    }
    Py_ssize_t records = starts.len / word;
    const int64_t *at = (const int64_t *)starts.buf;
    Py_ssize_t total = 0;
    for (Py_ssize_t b = 0; b < batches; b++) {
        if (count[b] < 0) {
            PyErr_SetString(PyExc_ValueError, "a batch count is negative");
            goto done;
        }
        total += (Py_ssize_t)count[b];
    }
    if (total != records) {
        PyErr_Format(PyExc_ValueError, "the batches count %zd records, starts holds %zd", total,
                     records);
        goto done;
    }
    if (check_starts(at, records, buf.len) < 0) {
        goto done;
    }
    unsigned char *out = (unsigned char *)buf.buf;
    Py_ssize_t i = 0;
    for (Py_ssize_t b = 0; b < batches; b++) {
        for (int64_t k = 0; k < count[b]; k++, i++) {
            patch_header(out + at[i], (uint32_t)queue[b], first[b] + k, at[i] + start_offset,
                         born, store_timestamp, store_host.buf);
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(count);
    PyMem_Free(queue);
    PyMem_Free(first);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&born_host);
    PyBuffer_Release(&store_host);
    return result;
}

static PyMethodDef methods[] = {
    {"check", check, METH_VARARGS, check_doc},
    {"check_many", check_many, METH_VARARGS, check_many_doc},
    {"patch", patch, METH_VARARGS, patch_doc},
    {"patch_many", patch_many, METH_VARARGS, patch_many_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "store._record_check",
    "Compiled send-batch check and patch (see store/fast/_record_check.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_check(void) { return new_module_with_format(&module_def); }
