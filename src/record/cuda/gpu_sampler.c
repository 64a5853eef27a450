/* The fourth number: GPU memory of this process as nvidia-smi sees it, sampled every 50 ms
 * (MEMTRACE_NVML_MS sets another period).
 *
 * nvidia-smi reads NVML; so do we, loaded at run time (libnvidia-ml.so.1 comes with the driver; no
 * header or link dependency: the few types used are declared below, they are NVML's stable ABI).
 * Each CUDA device is matched to its NVML handle by PCI bus id, so CUDA_VISIBLE_DEVICES renumbering
 * cannot mix them up. Samples are written only when a value changes (MT_REC_SAMPLE):
 *   MT_COUNTER_NVML_PROCESS_BYTES  this pid's usedGpuMemory on the device (what nvidia-smi lists)
 *   MT_COUNTER_DEVICE_USED_BYTES   the whole device's used memory (all processes)
 * When NVML is missing or does not list this pid (some containers), only the device-wide counter
 * is written, and the trace says so once.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "recorder.h"

#define PROC_LISTED_WITHIN_MS 5000 /* NVML lists a process by then, or never will */
#define MAX_DEVICES 64
#define MAX_PROCS 256

typedef void *nvml_device;
typedef struct {
    unsigned int pid;
    unsigned long long used; /* usedGpuMemory */
    unsigned int gpu_instance, compute_instance;
} nvml_process; /* nvmlProcessInfo_t (v2 layout, used by *_v3) */
typedef struct {
    unsigned long long total, free, used;
} nvml_memory; /* nvmlMemory_t */

struct mt_gpu_sampler {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*by_bus_id)(const char *, nvml_device *);
    int (*processes)(nvml_device, unsigned int *, nvml_process *);
    int (*memory)(nvml_device, nvml_memory *);
    int ndev;
    int32_t ordinal[MAX_DEVICES];
    nvml_device dev[MAX_DEVICES];
    uint64_t last_proc[MAX_DEVICES], last_used[MAX_DEVICES];
    int proc_seen;
    nvml_process procs[MAX_PROCS]; /* scratch for sample_once (sampler thread, then stop) */
    pthread_t thread;
    _Atomic int stop;
    mt_recorder *r;
};

static void emit(mt_recorder *r, int32_t device, uint16_t counter, uint64_t value)
{
    mt_record rec = {.type = MT_REC_SAMPLE};
    rec.u.sample = (mt_sample){.time_ns = mt_now_ns(), .device = device, .counter = counter,
                               .value = value};
    mt_sink_put_copy(r->sink, &rec);
}

static void sample_once(mt_gpu_sampler *g)
{
    nvml_process *procs = g->procs;
    pid_t self = getpid();
    for (int i = 0; i < g->ndev; i++) {
        unsigned int n = MAX_PROCS;
        if (g->processes(g->dev[i], &n, procs) == 0) {
            uint64_t mine = 0;
            for (unsigned int k = 0; k < n && k < MAX_PROCS; k++)
                if ((pid_t)procs[k].pid == self) {
                    mine = procs[k].used;
                    g->proc_seen = 1;
                }
            if (mine != g->last_proc[i]) {
                g->last_proc[i] = mine;
                emit(g->r, g->ordinal[i], MT_COUNTER_NVML_PROCESS_BYTES, mine);
            }
        }
        nvml_memory m;
        if (g->memory(g->dev[i], &m) == 0 && m.used != g->last_used[i]) {
            g->last_used[i] = m.used;
            emit(g->r, g->ordinal[i], MT_COUNTER_DEVICE_USED_BYTES, m.used);
        }
    }
}

/* CUDA ordinal -> NVML handle, by PCI bus id. Runs on the sampler thread: InitializeInjection is
 * called from inside cuInit, where cuDeviceGetCount still answers "not initialized". */
static int map_devices(mt_gpu_sampler *g)
{
    int count = 0;
    if (g->r->cuda.DeviceGetCount(&count) != CUDA_SUCCESS) return -1;
    for (int i = 0; i < count && g->ndev < MAX_DEVICES; i++) {
        CUdevice d;
        char bus[64];
        if (g->r->cuda.DeviceGet(&d, i) != CUDA_SUCCESS ||
            g->r->cuda.DeviceGetPCIBusId(bus, sizeof bus, d) != CUDA_SUCCESS)
            continue;
        if (g->by_bus_id(bus, &g->dev[g->ndev]) == 0) g->ordinal[g->ndev++] = i;
    }
    return 0;
}

static void *sampler_main(void *arg)
{
    mt_gpu_sampler *g = arg;
    int rounds = 0, mapped = 0;
    uint32_t ms = g->r->cfg.nvml_ms; /* between rounds */
    while (!atomic_load(&g->stop)) {
        if (!mapped && map_devices(g) == 0) {
            mapped = 1;
            if (g->ndev == 0) {
                mt_trace_note(MT_NOTE_WARNING, "NVML knows none of the CUDA devices (by PCI bus "
                                               "id): no nvidia-smi view of this process");
                break;
            }
        }
        /* paused by the program: no samples either, like the events (memtrace_set_paused) */
        if (mapped && !atomic_load_explicit(&g->r->paused, memory_order_relaxed)) {
            /* timed, for the cost notes: NVML asks the kernel driver, which the program's own
             * CUDA calls may wait for */
            uint64_t t0 = mt_now_ns();
            sample_once(g);
            uint64_t ns = mt_now_ns() - t0;
            atomic_fetch_add_explicit(&g->r->costs.nvml_samples, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&g->r->costs.nvml_ns, ns, memory_order_relaxed);
            if (ns > atomic_load_explicit(&g->r->costs.nvml_max_ns, memory_order_relaxed))
                atomic_store_explicit(&g->r->costs.nvml_max_ns, ns, memory_order_relaxed);
            /* counted in rounds taken, so that a pause does not look like NVML not listing us */
            if (++rounds == (int)((PROC_LISTED_WITHIN_MS + ms - 1) / ms) && !g->proc_seen)
                mt_trace_note(MT_NOTE_WARNING, "NVML does not list this process (pid namespace?): "
                                               "only device-wide used memory is sampled");
        }
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

#define LOAD(field, name)                                                                        \
    do {                                                                                         \
        *(void **)&g->field = dlsym(g->lib, name);                                               \
        if (!g->field) {                                                                         \
            why = "libnvidia-ml lacks " name;                                                    \
            goto fail;                                                                           \
        }                                                                                        \
    } while (0)

mt_gpu_sampler *mt_gpu_sampler_start(mt_recorder *r)
{
    mt_gpu_sampler *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->r = r;
    const char *why = "libnvidia-ml.so.1 not found";
    g->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g->lib) goto fail;
    LOAD(init, "nvmlInit_v2");
    LOAD(shutdown, "nvmlShutdown");
    LOAD(by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    LOAD(processes, "nvmlDeviceGetComputeRunningProcesses_v3");
    LOAD(memory, "nvmlDeviceGetMemoryInfo");
    why = "nvmlInit failed";
    if (g->init() != 0) goto fail;
    why = "cannot start a thread";
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&g->thread, NULL, sampler_main, g);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) goto fail;
    pthread_setname_np(g->thread, "memtrace-nvml");
    return g;
fail:
    mt_trace_note(MT_NOTE_WARNING, "NVML unavailable (%s): no nvidia-smi view of this process",
                  why);
    if (g->lib) dlclose(g->lib);
    free(g);
    return NULL;
}

void mt_gpu_sampler_stop(mt_gpu_sampler *g)
{
    if (!g) return;
    atomic_store(&g->stop, 1);
    pthread_join(g->thread, NULL);
    sample_once(g); /* the value at exit */
    g->shutdown();
    /* the library stays loaded: NVML's own threads may still be winding down */
    free(g);
}
