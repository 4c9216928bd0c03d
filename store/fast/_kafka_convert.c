/* Kafka record batches v2 <-> Wharf's stored records, compiled: one call per batch each way.
 *
 * The reference is Python: the Kafka front end's wire codec of record batches
 * (wharf.broker.frontends.kafka.records: _decode_records, encode_records) and the store codec's
 * Kafka mapping (wharf.store.codec.kafka_records: record_body_properties, to_record_fields, the
 * mapping of broker/frontends/kafka/README.md "Mapping"). It lives with the store's other twins
 * (it includes _format.h and _body_crc.h, the store's record layout and body CRC).
 *
 * In Python the per-record work was most of the Kafka front end's broker CPU at 1 KiB records
 * (cProfile of tests/bench/kafka.py's phases, 50,000 records: Produce ~45 us a record under the
 * profiler, of which decode + convert + encode_record ~43; Fetch ~85, of which the store's
 * StoredMessage decode ~28 and to_record_fields + encode_records ~45).
 *
 * Both functions do the COMMON case only and answer None for anything else; the caller then
 * runs the Python path, which gives the result or the exact error. So the compiled path never
 * has to reproduce an error message, and it is right by construction when it answers: it
 * answers only where it can follow the Python mapping byte for byte (differential tests:
 * tests/store/test_kafka_convert_fast.py).
 *
 * - produce_records: a v2 batch's (uncompressed) records section -> the send-batch form of
 *   wharf.store.codec.send_records (one CommitLog record per Kafka record, properties per
 *   kafka_records.record_body_properties). None for: anything that does not decode, headers
 *   that are not all "plain" (they go into __KAFKA_HEADERS as JSON), more than MAX_HEADERS
 *   headers, a body over max_body, properties over MAX_PROPERTIES_LENGTH, a timestamp that
 *   overflows.
 * - fetch_batch: stored records (the store's raw read) -> one uncompressed v2 batch, CRC-32C
 *   included (the crc32c wheel's function, passed in). A body with the COMPRESSED sysflag is
 *   inflated by the ``inflate`` callable passed in (wharf.store.codec.bodies.inflate, the one
 *   body decoder the Python path uses too), that record only. None for: __KAFKA_HEADERS
 *   (JSON), a __KAFKA_KEY that is not canonical base64, properties that are not UTF-8 or repeat
 *   a name, more than MAX_PAIRS properties, a record that does not parse, an ``inflate`` that
 *   raises or answers something other than bytes.
 *
 * Optional, as store/fast's other modules: wharf.store.fast.kafka_convert loads it through
 * wharf.store.fast.load (None when not built or WHARF_NO_SPEEDUPS is set) and the Kafka front
 * end's handlers keep the Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_body_crc.h"
#include "_format.h"

#define MAX_PAIRS 256 /* properties of one stored record the fetch path handles */
/* Headers of one record the produce path handles: its duplicate-name check compares each
 * header with those before it (quadratic), so a record of 100,000 tiny headers (~600 KB)
 * would hold the loop for seconds; more go to the Python path (a set, linear). */
#define MAX_HEADERS 64

/* ---- the system property names (wharf.store.codec.properties.SYSTEM_PROPERTY_NAMES) ---- */

static char **sys_names = NULL;
static Py_ssize_t *sys_lens = NULL;
static Py_ssize_t sys_count = 0;

static int is_system(const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < sys_count; i++) {
        if (sys_lens[i] == n && memcmp(sys_names[i], s, (size_t)n) == 0) {
            return 1;
        }
    }
    return 0;
}

static int is_kafka_name(const unsigned char *s, Py_ssize_t n) {
    return n >= 8 && memcmp(s, "__KAFKA_", 8) == 0;
}

static int name_is(const unsigned char *s, Py_ssize_t n, const char *lit) {
    size_t len = strlen(lit);
    return (size_t)n == len && memcmp(s, lit, len) == 0;
}

/* ---- UTF-8, as Python's strict decoder ---- */

typedef struct {
    int all_space; /* every code point is whitespace (str.strip() leaves nothing); 1 if empty */
    int has_sep;   /* \x01 or \x02 */
    int has_space; /* ' ' */
} TextInfo;

/* 1 when s[0:n] is valid UTF-8 (info filled), else 0. */
static int utf8_scan(const unsigned char *s, Py_ssize_t n, TextInfo *info) {
    int all_space = 1, has_sep = 0, has_space = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        Py_UCS4 cp;
        if (c < 0x80) {
            if (c == 1 || c == 2) {
                has_sep = 1;
            } else if (c == ' ') {
                has_space = 1;
            }
            if (all_space && !Py_UNICODE_ISSPACE(c)) {
                all_space = 0;
            }
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) {
                return 0;
            }
            cp = ((Py_UCS4)(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) {
                return 0;
            }
            unsigned char c1 = s[i + 1], c2 = s[i + 2];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80) {
                return 0;
            }
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F)) {
                return 0; /* overlong, surrogate */
            }
            cp = ((Py_UCS4)(c & 0x0F) << 12) | ((Py_UCS4)(c1 & 0x3F) << 6) | (c2 & 0x3F);
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) {
                return 0;
            }
            unsigned char c1 = s[i + 1], c2 = s[i + 2], c3 = s[i + 3];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80 || (c3 & 0xC0) != 0x80) {
                return 0;
            }
            if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F)) {
                return 0; /* overlong, beyond U+10FFFF */
            }
            cp = ((Py_UCS4)(c & 0x07) << 18) | ((Py_UCS4)(c1 & 0x3F) << 12) |
                 ((Py_UCS4)(c2 & 0x3F) << 6) | (c3 & 0x3F);
            i += 4;
        } else {
            return 0;
        }
        if (all_space && !Py_UNICODE_ISSPACE(cp)) {
            all_space = 0;
        }
    }
    info->all_space = all_space;
    info->has_sep = has_sep;
    info->has_space = has_space;
    return 1;
}

/* ---- varints (zig-zag), as records._vint: at most 10 bytes ---- */

/* The position after the varint at b[pos], its value in *out; -1 past ``end`` or malformed,
 * or when the value needs more than 64 bits (Python would carry it on; we take its path). */
static inline Py_ssize_t read_varint(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end,
                                     int64_t *out) {
    uint64_t r = 0;
    int shift = 0;
    for (;;) {
        if (pos >= end) {
            return -1;
        }
        unsigned char c = b[pos++];
        if (shift == 63 && c > 1) {
            return -1;
        }
        r |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) {
            break;
        }
        shift += 7;
    }
    *out = (int64_t)(r >> 1) ^ -(int64_t)(r & 1);
    return pos;
}

static inline Py_ssize_t varint_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    Py_ssize_t n = 1;
    while (z > 0x7F) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline unsigned char *put_varint(unsigned char *p, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z > 0x7F) {
        *p++ = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    return p;
}

/* ---- base64 (standard alphabet, padded), as base64.b64encode / a canonical b64decode ---- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static inline Py_ssize_t b64_size(Py_ssize_t n) { return 4 * ((n + 2) / 3); }

static unsigned char *put_b64(unsigned char *p, const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8) | s[i + 2];
        *p++ = (unsigned char)B64[v >> 18];
        *p++ = (unsigned char)B64[(v >> 12) & 63];
        *p++ = (unsigned char)B64[(v >> 6) & 63];
        *p++ = (unsigned char)B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        *p++ = (unsigned char)B64[v >> 18];
        *p++ = (unsigned char)B64[(v >> 12) & 63];
        *p++ = '=';
        *p++ = '=';
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8);
        *p++ = (unsigned char)B64[v >> 18];
        *p++ = (unsigned char)B64[(v >> 12) & 63];
        *p++ = (unsigned char)B64[(v >> 6) & 63];
        *p++ = '=';
    }
    return p;
}

static inline int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* The decoded size of canonical base64 s[0:n] (what b64encode makes: padded, no other
 * characters, zero pad bits), or -1 for anything else (b64decode's lenient cases: ours not). */
static Py_ssize_t b64_decoded_size(const unsigned char *s, Py_ssize_t n) {
    if (n % 4) {
        return -1;
    }
    Py_ssize_t pad = 0;
    if (n && s[n - 1] == '=') {
        pad = (n >= 2 && s[n - 2] == '=') ? 2 : 1;
    }
    for (Py_ssize_t i = 0; i < n - pad; i++) {
        if (b64_value(s[i]) < 0) {
            return -1;
        }
    }
    if (pad == 2 && (b64_value(s[n - 3]) & 0x0F)) {
        return -1;
    }
    if (pad == 1 && (b64_value(s[n - 2]) & 0x03)) {
        return -1;
    }
    return n / 4 * 3 - pad;
}

static unsigned char *put_b64_decoded(unsigned char *p, const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i += 4) {
        int a = b64_value(s[i]), b = b64_value(s[i + 1]);
        *p++ = (unsigned char)((a << 2) | (b >> 4));
        if (s[i + 2] == '=') {
            break;
        }
        int c = b64_value(s[i + 2]);
        *p++ = (unsigned char)(((b & 0x0F) << 4) | (c >> 2));
        if (s[i + 3] == '=') {
            break;
        }
        int d = b64_value(s[i + 3]);
        *p++ = (unsigned char)(((c & 0x03) << 6) | d);
    }
    return p;
}

/* ==== Produce: records section -> send-batch records ==== */

typedef struct {
    const unsigned char *key; /* NULL: null key */
    Py_ssize_t key_len;
    const unsigned char *value; /* NULL: null value */
    Py_ssize_t value_len;
    Py_ssize_t headers_pos; /* first header (after the count) in the section */
    int64_t header_count;
    int64_t timestamp; /* born: the record's, or now_ms when <= 0 */
    int key_plain;
    Py_ssize_t props_len;
} ProduceRecord;

/* One header at b[pos] (before ``stop``): name and value (value NULL: null); the position after
 * it, or -1 (past stop, a null or negative-length name). */
static inline Py_ssize_t read_header(const unsigned char *b, Py_ssize_t pos, Py_ssize_t stop,
                                     const unsigned char **name, Py_ssize_t *name_len,
                                     const unsigned char **value, Py_ssize_t *value_len) {
    int64_t size;
    pos = read_varint(b, pos, stop, &size);
    if (pos < 0 || size < 0 || size > stop - pos) {
        return -1;
    }
    *name = b + pos;
    *name_len = (Py_ssize_t)size;
    pos += (Py_ssize_t)size;
    pos = read_varint(b, pos, stop, &size);
    if (pos < 0 || size > stop - pos) {
        return -1;
    }
    if (size < 0) {
        *value = NULL;
        *value_len = 0;
    } else {
        *value = b + pos;
        *value_len = (Py_ssize_t)size;
        pos += (Py_ssize_t)size;
    }
    return pos;
}

#define UNIQ_PREFIX "UNIQ_KEY\x01"
#define KEYS_PREFIX "KEYS\x01"
#define KKEY_PREFIX "__KAFKA_KEY\x01"
#define KVALUE_PREFIX "__KAFKA_VALUE\x01"
#define KPRODUCER_PREFIX "__KAFKA_PRODUCER\x01"
#define LIT_LEN(s) ((Py_ssize_t)(sizeof(s) - 1))

/* Parse and check one record at section[pos]; its end, or -1: take the Python path. */
static Py_ssize_t parse_produce_record(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end,
                                       int64_t base_timestamp, int64_t now_ms,
                                       ProduceRecord *rec) {
    int64_t length, delta, offset_delta, size;
    pos = read_varint(b, pos, end, &length);
    if (pos < 0 || length < 1 || length > end - pos) {
        return -1;
    }
    Py_ssize_t stop = pos + (Py_ssize_t)length;
    pos = read_varint(b, pos + 1, stop, &delta); /* after the attributes byte */
    if (pos < 0) {
        return -1;
    }
    pos = read_varint(b, pos, stop, &offset_delta);
    if (pos < 0) {
        return -1;
    }
    pos = read_varint(b, pos, stop, &size);
    if (pos < 0 || size > stop - pos) {
        return -1;
    }
    rec->key = NULL;
    rec->key_len = 0;
    if (size >= 0) {
        rec->key = b + pos;
        rec->key_len = (Py_ssize_t)size;
        pos += (Py_ssize_t)size;
    }
    pos = read_varint(b, pos, stop, &size);
    if (pos < 0 || size > stop - pos) {
        return -1;
    }
    rec->value = NULL;
    rec->value_len = 0;
    if (size >= 0) {
        rec->value = b + pos;
        rec->value_len = (Py_ssize_t)size;
        pos += (Py_ssize_t)size;
    }
    if (pos >= stop) {
        return -1;
    }
    int64_t count_h = 0;
    if (b[pos] == 0) {
        pos++;
    } else {
        pos = read_varint(b, pos, stop, &count_h);
        if (pos < 0 || count_h < 0 || count_h > MAX_HEADERS || count_h > stop - pos) {
            return -1;
        }
    }
    rec->headers_pos = pos;
    rec->header_count = count_h;
    int64_t timestamp;
    if (__builtin_add_overflow(base_timestamp, delta, &timestamp)) {
        return -1;
    }
    rec->timestamp = timestamp > 0 ? timestamp : now_ms;

    /* properties: UNIQ_KEY (added by the caller), key, value marker, headers */
    Py_ssize_t props = 0;
    rec->key_plain = 0;
    if (rec->key != NULL) {
        TextInfo info;
        if (rec->key_len > 0 && utf8_scan(rec->key, rec->key_len, &info) && !info.has_sep &&
            !info.has_space && !info.all_space) {
            rec->key_plain = 1;
            props += LIT_LEN(KEYS_PREFIX) + rec->key_len + 1;
        } else {
            props += LIT_LEN(KKEY_PREFIX) + b64_size(rec->key_len) + 1;
        }
    }
    if (rec->value == NULL || rec->value_len == 0) {
        props += LIT_LEN(KVALUE_PREFIX) + (rec->value == NULL ? 4 : 5) + 1;
    }
    /* headers: every one plain (unique UTF-8 name, no broker or __KAFKA_ name, a UTF-8 value
     * without separators), else the JSON form: the Python path */
    for (int64_t h = 0; h < count_h; h++) {
        const unsigned char *name, *value;
        Py_ssize_t name_len, value_len;
        pos = read_header(b, pos, stop, &name, &name_len, &value, &value_len);
        if (pos < 0 || value == NULL) {
            return -1;
        }
        TextInfo info;
        if (!utf8_scan(name, name_len, &info) || info.all_space || info.has_sep ||
            is_system(name, name_len) || is_kafka_name(name, name_len)) {
            return -1;
        }
        if (!utf8_scan(value, value_len, &info) || info.has_sep) {
            return -1;
        }
        /* a repeated name: compare with the headers before it */
        Py_ssize_t scan = rec->headers_pos;
        for (int64_t k = 0; k < h; k++) {
            const unsigned char *n2 = NULL, *v2 = NULL;
            Py_ssize_t n2_len = 0, v2_len = 0;
            scan = read_header(b, scan, stop, &n2, &n2_len, &v2, &v2_len);
            if (n2_len == name_len && memcmp(n2, name, (size_t)name_len) == 0) {
                return -1;
            }
        }
        props += name_len + 1 + value_len + 1;
    }
    if (pos != stop) {
        return -1;
    }
    rec->props_len = props;
    return stop;
}

static unsigned char *put_lit(unsigned char *p, const char *lit, Py_ssize_t len) {
    memcpy(p, lit, (size_t)len);
    return p + len;
}

PyDoc_STRVAR(produce_records_doc,
             "produce_records(section, count, base_timestamp, tail, ids, now_ms, max_body, "
             "mark, crc)\n--\n\n"
             "A v2 batch's uncompressed records section -> (send-batch records, body sizes), as\n"
             "produce.py's Python path makes them; None: take that path (it gives the result or\n"
             "the error). ``ids``: ``count`` UNIQ_KEY strings; ``mark``: the __KAFKA_PRODUCER\n"
             "value of the first record or None; ``crc``: the body CRC-32 function or None (zlib).");

static PyObject *produce_records(PyObject *self, PyObject *args) {
    Py_buffer section, tail;
    Py_ssize_t count;
    long long base_timestamp, now_ms;
    Py_ssize_t max_body;
    PyObject *ids, *mark, *crc_func;
    if (!PyArg_ParseTuple(args, "y*nLy*O!LnOO", &section, &count, &base_timestamp, &tail,
                          &PyList_Type, &ids, &now_ms, &max_body, &mark, &crc_func)) {
        return NULL;
    }
    PyObject *result = NULL, *data = NULL, *sizes = NULL;
    ProduceRecord *recs = NULL;
    const unsigned char *b = (const unsigned char *)section.buf;
    Py_ssize_t end = section.len;
    const char *mark_chars = NULL;
    Py_ssize_t mark_len = 0;
    if (count < 1 || count > end || PyList_GET_SIZE(ids) != count || tail.len < 2) {
        goto fallback;
    }
    if (mark != Py_None) {
        mark_chars = PyUnicode_AsUTF8AndSize(mark, &mark_len);
        if (mark_chars == NULL) {
            goto done;
        }
    }
    recs = PyMem_Malloc(sizeof(ProduceRecord) * (size_t)count);
    if (recs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t pos = 0, total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        pos = parse_produce_record(b, pos, end, base_timestamp, now_ms, &recs[i]);
        if (pos < 0) {
            goto fallback;
        }
        PyObject *uid = PyList_GET_ITEM(ids, i);
        Py_ssize_t uid_len;
        if (!PyUnicode_Check(uid) || PyUnicode_AsUTF8AndSize(uid, &uid_len) == NULL) {
            PyErr_Clear();
            goto fallback;
        }
        ProduceRecord *rec = &recs[i];
        rec->props_len += LIT_LEN(UNIQ_PREFIX) + uid_len + 1;
        if (i == 0 && mark_chars != NULL) {
            rec->props_len += LIT_LEN(KPRODUCER_PREFIX) + mark_len + 1;
        }
        Py_ssize_t body_len = rec->value_len > 0 ? rec->value_len : 1;
        if (body_len > max_body || rec->props_len > MAX_PROPERTIES_LENGTH) {
            goto fallback;
        }
        total += RECORD_FIXED_SIZE + body_len + tail.len - 1 + rec->props_len;
    }
    if (pos != end) {
        goto fallback;
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    sizes = PyList_New(count);
    if (data == NULL || sizes == NULL) {
        goto done;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(data);
    /* The tail's length says the record version (send_records.tail_magic). */
    uint32_t magic = tail.len <= 1 + MAX_TOPIC_LENGTH_V1 ? MESSAGE_MAGIC_CODE : MESSAGE_MAGIC_CODE_V2;
    for (Py_ssize_t i = 0; i < count; i++) {
        ProduceRecord *rec = &recs[i];
        const unsigned char *body = rec->value_len > 0 ? rec->value : (const unsigned char *)"\0";
        Py_ssize_t body_len = rec->value_len > 0 ? rec->value_len : 1;
        Py_ssize_t size = RECORD_FIXED_SIZE + body_len + tail.len - 1 + rec->props_len;
        unsigned char *start = p;
        memset(p, 0, RECORD_HEADER_SIZE);
        put_be32(p + OFF_TOTAL_SIZE, (uint32_t)size);
        put_be32(p + OFF_MAGIC, magic);
        put_be64(p + OFF_BORN_TIMESTAMP, (uint64_t)rec->timestamp);
        put_be32(p + OFF_BODY_LENGTH, (uint32_t)body_len);
        p += RECORD_HEADER_SIZE;
        memcpy(p, body, (size_t)body_len);
        uint32_t crc;
        if (wharf_body_crc(crc_func, p, body_len, &crc) < 0) {
            goto done;
        }
        put_be32(start + OFF_BODY_CRC, crc);
        p += body_len;
        memcpy(p, tail.buf, (size_t)tail.len);
        p += tail.len;
        *p++ = (unsigned char)(rec->props_len >> 8);
        *p++ = (unsigned char)rec->props_len;
        PyObject *uid = PyList_GET_ITEM(ids, i);
        Py_ssize_t uid_len;
        const char *uid_chars = PyUnicode_AsUTF8AndSize(uid, &uid_len);
        p = put_lit(p, UNIQ_PREFIX, LIT_LEN(UNIQ_PREFIX));
        p = put_lit(p, uid_chars, uid_len);
        *p++ = PROPERTY_SEPARATOR;
        if (rec->key != NULL) {
            if (rec->key_plain) {
                p = put_lit(p, KEYS_PREFIX, LIT_LEN(KEYS_PREFIX));
                p = put_lit(p, (const char *)rec->key, rec->key_len);
            } else {
                p = put_lit(p, KKEY_PREFIX, LIT_LEN(KKEY_PREFIX));
                p = put_b64(p, rec->key, rec->key_len);
            }
            *p++ = PROPERTY_SEPARATOR;
        }
        if (rec->value == NULL || rec->value_len == 0) {
            p = put_lit(p, KVALUE_PREFIX, LIT_LEN(KVALUE_PREFIX));
            p = rec->value == NULL ? put_lit(p, "null", 4) : put_lit(p, "empty", 5);
            *p++ = PROPERTY_SEPARATOR;
        }
        Py_ssize_t hpos = rec->headers_pos;
        for (int64_t h = 0; h < rec->header_count; h++) {
            const unsigned char *name = NULL, *value = NULL;
            Py_ssize_t name_len = 0, value_len = 0;
            hpos = read_header(b, hpos, end, &name, &name_len, &value, &value_len);
            p = put_lit(p, (const char *)name, name_len);
            *p++ = 1;
            p = put_lit(p, (const char *)value, value_len);
            *p++ = PROPERTY_SEPARATOR;
        }
        if (i == 0 && mark_chars != NULL) {
            p = put_lit(p, KPRODUCER_PREFIX, LIT_LEN(KPRODUCER_PREFIX));
            p = put_lit(p, mark_chars, mark_len);
            *p++ = PROPERTY_SEPARATOR;
        }
        if (p - start != size) {
            PyErr_SetString(PyExc_SystemError, "_kafka_convert: record size mismatch");
            goto done;
        }
        PyObject *n = PyLong_FromSsize_t(body_len);
        if (n == NULL) {
            goto done;
        }
        PyList_SET_ITEM(sizes, i, n);
    }
    result = PyTuple_Pack(2, data, sizes);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(data);
    Py_XDECREF(sizes);
    PyMem_Free(recs);
    PyBuffer_Release(&section);
    PyBuffer_Release(&tail);
    return result;
}

/* ==== Fetch: stored records -> one v2 batch ==== */

typedef struct {
    const unsigned char *body;
    Py_ssize_t body_len;
    const unsigned char *props;
    Py_ssize_t props_len;
    const unsigned char *key; /* NULL: null; else raw bytes, or base64 when key_b64 */
    Py_ssize_t key_len;       /* decoded length */
    Py_ssize_t key_src_len;
    int key_b64;
    int value_mark; /* 0: the body; 1: null; 2: empty */
    const unsigned char *tag;
    Py_ssize_t tag_len;
    int64_t queue_offset;
    int64_t timestamp;
    Py_ssize_t size; /* the encoded record, its length varint excluded */
} FetchRecord;

typedef struct {
    const unsigned char *name;
    Py_ssize_t name_len;
    const unsigned char *value;
    Py_ssize_t value_len;
} Pair;

/* The properties of a stored record as kafka_records.to_record_fields reads its dict: pairs split at
 * \x02 (empty ones skipped), each name before its first \x01; the count, or -1 (a repeated
 * name, too many). */
static Py_ssize_t split_pairs(const unsigned char *s, Py_ssize_t n, Pair *pairs) {
    Py_ssize_t count = 0, i = 0;
    while (i < n) {
        const unsigned char *sep = memchr(s + i, PROPERTY_SEPARATOR, (size_t)(n - i));
        Py_ssize_t stop = sep ? (Py_ssize_t)(sep - s) : n;
        if (stop > i) {
            if (count == MAX_PAIRS) {
                return -1;
            }
            const unsigned char *eq = memchr(s + i, 1, (size_t)(stop - i));
            Pair *pair = &pairs[count];
            pair->name = s + i;
            if (eq) {
                pair->name_len = (Py_ssize_t)(eq - (s + i));
                pair->value = eq + 1;
                pair->value_len = stop - (Py_ssize_t)(eq + 1 - s);
            } else {
                pair->name_len = stop - i;
                pair->value = s + stop;
                pair->value_len = 0;
            }
            for (Py_ssize_t k = 0; k < count; k++) {
                if (pairs[k].name_len == pair->name_len &&
                    memcmp(pairs[k].name, pair->name, (size_t)pair->name_len) == 0) {
                    return -1;
                }
            }
            count++;
        }
        i = stop + 1;
    }
    return count;
}

static inline int is_header(const Pair *pair) {
    return !is_system(pair->name, pair->name_len) && !is_kafka_name(pair->name, pair->name_len);
}

/* Fill ``rec`` from its properties; -1: the Python path. */
static int read_fetch_properties(FetchRecord *rec, Pair *pairs, Py_ssize_t *pair_count) {
    TextInfo info;
    if (!utf8_scan(rec->props, rec->props_len, &info)) {
        return -1; /* decoded with "replace" in Python */
    }
    Py_ssize_t n = split_pairs(rec->props, rec->props_len, pairs);
    if (n < 0) {
        return -1;
    }
    *pair_count = n;
    const Pair *kafka_key = NULL, *keys = NULL;
    rec->value_mark = 0;
    rec->tag = NULL;
    rec->tag_len = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        const Pair *pair = &pairs[k];
        if (pair->name_len == 0 || pair->name[0] != '_') {
            if (name_is(pair->name, pair->name_len, "KEYS")) {
                keys = pair;
            } else if (name_is(pair->name, pair->name_len, "TAGS")) {
                rec->tag = pair->value;
                rec->tag_len = pair->value_len;
            }
        } else if (name_is(pair->name, pair->name_len, "__KAFKA_KEY")) {
            kafka_key = pair;
        } else if (name_is(pair->name, pair->name_len, "__KAFKA_VALUE")) {
            rec->value_mark = name_is(pair->value, pair->value_len, "null") ? 1 : 2;
        } else if (name_is(pair->name, pair->name_len, "__KAFKA_HEADERS")) {
            return -1; /* JSON */
        }
    }
    rec->key = NULL;
    rec->key_len = 0;
    rec->key_b64 = 0;
    if (kafka_key != NULL) {
        Py_ssize_t size = b64_decoded_size(kafka_key->value, kafka_key->value_len);
        if (size < 0) {
            return -1;
        }
        rec->key = kafka_key->value;
        rec->key_src_len = kafka_key->value_len;
        rec->key_len = size;
        rec->key_b64 = 1;
    } else if (keys != NULL && keys->value_len > 0) {
        rec->key = keys->value;
        rec->key_len = keys->value_len;
    }
    return 0;
}

static inline Py_ssize_t field_size(Py_ssize_t len, int null) {
    return null ? 1 : varint_size(len) + len; /* null: varint -1, one byte */
}

PyDoc_STRVAR(fetch_batch_doc,
             "fetch_batch(records, count, crc32c, inflate)\n--\n\n"
             "Stored records (the store's raw read: ``count`` whole records in queue-offset order)\n"
             "-> one uncompressed record batch v2, as fetch.encode_messages makes it from the\n"
             "decoded messages; None: take that path. ``crc32c``: the CRC-32C function;\n"
             "``inflate``: bytes -> bytes, for a body with the COMPRESSED sysflag.");

/* A COMPRESSED body inflated by ``inflate`` into ``rec`` (the bytes kept alive in ``held``);
 * -1: the Python path (the error, if any, cleared: that path meets it again). */
static int inflate_body(FetchRecord *rec, PyObject *inflate, PyObject *held) {
    PyObject *view = PyMemoryView_FromMemory((char *)rec->body, rec->body_len, PyBUF_READ);
    if (view == NULL) {
        PyErr_Clear();
        return -1;
    }
    PyObject *plain = PyObject_CallOneArg(inflate, view);
    Py_DECREF(view);
    if (plain == NULL || !PyBytes_CheckExact(plain) || PyList_Append(held, plain) < 0) {
        Py_XDECREF(plain);
        PyErr_Clear();
        return -1;
    }
    rec->body = (const unsigned char *)PyBytes_AS_STRING(plain);
    rec->body_len = PyBytes_GET_SIZE(plain);
    Py_DECREF(plain); /* ``held`` owns it */
    return 0;
}

static PyObject *fetch_batch(PyObject *self, PyObject *args) {
    Py_buffer records;
    Py_ssize_t count;
    PyObject *crc_func, *inflate;
    if (!PyArg_ParseTuple(args, "y*nOO", &records, &count, &crc_func, &inflate)) {
        return NULL;
    }
    PyObject *result = NULL, *data = NULL, *held = NULL;
    FetchRecord *recs = NULL;
    Pair *pairs = NULL;
    const unsigned char *b = (const unsigned char *)records.buf;
    Py_ssize_t end = records.len;
    if (count < 1 || count > end / RECORD_FIXED_SIZE) {
        goto fallback;
    }
    recs = PyMem_Malloc(sizeof(FetchRecord) * (size_t)count);
    pairs = PyMem_Malloc(sizeof(Pair) * MAX_PAIRS);
    if (recs == NULL || pairs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* pass 1: the records, their key/value/tag, the batch's timestamps */
    Py_ssize_t pos = 0;
    int64_t base_ts = INT64_MAX, max_ts = INT64_MIN;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (end - pos < RECORD_FIXED_SIZE) {
            goto fallback;
        }
        const unsigned char *r = b + pos;
        int64_t total = (int32_t)be32(r + OFF_TOTAL_SIZE);
        int64_t body_len = (int32_t)be32(r + OFF_BODY_LENGTH);
        uint32_t magic = be32(r + OFF_MAGIC);
        int wide = magic == MESSAGE_MAGIC_CODE ? 0 : topic_length_size(magic) - 1; /* V2: 1 */
        if (wide < 0 || total < RECORD_FIXED_SIZE + wide || total > end - pos || body_len < 0 ||
            body_len > total - RECORD_FIXED_SIZE - wide) {
            goto fallback;
        }
        Py_ssize_t body_end = pos + RECORD_HEADER_SIZE + (Py_ssize_t)body_len;
        Py_ssize_t props_pos =
            wide ? body_end + 4 + (((Py_ssize_t)b[body_end] << 8) | b[body_end + 1])
                 : body_end + 3 + b[body_end];
        if (props_pos > pos + total ||
            props_pos + (((Py_ssize_t)b[props_pos - 2] << 8) | b[props_pos - 1]) != pos + total) {
            goto fallback;
        }
        for (Py_ssize_t t = body_end + 1 + wide; t < props_pos - 2; t++) {
            if (b[t] >= 0x80) {
                goto fallback; /* a topic that is not ASCII: the decode's CorruptRecordError */
            }
        }
        FetchRecord *rec = &recs[i];
        rec->body = r + RECORD_HEADER_SIZE;
        rec->body_len = (Py_ssize_t)body_len;
        rec->props = b + props_pos;
        rec->props_len = pos + (Py_ssize_t)total - props_pos;
        rec->queue_offset = (int64_t)be64(r + OFF_QUEUE_OFFSET);
        int64_t born = (int64_t)be64(r + OFF_BORN_TIMESTAMP);
        rec->timestamp = born ? born : (int64_t)be64(r + OFF_STORE_TIMESTAMP);
        Py_ssize_t n_pairs;
        if (read_fetch_properties(rec, pairs, &n_pairs) < 0) {
            goto fallback;
        }
        /* A placeholder body (value_mark) is never read: no need to inflate it. */
        if ((be32(r + OFF_SYS_FLAG) & SYSFLAG_COMPRESSED) && rec->value_mark == 0) {
            if (held == NULL && (held = PyList_New(0)) == NULL) {
                goto done;
            }
            if (inflate_body(rec, inflate, held) < 0) {
                goto fallback;
            }
        }
        if (rec->timestamp < base_ts) {
            base_ts = rec->timestamp;
        }
        if (rec->timestamp > max_ts) {
            max_ts = rec->timestamp;
        }
        pos += (Py_ssize_t)total;
    }
    if (pos != end) {
        goto fallback;
    }
    /* pass 2: sizes */
    int64_t base_offset = recs[0].queue_offset;
    Py_ssize_t section = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        FetchRecord *rec = &recs[i];
        int64_t ts_delta, offset_delta;
        if (__builtin_sub_overflow(rec->timestamp, base_ts, &ts_delta) ||
            __builtin_sub_overflow(rec->queue_offset, base_offset, &offset_delta)) {
            goto fallback;
        }
        Py_ssize_t size = 1 + varint_size(ts_delta) + varint_size(offset_delta);
        size += field_size(rec->key_len, rec->key == NULL);
        Py_ssize_t value_len = rec->value_mark ? 0 : rec->body_len;
        size += field_size(value_len, rec->value_mark == 1);
        Py_ssize_t n_pairs = split_pairs(rec->props, rec->props_len, pairs);
        Py_ssize_t headers = 0, header_bytes = 0;
        for (Py_ssize_t k = 0; k < n_pairs; k++) {
            if (is_header(&pairs[k])) {
                headers++;
                header_bytes += field_size(pairs[k].name_len, 0) + field_size(pairs[k].value_len, 0);
            }
        }
        if (rec->tag_len > 0) {
            headers++;
            header_bytes += field_size(4, 0) + field_size(rec->tag_len, 0);
        }
        size += varint_size(headers) + header_bytes;
        rec->size = size;
        section += varint_size(size) + size;
    }
    int64_t last_delta = recs[count - 1].queue_offset - base_offset;
    if (last_delta > INT32_MAX || last_delta < INT32_MIN || section > INT32_MAX - 61) {
        goto fallback;
    }
    data = PyBytes_FromStringAndSize(NULL, 61 + section);
    if (data == NULL) {
        goto done;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data), *p = out;
    put_be64(p, (uint64_t)base_offset);
    put_be32(p + 8, (uint32_t)(61 - 12 + section));
    put_be32(p + 12, 0xFFFFFFFFu); /* partitionLeaderEpoch -1 */
    p[16] = 2;
    p[21] = 0; /* attributes */
    p[22] = 0;
    put_be32(p + 23, (uint32_t)(int32_t)last_delta);
    put_be64(p + 27, (uint64_t)base_ts);
    put_be64(p + 35, (uint64_t)max_ts);
    put_be64(p + 43, UINT64_MAX); /* producerId -1 */
    p[51] = 0xFF;                 /* producerEpoch -1 */
    p[52] = 0xFF;
    put_be32(p + 53, 0xFFFFFFFFu); /* baseSequence -1 */
    put_be32(p + 57, (uint32_t)count);
    p += 61;
    for (Py_ssize_t i = 0; i < count; i++) {
        FetchRecord *rec = &recs[i];
        p = put_varint(p, rec->size);
        unsigned char *start = p;
        *p++ = 0;
        p = put_varint(p, rec->timestamp - base_ts);
        p = put_varint(p, rec->queue_offset - base_offset);
        if (rec->key == NULL) {
            p = put_varint(p, -1);
        } else {
            p = put_varint(p, rec->key_len);
            p = rec->key_b64 ? put_b64_decoded(p, rec->key, rec->key_src_len)
                             : put_lit(p, (const char *)rec->key, rec->key_len);
        }
        if (rec->value_mark == 1) {
            p = put_varint(p, -1);
        } else if (rec->value_mark == 2) {
            p = put_varint(p, 0);
        } else {
            p = put_varint(p, rec->body_len);
            p = put_lit(p, (const char *)rec->body, rec->body_len);
        }
        Py_ssize_t n_pairs = split_pairs(rec->props, rec->props_len, pairs);
        Py_ssize_t headers = rec->tag_len > 0;
        for (Py_ssize_t k = 0; k < n_pairs; k++) {
            headers += is_header(&pairs[k]);
        }
        p = put_varint(p, headers);
        for (Py_ssize_t k = 0; k < n_pairs; k++) {
            if (is_header(&pairs[k])) {
                p = put_varint(p, pairs[k].name_len);
                p = put_lit(p, (const char *)pairs[k].name, pairs[k].name_len);
                p = put_varint(p, pairs[k].value_len);
                p = put_lit(p, (const char *)pairs[k].value, pairs[k].value_len);
            }
        }
        if (rec->tag_len > 0) {
            p = put_varint(p, 4);
            p = put_lit(p, "TAGS", 4);
            p = put_varint(p, rec->tag_len);
            p = put_lit(p, (const char *)rec->tag, rec->tag_len);
        }
        if (p - start != rec->size) {
            PyErr_SetString(PyExc_SystemError, "_kafka_convert: fetch record size mismatch");
            goto done;
        }
    }
    PyObject *view = PyMemoryView_FromMemory((char *)out + 21, 61 - 21 + section, PyBUF_READ);
    if (view == NULL) {
        goto done;
    }
    PyObject *crc = PyObject_CallOneArg(crc_func, view);
    Py_DECREF(view);
    if (crc == NULL) {
        goto done;
    }
    unsigned long value = PyLong_AsUnsignedLongMask(crc);
    Py_DECREF(crc);
    if (value == (unsigned long)-1 && PyErr_Occurred()) {
        goto done;
    }
    put_be32(out + 17, (uint32_t)value);
    result = Py_NewRef(data);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(data);
    Py_XDECREF(held);
    PyMem_Free(recs);
    PyMem_Free(pairs);
    PyBuffer_Release(&records);
    return result;
}

PyDoc_STRVAR(configure_doc, "configure(system_names)\n--\n\n"
                            "The system property names (never Kafka headers).");

static PyObject *configure(PyObject *self, PyObject *names) {
    PyObject *seq = PySequence_Fast(names, "system_names must be iterable");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    char **new_names = PyMem_Calloc((size_t)(n ? n : 1), sizeof(char *));
    Py_ssize_t *new_lens = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_ssize_t));
    if (new_names == NULL || new_lens == NULL) {
        PyMem_Free(new_names);
        PyMem_Free(new_lens);
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        const char *chars = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(seq, i), &len);
        char *copy = chars ? PyMem_Malloc((size_t)len + 1) : NULL;
        if (copy == NULL) {
            for (Py_ssize_t k = 0; k < i; k++) {
                PyMem_Free(new_names[k]);
            }
            PyMem_Free(new_names);
            PyMem_Free(new_lens);
            Py_DECREF(seq);
            return chars ? PyErr_NoMemory() : NULL;
        }
        memcpy(copy, chars, (size_t)len + 1);
        new_names[i] = copy;
        new_lens[i] = len;
    }
    Py_DECREF(seq);
    for (Py_ssize_t k = 0; k < sys_count; k++) {
        PyMem_Free(sys_names[k]);
    }
    PyMem_Free(sys_names);
    PyMem_Free(sys_lens);
    sys_names = new_names;
    sys_lens = new_lens;
    sys_count = n;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"produce_records", produce_records, METH_VARARGS, produce_records_doc},
    {"fetch_batch", fetch_batch, METH_VARARGS, fetch_batch_doc},
    {"configure", configure, METH_O, configure_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "wharf.store.fast._kafka_convert",
    "Compiled Kafka record batch <-> stored record conversion (see store/fast/_kafka_convert.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kafka_convert(void) { return new_module_with_format(&module_def); }
