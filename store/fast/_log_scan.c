/* The dispatch's walk over commit-log records, compiled (store/log/reader.py _scan).
 *
 * scan(buf, pos, limit, max_count, budget, any_before) walks TOTALSIZE from ``pos`` while
 * fewer than ``max_count`` records were taken and an 8-byte header fits below ``limit``; it
 * stops before a record that would take the chunk past ``budget`` bytes (unless it would be
 * the chunk's first record: ``any_before`` says whether earlier segments gave some). It
 * returns (positions, new_pos, status, magic, total): status 0 = stopped, 1 = end-of-segment
 * blank at new_pos, 2 = a bad record header at new_pos (its magic and size, for the error).
 * Same decisions as the Python loop, ~0.35 us per record cheaper (one unpack, three checks and
 * a list append each in Python).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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
        if (magic != MESSAGE_MAGIC_CODE || total <= 0 || pos + (Py_ssize_t)total > limit) {
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
 * PROPERTIES) of the records at ``positions`` (int64, native order) of ``buf``, back to back
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
        if (p < 0 || p + RECORD_HEADER_SIZE > view.len ||
            be32(buf + p + OFF_MAGIC) != MESSAGE_MAGIC_CODE) {
            goto refused;
        }
        int64_t body = (int32_t)be32(buf + p + OFF_BODY_LENGTH);
        int64_t end = p + (int32_t)be32(buf + p + OFF_TOTAL_SIZE);
        int64_t tail = p + RECORD_HEADER_SIZE + body;
        if (body < 0 || end > view.len || tail + 3 > end) {
            goto refused;
        }
        int64_t props = tail + 3 + buf[tail];
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
        props_at[i] = written + 3 + buf[tail];
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

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"gather_tails", gather_tails, METH_VARARGS, gather_tails_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "store._log_scan",
    "Compiled commit-log record walk for dispatch (see store/fast/_log_scan.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__log_scan(void) { return new_module_with_format(&module_def); }
