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
 * Off the caller's CPU: the thread's wake-up would otherwise land on the CPU whose task woke
 * it, where the event loop is running, and preempt it (ftrace, 2 vCPUs, a lone message at
 * 1k msg/s: 4,385 of 7,500 of the thread's runs in 2 s preempted the loop), so the loop's
 * own work during the sync (planning the dispatch, building the pull reply ahead) waited for
 * the thread's I/O submission: submit() "took" ~50 us. submit() therefore keeps the thread's
 * affinity to the process's CPUs but the one the caller runs on (re-set only when the caller
 * moved: sched_getcpu is a vDSO call); with a single CPU allowed nothing changes.
 *
 * Jobs are numbered by the caller, increasing. A job submitted while another waits replaces
 * it (the newer one covers more: the caller plans it from everything appended so far), so
 * consecutive group commits run back to back without a round trip through the loop.
 *
 * Deferred writes: bytes that may leave only once a job made them durable (a consumer's pull
 * answer built ahead of time) are handed over with defer(); the thread send()s them right after
 * the fdatasync that covers them, before the eventfd and before the loop wakes, which saves the
 * loop's wake-up from the answer's latency. defer() dup()s the fd (the caller may close it and
 * its number be reused meanwhile) and copies the bytes. Sends never block (MSG_DONTWAIT) and
 * never raise SIGPIPE (MSG_NOSIGNAL): the outcome is the count written (the caller writes the
 * rest), or -errno, or NOT_SYNCED (-1000: the sync failed, nothing written) or CLOSED (-1001),
 * collected by take_deferred(). One stream's bytes keep their order: per socket (fstat
 * identity), an entry is written only after every entry deferred before it on that socket was
 * written whole; once one is not, the later ones finish with 0 (not written) and are reported
 * after it, so the caller writes them in order.
 *
 * Prewake: prewake(), when an append whose sync will follow begins, wakes an idle thread to
 * spin (SPIN_NS at most) for that job, so the thread's wake-up from an idle vCPU (~50 us here)
 * overlaps the append instead of delaying the fdatasync; a job found while spinning starts at
 * once. Measured with the affinity above, a lone message at 1k msg/s over the wire port: the
 * sync started 52 us after its request without, 1 us with.
 *
 * Syncer() -> starts the thread; fileno() -> the eventfd; prewake(); thread_id();
 * submit(job_id, fds);
 * take() -> (done_id, done_count, last_seconds, start_ns, done_ns, failed_id, failed_errno,
 * busy); defer(job_id, fd, data, token) -> 1 durable already (write it yourself), 0 deferred,
 * -1 refused; take_deferred() -> [(token, outcome)]; close() -> runs what was submitted,
 * finishes the entries left with CLOSED, then joins the thread (GIL released).
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE /* sched_getcpu, CPU_* */
#include <Python.h>
#include <errno.h>
#include <sched.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Segments a job may cover: one, two right after a roll; more only if syncs fell far behind
 * rolls of tiny segments (the caller then syncs the rest in the next job). */
#define MAX_FDS 16
/* Deferred writes held at once: queued, being sent, or finished and not yet taken. */
#define MAX_DEFERRED 64
/* How long a prewoken thread spins for its job before it sleeps again: a lone append takes
 * ~60-80 us from the prewake to its submit here, several times that on a cold CPU. */
#define SPIN_NS 200000LL
/* Outcomes of entries never written. */
#define NOT_SYNCED (-1000LL)
#define CLOSED (-1001LL)

typedef struct {
    dev_t dev;
    ino_t ino;
} SockKey;

typedef struct {
    unsigned long long job_id;
    int fd; /* the dup, closed once finished */
    char *buf;
    size_t len;
    long long token;
    SockKey key;
} Deferred;

typedef struct {
    long long token;
    long long outcome;
    SockKey key;
    int incomplete; /* fewer bytes written than asked: the caller writes the rest */
} Finished;

typedef struct {
    PyObject_HEAD pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    pid_t tid;        /* the thread's id (0 until it runs) */
    int avoided_cpu;  /* the CPU its affinity leaves out (-1: none yet) */
    cpu_set_t allowed; /* the process's CPUs when the syncer was made */
    int prewoken;     /* prewake(): spin for the job instead of sleeping, once */
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
    /* deferred writes: the newest job made durable (before any failure), the queue in defer()
     * order, the entries the thread is sending, and the outcomes not yet taken */
    unsigned long long synced_id;
    Deferred queued[MAX_DEFERRED];
    int nqueued;
    SockKey inflight[MAX_DEFERRED];
    int ninflight;
    Finished finished[MAX_DEFERRED];
    int nfinished;
} Syncer;

static long long realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int same_key(SockKey a, SockKey b) { return a.dev == b.dev && a.ino == b.ino; }

static void wake_loop(Syncer *s) {
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(s->efd, &one, sizeof one);
    } while (n < 0 && errno == EINTR);
    /* EAGAIN: the counter is saturated, the loop has a wake-up pending anyway. */
}

/* Under the mutex: record an outcome (a slot is always free: every entry holds one). */
static void finish(Syncer *s, long long token, SockKey key, long long outcome, int incomplete) {
    Finished *f = &s->finished[s->nfinished++];
    f->token = token;
    f->outcome = outcome;
    f->key = key;
    f->incomplete = incomplete;
}

/* Under the mutex: finish queued entries unwritten, those on `key` only when `key` is set, in
 * queue order (outcome 0: the caller writes them after the incomplete one before them). */
static void drop_queued(Syncer *s, const SockKey *key, long long outcome) {
    int kept = 0;
    for (int i = 0; i < s->nqueued; i++) {
        Deferred *d = &s->queued[i];
        if (key != NULL && !same_key(d->key, *key)) {
            s->queued[kept++] = *d;
            continue;
        }
        close(d->fd);
        free(d->buf);
        finish(s, d->token, d->key, outcome, d->len > 0);
    }
    s->nqueued = kept;
}

/* Under the mutex: move to `batch` the queued entries of synced jobs, in queue order, but none
 * behind an entry of the same socket that stays queued (one stream's bytes keep their order). */
static int take_due(Syncer *s, Deferred *batch) {
    int kept = 0, nb = 0;
    for (int i = 0; i < s->nqueued; i++) {
        Deferred d = s->queued[i];
        int held = d.job_id > s->synced_id;
        for (int k = 0; k < kept && !held; k++) {
            held = same_key(s->queued[k].key, d.key);
        }
        if (held) {
            s->queued[kept++] = d;
        } else {
            s->inflight[nb] = d.key;
            batch[nb++] = d;
        }
    }
    s->nqueued = kept;
    s->ninflight = nb;
    return nb;
}

/* Without the mutex: send each entry as far as the socket takes it now; close its dup and free
 * its bytes. An entry behind an incomplete one on the same socket is not sent (0). */
static void send_batch(Deferred *batch, int nb, long long *outcomes, int *incomplete) {
    for (int i = 0; i < nb; i++) {
        Deferred *d = &batch[i];
        int behind = 0;
        for (int k = 0; k < i && !behind; k++) {
            behind = incomplete[k] && same_key(batch[k].key, d->key);
        }
        size_t off = 0;
        int err = 0;
        while (!behind && off < d->len) {
            ssize_t n = send(d->fd, d->buf + off, d->len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) {
                off += (size_t)n;
            } else if (n < 0 && errno == EINTR) {
                continue;
            } else {
                if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                    err = errno;
                }
                break; /* full (or 0: no progress) */
            }
        }
        outcomes[i] = (err != 0 && off == 0) ? -(long long)err : (long long)off;
        incomplete[i] = off < d->len;
        close(d->fd);
        free(d->buf);
        d->buf = NULL;
        d->fd = -1;
    }
}

/* Under the mutex (released while sending): write the entries the synced jobs cover, again
 * while entries held behind those being sent become due. */
static void write_due(Syncer *s) {
    Deferred batch[MAX_DEFERRED];
    long long outcomes[MAX_DEFERRED];
    int incomplete[MAX_DEFERRED];
    int nb;
    while ((nb = take_due(s, batch)) > 0) {
        pthread_mutex_unlock(&s->mu);
        send_batch(batch, nb, outcomes, incomplete);
        pthread_mutex_lock(&s->mu);
        s->ninflight = 0;
        for (int i = 0; i < nb; i++) {
            finish(s, batch[i].token, batch[i].key, outcomes[i], incomplete[i]);
        }
        for (int i = 0; i < nb; i++) {
            if (incomplete[i]) { /* deferred meanwhile on that socket: after it, unwritten */
                drop_queued(s, &batch[i].key, 0);
            }
        }
    }
}

static void *run(void *arg) {
    Syncer *s = (Syncer *)arg;
    pthread_mutex_lock(&s->mu);
    s->tid = (pid_t)syscall(SYS_gettid);
    for (;;) {
        while (!s->has_job && !s->closing) {
            if (s->prewoken) {
                s->prewoken = 0;
                pthread_mutex_unlock(&s->mu);
                long long until = monotonic_ns() + SPIN_NS;
                while (!__atomic_load_n(&s->has_job, __ATOMIC_ACQUIRE) && monotonic_ns() < until) {
#if defined(__x86_64__) || defined(__i386__)
                    __builtin_ia32_pause();
#endif
                }
                pthread_mutex_lock(&s->mu);
                continue;
            }
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
        if (err != 0) {
            if (s->failed_id == 0) {
                s->failed_id = id;
                s->failed_errno = err;
            }
            drop_queued(s, NULL, NOT_SYNCED);
        } else if (s->failed_id == 0) {
            /* First of all, the bytes this sync made durable leave (a sync that succeeds
             * after a failed one proves nothing: nothing queued is left then anyway). */
            s->synced_id = id;
            write_due(s);
        }
        s->running = 0;
        if (err == 0) {
            s->done_id = id;
            s->done_count++;
            s->last_seconds =
                (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
            s->start_ns = start_ns;
            s->done_ns = done_ns;
        }
        wake_loop(s);
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
    s->avoided_cpu = -1;
    if (sched_getaffinity(0, sizeof s->allowed, &s->allowed) != 0) {
        CPU_ZERO(&s->allowed); /* unknown: the thread's affinity is never changed */
    }
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
    /* No thread any more: what is still queued is never written (take_deferred reports it). */
    pthread_mutex_lock(&s->mu);
    drop_queued(s, NULL, CLOSED);
    pthread_mutex_unlock(&s->mu);
    if (s->efd >= 0) {
        close(s->efd);
        s->efd = -1;
    }
}

static void Syncer_dealloc(Syncer *s) {
    stop_thread(s); /* closes and frees what is queued; finished entries hold nothing */
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Syncer_fileno(Syncer *s, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(s->efd);
}

/* Under the mutex: keep the thread off the caller's CPU (see the top of this file). */
static void avoid_callers_cpu(Syncer *s) {
    int cpu = sched_getcpu();
    if (cpu < 0 || cpu == s->avoided_cpu || s->tid == 0 || CPU_COUNT(&s->allowed) < 2 ||
        !CPU_ISSET(cpu, &s->allowed)) {
        return;
    }
    cpu_set_t set = s->allowed;
    CPU_CLR(cpu, &set);
    if (sched_setaffinity(s->tid, sizeof set, &set) == 0) {
        s->avoided_cpu = cpu;
    }
}

static PyObject *Syncer_prewake(Syncer *s, PyObject *Py_UNUSED(ignored)) {
    pthread_mutex_lock(&s->mu);
    if (!s->has_job && !s->running && !s->closing && !s->prewoken) {
        avoid_callers_cpu(s);
        s->prewoken = 1;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    Py_RETURN_NONE;
}

static PyObject *Syncer_thread_id(Syncer *s, PyObject *Py_UNUSED(ignored)) {
    pthread_mutex_lock(&s->mu);
    pid_t tid = s->tid;
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromLong((long)tid);
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
    avoid_callers_cpu(s);
    s->job_id = id;
    memcpy(s->job_fds, fds, sizeof(int) * (size_t)n);
    s->job_nfds = (int)n;
    __atomic_store_n(&s->has_job, 1, __ATOMIC_RELEASE); /* read by a spinning thread */
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

/* Under the mutex: 2 if an entry on `key` was left incomplete and is not reported yet, 1 if
 * one is queued or being sent, 0 if none waits (the caller may write to it itself). */
static int key_pending(Syncer *s, SockKey key) {
    for (int i = 0; i < s->nfinished; i++) {
        if (s->finished[i].incomplete && same_key(s->finished[i].key, key)) {
            return 2;
        }
    }
    for (int i = 0; i < s->nqueued; i++) {
        if (same_key(s->queued[i].key, key)) {
            return 1;
        }
    }
    for (int i = 0; i < s->ninflight; i++) {
        if (same_key(s->inflight[i], key)) {
            return 1;
        }
    }
    return 0;
}

/* Under the mutex: 1 durable already (and nothing of this socket waits), -1 refused, or 0
 * when the entry must be deferred. */
static int defer_verdict(Syncer *s, unsigned long long id, SockKey key) {
    if (s->synced_id >= id && key_pending(s, key) == 0) {
        return 1;
    }
    if (s->failed_id != 0 || s->closing || s->closed ||
        s->nqueued + s->ninflight + s->nfinished >= MAX_DEFERRED) {
        return -1;
    }
    return 0;
}

static PyObject *Syncer_defer(Syncer *s, PyObject *args) {
    unsigned long long id;
    int fd;
    Py_buffer data;
    long long token;
    if (!PyArg_ParseTuple(args, "Kiy*L:defer", &id, &fd, &data, &token)) {
        return NULL;
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int durable;
        pthread_mutex_lock(&s->mu);
        durable = s->synced_id >= id;
        pthread_mutex_unlock(&s->mu);
        PyBuffer_Release(&data);
        return PyLong_FromLong(durable ? 1 : -1);
    }
    SockKey key = {st.st_dev, st.st_ino};
    pthread_mutex_lock(&s->mu);
    int verdict = defer_verdict(s, id, key);
    pthread_mutex_unlock(&s->mu);
    if (verdict != 0) {
        PyBuffer_Release(&data);
        return PyLong_FromLong(verdict);
    }
    /* The copy and the dup outside the mutex: the thread takes it right after each sync. */
    size_t len = (size_t)data.len;
    char *buf = malloc(len > 0 ? len : 1);
    if (buf == NULL) {
        PyBuffer_Release(&data);
        return PyLong_FromLong(-1);
    }
    memcpy(buf, data.buf, len);
    PyBuffer_Release(&data);
    int dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dupfd < 0) {
        free(buf);
        return PyLong_FromLong(-1);
    }
    pthread_mutex_lock(&s->mu);
    verdict = defer_verdict(s, id, key); /* the thread may have moved meanwhile */
    if (verdict == 0 && key_pending(s, key) == 2) {
        /* Behind an incomplete entry the caller has not heard of: reported unwritten after it. */
        finish(s, token, key, 0, len > 0);
        if (s->efd >= 0) {
            wake_loop(s);
        }
        close(dupfd);
        free(buf);
    } else if (verdict == 0) {
        Deferred *d = &s->queued[s->nqueued++];
        d->job_id = id;
        d->fd = dupfd;
        d->buf = buf;
        d->len = len;
        d->token = token;
        d->key = key;
        /* Due already (held behind an entry of its socket being sent): the thread looks
         * again after each batch it sends. Not due: after the sync that covers it. */
    } else {
        close(dupfd);
        free(buf);
    }
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromLong(verdict);
}

static PyObject *Syncer_take_deferred(Syncer *s, PyObject *Py_UNUSED(ignored)) {
    pthread_mutex_lock(&s->mu); /* the thread never waits for the GIL: no deadlock */
    PyObject *out = PyList_New(s->nfinished);
    if (out != NULL) {
        for (int i = 0; i < s->nfinished; i++) {
            PyObject *item = Py_BuildValue("LL", s->finished[i].token, s->finished[i].outcome);
            if (item == NULL) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, i, item);
        }
    }
    if (out != NULL) {
        s->nfinished = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

static PyObject *Syncer_close(Syncer *s, PyObject *Py_UNUSED(ignored)) {
    stop_thread(s);
    Py_RETURN_NONE;
}

static PyMethodDef Syncer_methods[] = {
    {"fileno", (PyCFunction)Syncer_fileno, METH_NOARGS, "the eventfd the loop watches"},
    {"prewake", (PyCFunction)Syncer_prewake, METH_NOARGS,
     "a job is coming: wake the idle thread to spin for it (up to SPIN_NS)"},
    {"thread_id", (PyCFunction)Syncer_thread_id, METH_NOARGS,
     "the sync thread's id (0 until it runs)"},
    {"submit", (PyCFunction)Syncer_submit, METH_VARARGS,
     "submit(job_id, fds): sync these fds next (replaces a job not started yet)"},
    {"take", (PyCFunction)Syncer_take, METH_NOARGS,
     "take() -> (done_id, done_count, last_seconds, start_ns, done_ns, failed_id, "
     "failed_errno, busy)"},
    {"defer", (PyCFunction)Syncer_defer, METH_VARARGS,
     "defer(job_id, fd, data, token) -> 1 durable already, 0 deferred, -1 refused"},
    {"take_deferred", (PyCFunction)Syncer_take_deferred, METH_NOARGS,
     "take_deferred() -> [(token, outcome)] of the deferred writes finished since the last call"},
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

static int set_constant(const char *name, long long value) {
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL) {
        return -1;
    }
    int rc = PyDict_SetItemString(SyncerType.tp_dict, name, v);
    Py_DECREF(v);
    return rc;
}

PyMODINIT_FUNC PyInit__syncer(void) {
    if (PyType_Ready(&SyncerType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    /* Syncer.MAX_FDS: what a plan may hold (the engine reads it from the syncer it makes);
     * MAX_DEFERRED, NOT_SYNCED, CLOSED: the deferred writes' bound and outcomes. */
    if (set_constant("MAX_FDS", MAX_FDS) < 0 || set_constant("MAX_DEFERRED", MAX_DEFERRED) < 0 ||
        set_constant("NOT_SYNCED", NOT_SYNCED) < 0 || set_constant("CLOSED", CLOSED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyType_Modified(&SyncerType);
    Py_INCREF(&SyncerType);
    if (PyModule_AddObject(m, "Syncer", (PyObject *)&SyncerType) < 0) {
        Py_DECREF(&SyncerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
