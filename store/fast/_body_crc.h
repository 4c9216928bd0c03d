/* A stored record's BODYCRC: CRC-32 of the body & 0x7FFFFFFF (wharf.store.codec.records'
 * layout). ``crc_func`` is the caller's CRC-32 (zlib-ng's, 3x zlib's: store/codec passes it in)
 * called on a memoryview of the body; None: zlib's crc32 here. Shared by the broker's
 * send-batch check (_record_check.c) and the Kafka converter (_kafka_convert.c);
 * the SDK's encoder (_record_encoder.c) calls ``crc_func`` on the body's bytes object itself,
 * which saves it a memoryview per record. */
#ifndef WHARF_BODY_CRC_H
#define WHARF_BODY_CRC_H

#include <Python.h>
#include <stdint.h>
#include <zlib.h>

/* 0 with *out set, -1 with an exception set. */
static int wharf_body_crc(PyObject *crc_func, const unsigned char *body, Py_ssize_t len,
                          uint32_t *out) {
    if (crc_func != Py_None) {
        PyObject *view = PyMemoryView_FromMemory((char *)body, len, PyBUF_READ);
        if (view == NULL) {
            return -1;
        }
        PyObject *value = PyObject_CallOneArg(crc_func, view);
        Py_DECREF(view);
        if (value == NULL) {
            return -1;
        }
        unsigned long crc = PyLong_AsUnsignedLongMask(value);
        Py_DECREF(value);
        if (crc == (unsigned long)-1 && PyErr_Occurred()) {
            return -1;
        }
        *out = (uint32_t)crc & 0x7FFFFFFFu;
        return 0;
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    Py_ssize_t done = 0;
    while (done < len) { /* zlib takes uInt lengths */
        uInt chunk = (uInt)((len - done) > 0x40000000 ? 0x40000000 : (len - done));
        crc = crc32(crc, body + done, chunk);
        done += chunk;
    }
    *out = (uint32_t)crc & 0x7FFFFFFFu;
    return 0;
}

#endif
