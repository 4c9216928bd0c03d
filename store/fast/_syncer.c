/* The group commit's sync thread, compiled: fdatasync without the GIL on either side
 * (store/log/sync_engine.py NativeSyncEngine; its reference twin is ThreadSyncEngine, a Python
 * thread).
 *
 * A Python sync thread needs the GIL twice per group commit: to return from its Condition
 * wait before calling fdatasync, and to post the result to the loop after it. While the event
 * loop runs Python code (a busy broker: always), each wait lasts until the loop next blocks,
 * or the 5 ms switch interval: measured at 1k msg/s SYNC_FLUSH, request -> fdatasync start
 * p50 76 us p99 1.9 ms and fdatasync done -> loop told p99 1.3 ms. This thread never touches
 * Python: submit() hands it a job (the segment fds) under a mutex and signals it; it runs
 * fdatasync on each fd, records the outcome and writes an eventfd that the loop watches
 * (loop.add_reader), which then calls take().
 *
 * Jobs are numbered by the caller, increasing. A job submitted while another waits replaces
 * it (the newer one covers more: the caller plans it from everything appended so far), so
 * consecutive group commits run back to back without a round trip through the loop.
 *
 * Syncer() -> starts the thread; fileno() -> the eventfd; submit(job_id, fds);
 * take() -> (done_id, done_count, last_seconds, start_ns, done_ns, failed_id, failed_errno,
 * busy); close() -> runs what was submitted, then joins the thread (GIL released).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* Segments a job may cover: one, two right after a roll; more only if syncs fell far behind
 * rolls of tiny segments (the caller then syncs the rest in the next job). */
#define MAX_FDS 16

typedef struct {
    PyObject_HEAD pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started;
    int closed;
    int closing;
    int efd;
    /* the job waiting for the thread */
    int has_job;
    unsigned long long job_id;
    int job_fds[MAX_FDS];
    int job_nfds;
    int running;
    /* outcomes since the last take() */
    unsigned long long done_id;
    unsigned long long done_count;
    double last_seconds;
    long long start_ns, done_ns;
    unsigned long long failed_id;
    int failed_errno;
} Syncer;

static long long realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *run(void *arg) {
    Syncer *s = (Syncer *)arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->has_job && !s->closing) {
            pthread_cond_wait(&s->cv, &s->mu);
        }
        if (!s->has_job) {
            break; /* closing, nothing asked */
        }
        unsigned long long id = s->job_id;
        int fds[MAX_FDS];
        int nfds = s->job_nfds;
        memcpy(fds, s->job_fds, sizeof(int) * (size_t)nfds);
        s->has_job = 0;
        s->running = 1;
        pthread_mutex_unlock(&s->mu);

        struct timespec t0, t1;
        long long start_ns = realtime_ns();
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int err = 0;
        for (int i = 0; i < nfds; i++) {
            if (fdatasync(fds[i]) != 0) {
                err = errno;
                break;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        long long done_ns = realtime_ns();

        pthread_mutex_lock(&s->mu);
        s->running = 0;
        if (err != 0) {
            if (s->failed_id == 0) {
                s->failed_id = id;
                s->failed_errno = err;
            }
        } else {
            s->done_id = id;
            s->done_count++;
            s->last_seconds =
                (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
            s->start_ns = start_ns;
            s->done_ns = done_ns;
        }
        uint64_t one = 1;
        ssize_t n;
        do {
            n = write(s->efd, &one, sizeof one);
        } while (n < 0 && errno == EINTR);
        /* EAGAIN: the counter is saturated, the loop has a wake-up pending anyway. */
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static PyObject *Syncer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Syncer", kwlist)) {
        return NULL;
    }
    Syncer *s = (Syncer *)type->tp_alloc(type, 0);
    if (s == NULL) {
        return NULL;
    }
    s->efd = -1;
    s->closed = 1; /* until the thread runs: dealloc must not join a thread never started */
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(s);
        return NULL;
    }
    int rc = pthread_create(&s->thread, NULL, run, s);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(s);
        return NULL;
    }
    s->started = 1;
    s->closed = 0;
    return (PyObject *)s;
}

static void stop_thread(Syncer *s) {
    if (s->started && !s->closed) {
        s->closed = 1;
        pthread_mutex_lock(&s->mu);
        s->closing = 1;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        Py_BEGIN_ALLOW_THREADS pthread_join(s->thread, NULL);
        Py_END_ALLOW_THREADS
    }
    if (s->efd >= 0) {
        close(s->efd);
        s->efd = -1;
    }
}

static void Syncer_dealloc(Syncer *s) {
    stop_thread(s);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Syncer_fileno(Syncer *s, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(s->efd);
}

static PyObject *Syncer_submit(Syncer *s, PyObject *args) {
    unsigned long long id;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "KO:submit", &id, &seq)) {
        return NULL;
    }
    if (s->closed) {
        PyErr_SetString(PyExc_ValueError, "the syncer is closed");
        return NULL;
    }
    PyObject *fast = PySequence_Fast(seq, "fds must be a sequence of file descriptors");
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n < 1 || n > MAX_FDS) {
        Py_DECREF(fast);
        return PyErr_Format(PyExc_ValueError, "a job syncs 1 to %d fds, got %zd", MAX_FDS, n);
    }
    int fds[MAX_FDS];
    for (Py_ssize_t i = 0; i < n; i++) {
        long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (fd == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return NULL;
        }
        if (fd < 0 || fd > INT32_MAX) {
            Py_DECREF(fast);
            return PyErr_Format(PyExc_ValueError, "invalid file descriptor %ld", fd);
        }
        fds[i] = (int)fd;
    }
    Py_DECREF(fast);
    pthread_mutex_lock(&s->mu);
    s->job_id = id;
    memcpy(s->job_fds, fds, sizeof(int) * (size_t)n);
    s->job_nfds = (int)n;
    s->has_job = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    Py_RETURN_NONE;
}

static PyObject *Syncer_take(Syncer *s, PyObject *Py_UNUSED(ignored)) {
    if (s->efd >= 0) {
        uint64_t count;
        ssize_t n;
        do {
            n = read(s->efd, &count, sizeof count);
        } while (n < 0 && errno == EINTR);
    }
    pthread_mutex_lock(&s->mu);
    unsigned long long done_id = s->done_id, done_count = s->done_count;
    unsigned long long failed_id = s->failed_id;
    double last_seconds = s->last_seconds;
    long long start_ns = s->start_ns, done_ns = s->done_ns;
    int failed_errno = s->failed_errno, busy = s->running || s->has_job;
    s->done_count = 0;
    pthread_mutex_unlock(&s->mu);
    return Py_BuildValue("KKdLLKii", done_id, done_count, last_seconds, start_ns, done_ns,
                         failed_id, failed_errno, busy);
}

static PyObject *Syncer_close(Syncer *s, PyObject *Py_UNUSED(ignored)) {
    stop_thread(s);
    Py_RETURN_NONE;
}

static PyMethodDef Syncer_methods[] = {
    {"fileno", (PyCFunction)Syncer_fileno, METH_NOARGS, "the eventfd the loop watches"},
    {"submit", (PyCFunction)Syncer_submit, METH_VARARGS,
     "submit(job_id, fds): sync these fds next (replaces a job not started yet)"},
    {"take", (PyCFunction)Syncer_take, METH_NOARGS,
     "take() -> (done_id, done_count, last_seconds, start_ns, done_ns, failed_id, "
     "failed_errno, busy)"},
    {"close", (PyCFunction)Syncer_close, METH_NOARGS,
     "run what was submitted, then stop the thread and close the eventfd"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SyncerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wharf.store.fast._syncer.Syncer",
    .tp_basicsize = sizeof(Syncer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A thread that runs fdatasync jobs without the GIL; see the module docstring.",
    .tp_new = Syncer_new,
    .tp_dealloc = (destructor)Syncer_dealloc,
    .tp_methods = Syncer_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_syncer",
    .m_doc = "The group commit's GIL-free sync thread.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__syncer(void) {
    if (PyType_Ready(&SyncerType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    /* Syncer.MAX_FDS: what a plan may hold (the engine reads it from the syncer it makes). */
    PyObject *max_fds = PyLong_FromLong(MAX_FDS);
    if (max_fds == NULL || PyDict_SetItemString(SyncerType.tp_dict, "MAX_FDS", max_fds) < 0) {
        Py_XDECREF(max_fds);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(max_fds);
    PyType_Modified(&SyncerType);
    Py_INCREF(&SyncerType);
    if (PyModule_AddObject(m, "Syncer", (PyObject *)&SyncerType) < 0) {
        Py_DECREF(&SyncerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
