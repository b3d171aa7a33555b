/*
 * tb_reduce_plugin._guard: survive a mapped index file that shrinks under its reader.
 *
 * Why: the index store maps its column files (numpy memmap). If another process
 * truncates one while it is mapped, touching a page past the new end raises SIGBUS,
 * which Python cannot catch: the server would die. Here a SIGBUS handler looks the
 * faulting address up among the ranges registered with `guard(address, length)`; if
 * it lies in one, it maps anonymous zero pages over the rest of that range (reads
 * then see zeros instead of faulting), counts the fault and returns. The caller
 * compares `faults()` before and after its work and throws the result away when it
 * changed: the zeros are never served, the index is dropped and rebuilt.
 *
 * A fault outside every range is not ours: the previous handler is put back and the
 * faulting instruction runs again into it (a kill(SIGBUS) is raised again).
 *
 * The handler only reads the table and calls mmap and sigaction (both system calls);
 * the table's slots are atomics written under the GIL by `guard` and `unguard`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SLOTS 8192

static _Atomic uintptr_t slot_start[SLOTS];
static _Atomic uintptr_t slot_end[SLOTS];
static _Atomic long fault_count;
static uintptr_t page_mask;
static struct sigaction previous;

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    (void)context;
    uintptr_t at = (uintptr_t)info->si_addr;
    if (info->si_code > 0) { /* a fault, not a kill() */
        for (int i = 0; i < SLOTS; i++) {
            uintptr_t start = atomic_load(&slot_start[i]);
            uintptr_t end = atomic_load(&slot_end[i]);
            if (start == 0 || at < start || at >= end) continue;
            uintptr_t from = at & ~page_mask;
            uintptr_t to = (end + page_mask) & ~page_mask;
            void *got = mmap((void *)from, to - from, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            if (got != MAP_FAILED) {
                atomic_fetch_add(&fault_count, 1);
                return;
            }
            break;
        }
    }
    sigaction(SIGBUS, &previous, NULL);
    if (info->si_code <= 0) raise(sig);
}

/* Ours is the handler now (another library, faulthandler say, may have taken it since). */
static int install(void) {
    struct sigaction now;
    if (sigaction(SIGBUS, NULL, &now) != 0) return -1;
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigbus) return 0;
    struct sigaction mine;
    memset(&mine, 0, sizeof mine);
    mine.sa_sigaction = on_sigbus;
    mine.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&mine.sa_mask);
    if (sigaction(SIGBUS, &mine, &previous) != 0) return -1;
    return 0;
}

static PyObject *guard(PyObject *mod, PyObject *args) {
    (void)mod;
    unsigned long long address, length;
    if (!PyArg_ParseTuple(args, "KK", &address, &length)) return NULL;
    if (address == 0 || length == 0 || address + length < address) {
        PyErr_SetString(PyExc_ValueError, "guard: an empty or wrapping range");
        return NULL;
    }
    if (install() != 0) return PyErr_SetFromErrno(PyExc_OSError);
    for (int i = 0; i < SLOTS; i++) {
        if (atomic_load(&slot_start[i]) != 0) continue;
        atomic_store(&slot_end[i], (uintptr_t)(address + length));
        atomic_store(&slot_start[i], (uintptr_t)address);
        return PyLong_FromLong(i);
    }
    return PyLong_FromLong(-1); /* full: the range goes unguarded, as without this module */
}

static PyObject *unguard(PyObject *mod, PyObject *arg) {
    (void)mod;
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i >= 0 && i < SLOTS) {
        atomic_store(&slot_start[i], 0);
        atomic_store(&slot_end[i], 0);
    }
    Py_RETURN_NONE;
}

static PyObject *faults(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    return PyLong_FromLong(atomic_load(&fault_count));
}

static PyMethodDef methods[] = {
    {"guard", guard, METH_VARARGS,
     "guard(address, length) -> slot: zero pages instead of SIGBUS for faults in this range (-1: no slot left)."},
    {"unguard", unguard, METH_O, "unguard(slot): forget a range (before it is unmapped)."},
    {"faults", faults, METH_NOARGS, "faults() -> int: faults answered with zero pages so far."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_guard", "Mapped index files that shrink under their reader read as zeros, not SIGBUS.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__guard(void) {
    page_mask = (uintptr_t)sysconf(_SC_PAGESIZE) - 1;
    return PyModule_Create(&moduledef);
}
