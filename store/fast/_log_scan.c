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

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "store._log_scan",
    "Compiled commit-log record walk for dispatch (see store/fast/_log_scan.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__log_scan(void) { return new_module_with_format(&module_def); }
