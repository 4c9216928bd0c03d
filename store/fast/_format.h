/* The record layout of store/codec/layout.py, for the compiled accelerators (one copy in C; every
 * module exports these values, and tests/store/test_compiled_format.py checks every #define here
 * against wharf.store.codec.layout, so the two definitions cannot drift apart). */
#ifndef WHARF_FORMAT_H
#define WHARF_FORMAT_H

#include <Python.h>
#include <stdint.h>

#define RECORD_HEADER_SIZE 88
#define BLANK_HEADER_SIZE 8 /* TOTALSIZE + MAGICCODE: the end-of-segment marker */
#define RECORD_FIXED_SIZE (RECORD_HEADER_SIZE + 1 + 2) /* + TOPICLENGTH + PROPERTIESLENGTH */
#define RECORD_FIXED_SIZE_V2 (RECORD_HEADER_SIZE + 2 + 2) /* V2: a two-byte TOPICLENGTH */
#define MESSAGE_MAGIC_CODE 0xDAA320A7u /* V1: one-byte TOPICLENGTH (topics up to 127 bytes) */
#define MESSAGE_MAGIC_CODE_V2 0xDAA320ABu /* V2: two-byte TOPICLENGTH (longer topics) */
#define MAX_TOPIC_LENGTH_V1 127
#define BLANK_MAGIC_CODE 0xCBD43194u
#define MAX_PROPERTIES_LENGTH 32767
#define PROPERTY_SEPARATOR 2
#define SYSFLAG_COMPRESSED 0x1 /* SYSFLAG bit: the body is zlib-compressed */
#define CQ_STORE_UNIT_SIZE 20 /* a ConsumeQueue unit: offset, size, tags code */
#define CQ_OFF_COMMIT_LOG_OFFSET 0
#define CQ_OFF_SIZE 8
#define CQ_OFF_TAGS_CODE 12
#define CQ_BLANK_UNIT_SIZE 0x7FFFFFFF /* the size of RocketMQ's fillPreBlank unit */
/* An IndexFile: header, then slots (the newest entry number of a hash), then entries. */
#define INDEX_HEADER_SIZE 40
#define INDEX_HASH_SLOT_SIZE 4
#define INDEX_ENTRY_SIZE 20
#define INDEX_OFF_KEY_HASH 0
#define INDEX_OFF_PHY_OFFSET 4
#define INDEX_OFF_TIME_DIFF 12
#define INDEX_OFF_PREV_INDEX 16

/* Field offsets in the record header (wharf.store.codec.layout.RECORD_FIELDS: OFF_<name>). */
#define OFF_TOTAL_SIZE 0
#define OFF_MAGIC 4
#define OFF_BODY_CRC 8
#define OFF_QUEUE_ID 12
#define OFF_FLAG 16
#define OFF_QUEUE_OFFSET 20
#define OFF_PHYSICAL_OFFSET 28
#define OFF_SYS_FLAG 36
#define OFF_BORN_TIMESTAMP 40
#define OFF_BORN_HOST 48
#define OFF_STORE_TIMESTAMP 56
#define OFF_STORE_HOST 64
#define OFF_RECONSUME_TIMES 72
#define OFF_PREPARED_TRANSACTION_OFFSET 76
#define OFF_BODY_LENGTH 84

/* The record's TOPICLENGTH size: 1 (V1), 2 (V2), 0 (no message record). Call it where a V1
 * comparison failed: the V1 path keeps its one comparison. */
static inline int topic_length_size(uint32_t magic) {
    return magic == MESSAGE_MAGIC_CODE ? 1 : magic == MESSAGE_MAGIC_CODE_V2 ? 2 : 0;
}

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p) {
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

static inline void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put_be64(unsigned char *p, uint64_t v) {
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* A module's compiled-in layout, for the drift test. */
static inline PyObject *new_module_with_format(PyModuleDef *def) {
    PyObject *module = PyModule_Create(def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "RECORD_HEADER_SIZE", RECORD_HEADER_SIZE) < 0 ||
        PyModule_AddIntConstant(module, "BLANK_HEADER_SIZE", BLANK_HEADER_SIZE) < 0 ||
        PyModule_AddIntConstant(module, "PROPERTY_SEPARATOR", PROPERTY_SEPARATOR) < 0 ||
        PyModule_AddIntConstant(module, "SYSFLAG_COMPRESSED", SYSFLAG_COMPRESSED) < 0 ||
        PyModule_AddIntConstant(module, "RECORD_FIXED_SIZE", RECORD_FIXED_SIZE) < 0 ||
        PyModule_AddIntConstant(module, "RECORD_FIXED_SIZE_V2", RECORD_FIXED_SIZE_V2) < 0 ||
        PyModule_AddIntConstant(module, "MAX_TOPIC_LENGTH_V1", MAX_TOPIC_LENGTH_V1) < 0 ||
        PyModule_AddObject(module, "MESSAGE_MAGIC_CODE_V2",
                           PyLong_FromUnsignedLong(MESSAGE_MAGIC_CODE_V2)) < 0 ||
        PyModule_AddIntConstant(module, "CQ_STORE_UNIT_SIZE", CQ_STORE_UNIT_SIZE) < 0 ||
        PyModule_AddObject(module, "MESSAGE_MAGIC_CODE",
                           PyLong_FromUnsignedLong(MESSAGE_MAGIC_CODE)) < 0 ||
        PyModule_AddObject(module, "BLANK_MAGIC_CODE", PyLong_FromUnsignedLong(BLANK_MAGIC_CODE)) <
            0 ||
        PyModule_AddIntConstant(module, "MAX_PROPERTIES_LENGTH", MAX_PROPERTIES_LENGTH) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    static const struct {
        const char *name;
        long offset;
    } offsets[] = {
        {"OFF_TOTAL_SIZE", OFF_TOTAL_SIZE},
        {"OFF_MAGIC", OFF_MAGIC},
        {"OFF_BODY_CRC", OFF_BODY_CRC},
        {"OFF_QUEUE_ID", OFF_QUEUE_ID},
        {"OFF_FLAG", OFF_FLAG},
        {"OFF_QUEUE_OFFSET", OFF_QUEUE_OFFSET},
        {"OFF_PHYSICAL_OFFSET", OFF_PHYSICAL_OFFSET},
        {"OFF_SYS_FLAG", OFF_SYS_FLAG},
        {"OFF_BORN_TIMESTAMP", OFF_BORN_TIMESTAMP},
        {"OFF_BORN_HOST", OFF_BORN_HOST},
        {"OFF_STORE_TIMESTAMP", OFF_STORE_TIMESTAMP},
        {"OFF_STORE_HOST", OFF_STORE_HOST},
        {"OFF_RECONSUME_TIMES", OFF_RECONSUME_TIMES},
        {"OFF_PREPARED_TRANSACTION_OFFSET", OFF_PREPARED_TRANSACTION_OFFSET},
        {"OFF_BODY_LENGTH", OFF_BODY_LENGTH},
        {"INDEX_HEADER_SIZE", INDEX_HEADER_SIZE},
        {"INDEX_HASH_SLOT_SIZE", INDEX_HASH_SLOT_SIZE},
        {"INDEX_ENTRY_SIZE", INDEX_ENTRY_SIZE},
        {"INDEX_OFF_KEY_HASH", INDEX_OFF_KEY_HASH},
        {"INDEX_OFF_PHY_OFFSET", INDEX_OFF_PHY_OFFSET},
        {"INDEX_OFF_TIME_DIFF", INDEX_OFF_TIME_DIFF},
        {"INDEX_OFF_PREV_INDEX", INDEX_OFF_PREV_INDEX},
        {"CQ_OFF_COMMIT_LOG_OFFSET", CQ_OFF_COMMIT_LOG_OFFSET},
        {"CQ_OFF_SIZE", CQ_OFF_SIZE},
        {"CQ_OFF_TAGS_CODE", CQ_OFF_TAGS_CODE},
        {"CQ_BLANK_UNIT_SIZE", CQ_BLANK_UNIT_SIZE},
    };
    for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
        if (PyModule_AddIntConstant(module, offsets[i].name, offsets[i].offset) < 0) {
            Py_DECREF(module);
            return NULL;
        }
    }
    return module;
}

#endif
