/* The producer's half of send batches, compiled: encode bare bodies as CommitLog records.
 *
 * Same bytes as wharf.store.codec.send_records.encode_record(tail, body, b"UNIQ_KEY\x01<id>\x02", 0, 0, ts)
 * for every body (the layout is store/codec/layout.py's RECORD_HEADER; the broker-owned fields are
 * zeros). In Python that is ~0.9 us per 1 KiB message of the producer's event loop (a struct
 * pack, a CRC call, an f-string and a join); here it is one allocation, one copy and one CRC.
 * The CRC is the caller's function (wharf.store.codec.records' zlib-ng crc32: ~0.12 us per KiB against
 * ~0.44 us for the system zlib this falls back to when given None).
 * Optional: client/record_encoder.py falls back to the Python encoder when this is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "_format.h"

static const char UNIQ_KEY_PREFIX[] = "UNIQ_KEY\x01";
#define UNIQ_KEY_PREFIX_LEN (sizeof(UNIQ_KEY_PREFIX) - 1)

static int body_crc(PyObject *crc_func, PyObject *body, uint32_t *crc_out) {
    if (crc_func != Py_None) {
        PyObject *value = PyObject_CallOneArg(crc_func, body);
        if (value == NULL) {
            return -1;
        }
        unsigned long crc = PyLong_AsUnsignedLongMask(value);
        Py_DECREF(value);
        if (crc == (unsigned long)-1 && PyErr_Occurred()) {
            return -1;
        }
        *crc_out = (uint32_t)crc;
        return 0;
    }
    const unsigned char *bytes = (const unsigned char *)PyBytes_AS_STRING(body);
    Py_ssize_t len = PyBytes_GET_SIZE(body), done = 0;
    uLong crc = crc32(0L, Z_NULL, 0);
    while (done < len) { /* zlib takes uInt lengths */
        uInt chunk = (uInt)((len - done) > 0x40000000 ? 0x40000000 : (len - done));
        crc = crc32(crc, bytes + done, chunk);
        done += chunk;
    }
    *crc_out = (uint32_t)crc;
    return 0;
}

static PyObject *encode_one(const char *tail, Py_ssize_t tail_len, PyObject *body, PyObject *uid,
                            uint64_t born_ts, PyObject *crc_func, Py_ssize_t index) {
    if (!PyBytes_CheckExact(body)) {
        PyErr_Format(PyExc_TypeError, "body #%zd is %.100s, not bytes", index,
                     Py_TYPE(body)->tp_name);
        return NULL;
    }
    Py_ssize_t uid_len;
    const char *uid_chars = PyUnicode_AsUTF8AndSize(uid, &uid_len);
    if (uid_chars == NULL) {
        return NULL;
    }
    Py_ssize_t body_len = PyBytes_GET_SIZE(body);
    Py_ssize_t props_len = (Py_ssize_t)UNIQ_KEY_PREFIX_LEN + uid_len + 1;
    if (props_len > MAX_PROPERTIES_LENGTH) {
        PyErr_Format(PyExc_ValueError, "unique id #%zd is too long (%zd characters)", index,
                     uid_len);
        return NULL;
    }
    Py_ssize_t total = RECORD_FIXED_SIZE + body_len + tail_len - 1 + props_len;
    uint32_t crc;
    if (total > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "record #%zd would be %zd bytes", index, total);
        return NULL;
    }
    if (body_crc(crc_func, body, &crc) < 0) {
        return NULL;
    }
    PyObject *record = PyBytes_FromStringAndSize(NULL, total);
    if (record == NULL) {
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(record);
    const unsigned char *body_bytes = (const unsigned char *)PyBytes_AS_STRING(body);
    memset(out, 0, RECORD_HEADER_SIZE);
    put_be32(out + OFF_TOTAL_SIZE, (uint32_t)total);
    /* The tail's length says the record version (send_records.tail_magic). */
    put_be32(out + OFF_MAGIC,
             tail_len <= 1 + MAX_TOPIC_LENGTH_V1 ? MESSAGE_MAGIC_CODE : MESSAGE_MAGIC_CODE_V2);
    put_be32(out + OFF_BODY_CRC, crc & 0x7FFFFFFFu);
    put_be64(out + OFF_BORN_TIMESTAMP, born_ts);
    put_be32(out + OFF_BODY_LENGTH, (uint32_t)body_len);
    unsigned char *p = out + RECORD_HEADER_SIZE;
    memcpy(p, body_bytes, (size_t)body_len);
    p += body_len;
    memcpy(p, tail, (size_t)tail_len);
    p += tail_len;
    p[0] = (unsigned char)(props_len >> 8);
    p[1] = (unsigned char)props_len;
    p += 2;
    memcpy(p, UNIQ_KEY_PREFIX, UNIQ_KEY_PREFIX_LEN);
    p += UNIQ_KEY_PREFIX_LEN;
    memcpy(p, uid_chars, (size_t)uid_len);
    p += uid_len;
    p[0] = 0x02;
    return record;
}

PyDoc_STRVAR(encode_bare_records_doc,
             "encode_bare_records(tail, bodies, unique_ids, born_timestamp_ms, crc32) -> "
             "list[bytes]\n\n"
             "One record per body: wharf.store.codec.send_records.encode_record with a "
             "UNIQ_KEY property only.\n``tail`` is send_records.topic_tail(topic); bodies are "
             "bytes; "
             "``crc32`` is a CRC-32 function of bytes (None: zlib's, linked in).");

static PyObject *encode_bare_records(PyObject *module, PyObject *args) {
    Py_buffer tail;
    PyObject *bodies_arg, *ids_arg, *crc_func;
    unsigned long long born_ts;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*OOKO:encode_bare_records", &tail, &bodies_arg, &ids_arg,
                          &born_ts, &crc_func)) {
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *bodies = PySequence_Fast(bodies_arg, "bodies must be a sequence");
    PyObject *ids = bodies ? PySequence_Fast(ids_arg, "unique_ids must be a sequence") : NULL;
    if (bodies == NULL || ids == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(bodies);
    if (PySequence_Fast_GET_SIZE(ids) != n) {
        PyErr_SetString(PyExc_ValueError, "bodies and unique_ids differ in length");
        goto done;
    }
    if (tail.len < 2) {
        PyErr_SetString(PyExc_ValueError, "tail must be TOPICLENGTH followed by the topic");
        goto done;
    }
    result = PyList_New(n);
    if (result == NULL) {
        goto done;
    }
    PyObject **body_items = PySequence_Fast_ITEMS(bodies);
    PyObject **id_items = PySequence_Fast_ITEMS(ids);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *record =
            encode_one((const char *)tail.buf, tail.len, body_items[i], id_items[i], born_ts,
                       crc_func, i);
        if (record == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, record);
    }
done:
    Py_XDECREF(bodies);
    Py_XDECREF(ids);
    PyBuffer_Release(&tail);
    return result;
}

/* One batch's results: record i of ``records`` (or item i's [0] when ``items``, with its unique
 * id at [1]) stored at ``offset`` + the sizes of records 0..i-1 and at ``queue_offset`` + i. */
static PyObject *batch_results(PyObject *result_type, PyObject *status, const char *prefix_chars,
                               Py_ssize_t prefix_len, PyObject *ids_arg, PyObject *records_arg,
                               long long offset, PyObject *queue_id, long long queue_offset,
                               PyObject *topic, int items) {
    PyObject *result = NULL;
    PyObject *ids = NULL;
    PyObject *records = PySequence_Fast(records_arg, "records must be a sequence");
    if (records == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records);
    if (!items) {
        ids = PySequence_Fast(ids_arg, "unique_ids must be a sequence");
        if (ids == NULL) {
            goto done;
        }
        if (PySequence_Fast_GET_SIZE(ids) < n) {
            PyErr_SetString(PyExc_ValueError, "fewer unique_ids than records");
            goto done;
        }
    }
    result = PyList_New(n);
    if (result == NULL) {
        goto done;
    }
    char text[64 + 17];
    memcpy(text, prefix_chars, (size_t)prefix_len);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* The items, records and ids were made when the batch was encoded and are cold by its
         * reply (~2 MiB of requests in flight): their lines are asked for a few items ahead,
         * not waited for one by one (each a chain of misses: item, then record and id). */
        if (i + 8 < n) {
            __builtin_prefetch(PySequence_Fast_GET_ITEM(records, i + 8));
        }
        if (i + 4 < n) {
            PyObject *ahead = PySequence_Fast_GET_ITEM(records, i + 4);
            if (!items) {
                __builtin_prefetch(ahead);
                __builtin_prefetch(PySequence_Fast_GET_ITEM(ids, i + 4));
            } else if (PyTuple_Check(ahead) && PyTuple_GET_SIZE(ahead) >= 2) {
                __builtin_prefetch(PyTuple_GET_ITEM(ahead, 0));
                __builtin_prefetch(PyTuple_GET_ITEM(ahead, 1));
            }
        }
        PyObject *record = PySequence_Fast_GET_ITEM(records, i);
        PyObject *uid;
        if (items) {
            if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) < 2) {
                PyErr_Format(PyExc_TypeError, "item #%zd is not a (record, unique id, ...) tuple",
                             i);
                Py_CLEAR(result);
                goto done;
            }
            uid = PyTuple_GET_ITEM(record, 1);
            record = PyTuple_GET_ITEM(record, 0);
        } else {
            uid = PySequence_Fast_GET_ITEM(ids, i);
        }
        Py_ssize_t size = PyObject_Length(record);
        if (size < 0) {
            Py_CLEAR(result);
            goto done;
        }
        snprintf(text + prefix_len, 17, "%016llX", (unsigned long long)offset);
        PyObject *fields = PyTuple_New(6);
        PyObject *offset_id = PyUnicode_FromStringAndSize(text, prefix_len + 16);
        PyObject *q_offset = PyLong_FromLongLong(queue_offset + i);
        if (fields == NULL || offset_id == NULL || q_offset == NULL) {
            Py_XDECREF(fields);
            Py_XDECREF(offset_id);
            Py_XDECREF(q_offset);
            Py_CLEAR(result);
            goto done;
        }
        Py_INCREF(status);
        Py_INCREF(uid);
        Py_INCREF(queue_id);
        Py_INCREF(topic);
        PyTuple_SET_ITEM(fields, 0, status);
        PyTuple_SET_ITEM(fields, 1, uid);
        PyTuple_SET_ITEM(fields, 2, offset_id);
        PyTuple_SET_ITEM(fields, 3, queue_id);
        PyTuple_SET_ITEM(fields, 4, q_offset);
        PyTuple_SET_ITEM(fields, 5, topic);
        /* tuple.__new__(result_type, fields): the NamedTuple without its Python __new__ */
        PyObject *new_args = PyTuple_Pack(1, fields);
        Py_DECREF(fields);
        PyObject *entry = NULL;
        if (new_args != NULL) {
            entry = PyTuple_Type.tp_new((PyTypeObject *)result_type, new_args, NULL);
            Py_DECREF(new_args);
        }
        if (entry == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, entry);
        offset += size;
    }
done:
    Py_XDECREF(ids);
    Py_DECREF(records);
    return result;
}

static int check_result_args(PyObject *result_type, PyObject *prefix, const char **prefix_chars,
                             Py_ssize_t *prefix_len) {
    if (!PyType_IsSubtype((PyTypeObject *)result_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "result_type must be a tuple subclass");
        return -1;
    }
    *prefix_chars = PyUnicode_AsUTF8AndSize(prefix, prefix_len);
    if (*prefix_chars == NULL) {
        return -1;
    }
    if (*prefix_len > 64) {
        PyErr_SetString(PyExc_ValueError, "host_prefix is too long");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(send_results_doc,
             "send_results(result_type, status, unique_ids, records, first_commit_log_offset, "
             "host_prefix, queue_id, first_queue_offset, topic) -> list\n\n"
             "One ``result_type`` tuple per record: (status, unique id, host_prefix + the "
             "record's commit log offset as 16 hex digits, queue_id, its queue offset, topic); "
             "record i starts where records 0..i-1 end.");

static PyObject *send_results(PyObject *module, PyObject *args) {
    PyObject *result_type, *status, *ids_arg, *records_arg, *prefix, *queue_id, *topic;
    long long offset, queue_offset;
    const char *prefix_chars;
    Py_ssize_t prefix_len;
    (void)module;
    if (!PyArg_ParseTuple(args, "O!OOOLUOLU:send_results", &PyType_Type, &result_type, &status,
                          &ids_arg, &records_arg, &offset, &prefix, &queue_id, &queue_offset,
                          &topic)) {
        return NULL;
    }
    if (check_result_args(result_type, prefix, &prefix_chars, &prefix_len) < 0) {
        return NULL;
    }
    return batch_results(result_type, status, prefix_chars, prefix_len, ids_arg, records_arg,
                         offset, queue_id, queue_offset, topic, 0);
}

PyDoc_STRVAR(column_results_doc,
             "column_results(result_type, status, host_prefix, queue_ids, first_queue_offsets, "
             "first_commit_log_offsets, topics, batches) -> list[list]\n\n"
             "send_results of every batch of a reply in columns: batch i is a list of items, "
             "(record, unique id, ...) tuples, stored from first_queue_offsets[i] in "
             "queue_ids[i] and from first_commit_log_offsets[i] in the commit log.");

static PyObject *column_results(PyObject *module, PyObject *args) {
    PyObject *result_type, *status, *prefix, *queue_ids, *firsts, *offsets, *topics, *batches;
    const char *prefix_chars;
    Py_ssize_t prefix_len;
    (void)module;
    if (!PyArg_ParseTuple(args, "O!OUO!O!O!O!O!:column_results", &PyType_Type, &result_type,
                          &status, &prefix, &PyList_Type, &queue_ids, &PyList_Type, &firsts,
                          &PyList_Type, &offsets, &PyList_Type, &topics, &PyList_Type,
                          &batches)) {
        return NULL;
    }
    if (check_result_args(result_type, prefix, &prefix_chars, &prefix_len) < 0) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(batches);
    if (PyList_GET_SIZE(queue_ids) != n || PyList_GET_SIZE(firsts) != n ||
        PyList_GET_SIZE(offsets) != n || PyList_GET_SIZE(topics) != n) {
        PyErr_SetString(PyExc_ValueError, "the columns and batches differ in length");
        return NULL;
    }
    PyObject *result = PyList_New(n);
    if (result == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long first = PyLong_AsLongLong(PyList_GET_ITEM(firsts, i));
        long long offset = PyLong_AsLongLong(PyList_GET_ITEM(offsets, i));
        if ((first == -1 || offset == -1) && PyErr_Occurred()) {
            Py_DECREF(result);
            return NULL;
        }
        PyObject *one = batch_results(result_type, status, prefix_chars, prefix_len, NULL,
                                      PyList_GET_ITEM(batches, i), offset,
                                      PyList_GET_ITEM(queue_ids, i), first,
                                      PyList_GET_ITEM(topics, i), 1);
        if (one == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyList_SET_ITEM(result, i, one);
    }
    return result;
}

PyDoc_STRVAR(columns_payload_doc,
             "columns_payload(batches) -> (packed_sizes, total, records)\n\n"
             "For SendMessageRequest's columns: batch i (a list of (record, ...) tuples) "
             "has its records' total size as a base-128 varint in ``packed_sizes`` (a packed "
             "repeated field's payload), ``total`` is their sum, ``records`` every record in "
             "order.");

static PyObject *columns_payload(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyList_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "batches must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(arg), count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *items = PyList_GET_ITEM(arg, i);
        if (!PyList_Check(items)) {
            PyErr_Format(PyExc_TypeError, "batch #%zd is not a list", i);
            return NULL;
        }
        count += PyList_GET_SIZE(items);
    }
    PyObject *packed = PyBytes_FromStringAndSize(NULL, n * 10); /* a varint: at most 10 bytes */
    PyObject *records = packed ? PyList_New(count) : NULL;
    if (records == NULL) {
        Py_XDECREF(packed);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(packed);
    Py_ssize_t used = 0, at = 0;
    unsigned long long total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *items = PyList_GET_ITEM(arg, i);
        unsigned long long size = 0;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(items); j++) {
            PyObject *item = PyList_GET_ITEM(items, j);
            PyObject *record;
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1 ||
                !PyBytes_Check(record = PyTuple_GET_ITEM(item, 0))) {
                PyErr_Format(PyExc_TypeError, "item #%zd of batch #%zd is not a (bytes, ...) "
                             "tuple", j, i);
                Py_DECREF(packed);
                Py_DECREF(records);
                return NULL;
            }
            size += (unsigned long long)PyBytes_GET_SIZE(record);
            Py_INCREF(record);
            PyList_SET_ITEM(records, at++, record);
        }
        total += size;
        while (size >= 0x80) {
            out[used++] = (unsigned char)((size & 0x7F) | 0x80);
            size >>= 7;
        }
        out[used++] = (unsigned char)size;
    }
    if (_PyBytes_Resize(&packed, used) < 0) {
        Py_DECREF(records);
        return NULL;
    }
    PyObject *result = Py_BuildValue("(NKN)", packed, total, records);
    return result;
}

PyDoc_STRVAR(counter_ids_doc,
             "counter_ids(head, start, count) -> list[str]\n\n"
             "[head + '%04X' % ((start + i) & 0xFFFF) for i in range(count)]: the producer's "
             "unique ids of one millisecond (client.ids).");

static PyObject *counter_ids(PyObject *module, PyObject *args) {
    PyObject *head;
    long long start;
    Py_ssize_t count;
    (void)module;
    if (!PyArg_ParseTuple(args, "ULn:counter_ids", &head, &start, &count)) {
        return NULL;
    }
    Py_ssize_t head_len;
    const char *head_chars = PyUnicode_AsUTF8AndSize(head, &head_len);
    if (head_chars == NULL) {
        return NULL;
    }
    if (head_len > 64 || count < 0) {
        PyErr_SetString(PyExc_ValueError, "head is too long or count is negative");
        return NULL;
    }
    PyObject *result = PyList_New(count);
    if (result == NULL) {
        return NULL;
    }
    char text[64 + 5];
    static const char hex[] = "0123456789ABCDEF";
    memcpy(text, head_chars, (size_t)head_len);
    for (Py_ssize_t i = 0; i < count; i++) {
        /* Unsigned: start + i may pass LLONG_MAX (signed overflow is undefined); the low 16
           bits mod 2^64 are Python's (start + i) & 0xFFFF for any start, negative too. */
        unsigned int counter =
            (unsigned int)(((unsigned long long)start + (unsigned long long)i) & 0xFFFFu);
        text[head_len] = hex[(counter >> 12) & 0xF];
        text[head_len + 1] = hex[(counter >> 8) & 0xF];
        text[head_len + 2] = hex[(counter >> 4) & 0xF];
        text[head_len + 3] = hex[counter & 0xF];
        PyObject *id = PyUnicode_FromStringAndSize(text, head_len + 4);
        if (id == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyList_SET_ITEM(result, i, id);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"counter_ids", counter_ids, METH_VARARGS, counter_ids_doc},
    {"encode_bare_records", encode_bare_records, METH_VARARGS, encode_bare_records_doc},
    {"send_results", send_results, METH_VARARGS, send_results_doc},
    {"column_results", column_results, METH_VARARGS, column_results_doc},
    {"columns_payload", columns_payload, METH_O, columns_payload_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "store._record_encoder",
    "Compiled producer-side record encoder (see store/fast/_record_encoder.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_encoder(void) { return new_module_with_format(&module_def); }
