/* pyrelease.c — the PyThreadState a thread hands back when it releases the GIL, noted as it does.
 *
 * Why: reading a thread's Python frames starts from its PyThreadState. Asking CPython for it
 * (PyGILState_GetThisThreadState, which goes on to PyThread_tss_get and pthread_getspecific) runs
 * three functions whose code and data the program has evicted between two allocations: on the GPU
 * machine it was one of the misses that wait on each other at the start of every stack
 * (docs/performance.md, "The thread state from the GIL's release"). But a thread that allocates
 * CUDA memory from Python has just released the GIL: the op's binding (pybind11's
 * gil_scoped_release in PyTorch, Py_BEGIN_ALLOW_THREADS in any extension, also PyTorch's autograd
 * workers parking their state) called PyEval_SaveThread, which returns the thread's state, and
 * hands the same state to PyEval_RestoreThread when the call is over. Both calls go through the
 * calling extension's import slots (GOT), so got_patch.c can put stand-ins there: one notes the
 * state in a thread-local word as the GIL is released, the others clear the word before the GIL
 * is taken back. The recorder then reads the word (mt_pyrelease_state) instead of asking.
 *
 * Why it is exact: between the two calls the state is this thread's own and alive (the thread
 * keeps it to restore it), and it is the state whose frames the thread was running, so its frames
 * are read from it as from the looked-up one (the same state, but for threads that switch between
 * states of their own: then this one is the one they were running). Every call that can make the
 * thread run Python again (PyEval_RestoreThread, PyEval_AcquireThread, PyEval_AcquireLock,
 * PyGILState_Ensure, PyThreadState_Swap), made through a redirected slot, clears the word first;
 * a release that does not go through one (libpython's own Py_BEGIN_ALLOW_THREADS, an extension
 * loaded after the writer's last tick) leaves it clear, and the recorder asks CPython as before.
 * What is left: a release through a redirected slot whose state is then taken back through no
 * redirected slot, and freed, before the thread's next allocation. The stand-ins are in every
 * object that imports the functions, from the first patch on, and a pair of release and restore is
 * made by one piece of code (a macro pair, a scope's constructor and destructor) in one object.
 *
 * The stand-ins stay in place for the life of the process (as the recorder's other stand-ins):
 * each costs an indirect call and a store around calls that take or release a lock.
 */
#include <pthread.h>
#include <stdint.h>

#include "memtrace/record.h"

enum {
    SAVE_THREAD,    /* PyThreadState *PyEval_SaveThread(void): notes the state it returns */
    RESTORE_THREAD, /* void PyEval_RestoreThread(PyThreadState *): the rest clear the word */
    ACQUIRE_THREAD, /* void PyEval_AcquireThread(PyThreadState *) */
    ACQUIRE_LOCK,   /* void PyEval_AcquireLock(void) (before 3.13) */
    GILSTATE_ENSURE, /* PyGILState_STATE (an int) PyGILState_Ensure(void) */
    THREADSTATE_SWAP, /* PyThreadState *PyThreadState_Swap(PyThreadState *) */
    HOOK_COUNT
};

/* The state this thread released through a redirected PyEval_SaveThread and has not taken back;
 * 0 otherwise. */
static __thread uintptr_t tls_released;

/* The process's one set of stand-ins (one interpreter, one set of import slots): the table holds
 * the definitions they call, the patcher is made by the first mt_pyrelease_patch. */
static mt_got_hook hooks[HOOK_COUNT];
static mt_got_patcher *patcher;
static pthread_mutex_t patch_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void *original(int h)
{
    return __atomic_load_n(&hooks[h].original, __ATOMIC_ACQUIRE);
}

static void *save_thread(void)
{
    void *(*fn)(void) = (void *(*)(void))original(SAVE_THREAD);
    void *ts = fn ? fn() : NULL;
    tls_released = (uintptr_t)ts;
    return ts;
}

static void restore_thread(void *ts)
{
    tls_released = 0;
    void (*fn)(void *) = (void (*)(void *))original(RESTORE_THREAD);
    if (fn) fn(ts);
}

static void acquire_thread(void *ts)
{
    tls_released = 0;
    void (*fn)(void *) = (void (*)(void *))original(ACQUIRE_THREAD);
    if (fn) fn(ts);
}

static void acquire_lock(void)
{
    tls_released = 0;
    void (*fn)(void) = (void (*)(void))original(ACQUIRE_LOCK);
    if (fn) fn();
}

static int gilstate_ensure(void)
{
    tls_released = 0;
    int (*fn)(void) = (int (*)(void))original(GILSTATE_ENSURE);
    return fn ? fn() : 0;
}

static void *threadstate_swap(void *ts)
{
    tls_released = 0;
    void *(*fn)(void *) = (void *(*)(void *))original(THREADSTATE_SWAP);
    return fn ? fn(ts) : NULL;
}

int mt_pyrelease_patch(char *conflict, size_t len)
{
    if (conflict && len) conflict[0] = 0;
    pthread_mutex_lock(&patch_lock);
    if (!patcher) {
        hooks[SAVE_THREAD] = (mt_got_hook){.name = "PyEval_SaveThread", .hook = (void *)save_thread};
        hooks[RESTORE_THREAD] = (mt_got_hook){.name = "PyEval_RestoreThread",
                                              .hook = (void *)restore_thread};
        hooks[ACQUIRE_THREAD] = (mt_got_hook){.name = "PyEval_AcquireThread",
                                              .hook = (void *)acquire_thread};
        hooks[ACQUIRE_LOCK] = (mt_got_hook){.name = "PyEval_AcquireLock",
                                            .hook = (void *)acquire_lock};
        hooks[GILSTATE_ENSURE] = (mt_got_hook){.name = "PyGILState_Ensure",
                                               .hook = (void *)gilstate_ensure};
        hooks[THREADSTATE_SWAP] = (mt_got_hook){.name = "PyThreadState_Swap",
                                                .hook = (void *)threadstate_swap};
        patcher = mt_got_patcher_new(hooks, HOOK_COUNT);
    }
    int slots = patcher ? mt_got_patch_new(patcher, conflict, len) : -1;
    pthread_mutex_unlock(&patch_lock);
    return slots;
}

uintptr_t mt_pyrelease_state(void)
{
    return tls_released;
}
