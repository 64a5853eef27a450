/* Traces recorded on a real GPU (tests/data, see its README): the analysis must find in them what
 * the recorded programs are known to have done. Expected values come from the programs
 * (samples/alloc_patterns.c's fixed sizes) and from what PyTorch itself printed during the
 * recording (tests/data/<name>.out), never from memtrace's own output. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memtrace/compact.h"
#include "test_compact_fixture.h" /* fx_stack_has */
#include "testutil.h"

/* mt_frames_path options: every frame, short or long names */
static const mt_path_opts long_all = {.style = MT_NAME_LONG, .filter = MT_FRAMES_ALL};

#define MEMTRACE MT_TEST_BIN_DIR "/src/cli/memtrace"
#define MiB (1024ull * 1024ull)

static mt_analysis *analyze(const char *name)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s", MT_TEST_DATA_DIR, name);
    mt_analysis *a = NULL;
    cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "%s", err);
    cr_assert(!a->truncated && a->ended_cleanly, "%s: recorded to a clean end", name);
    return a;
}

/* A number PyTorch printed during the recording ("key=value" in tests/data/<name>.out). */
static uint64_t printed(const char *name, const char *key)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.out", MT_TEST_DATA_DIR, name);
    size_t n;
    char *text = (char *)mt_test_slurp(path, &n);
    cr_assert_not_null(text, "%s", path);
    char pat[64];
    snprintf(pat, sizeof pat, "%s=", key);
    char *p = strstr(text, pat);
    cr_assert_not_null(p, "%s has no %s", path, key);
    uint64_t v = strtoull(p + strlen(pat), NULL, 0);
    free(text);
    return v;
}

/* Does any frame of the stack (report names) contain `needle`? */
static int stack_has(mt_analysis *a, uint32_t leaf, const char *needle)
{
    const char *names[256];
    size_t n = mt_frames_path(a->frames, leaf, long_all, names, 256);
    for (size_t i = 0; i < n && i < 256; i++)
        if (strstr(names[i], needle)) return 1;
    return 0;
}

static const mt_device_report *device0(mt_analysis *a)
{
    for (size_t i = 0; i < a->n_devices; i++)
        if (a->devices[i].u.device == 0 && !a->devices[i].u.is_host) return &a->devices[i];
    cr_assert_fail("no cuda:0 in %s", a->path);
    return NULL;
}

Test(fixtures, alloc_patterns_peak_oom_leak_and_names)
{
    mt_analysis *a = analyze("alloc_patterns.mtrace");
    const mt_device_report *d = device0(a);
    /* API peak: the 3 MiB buffer (freed last) plus the 8 MiB allocation from the explicit pool;
     * everything else is smaller or freed before */
    cr_expect_eq(d->u.api_peak, 11 * MiB);
    cr_expect_geq(d->u.peak, d->u.api_peak);
    int pool_at_peak = 0;
    for (size_t i = 0; i < d->peak_stacks.n; i++)
        pool_at_peak |= !d->peak_stacks.v[i].driver &&
                        stack_has(a, d->peak_stacks.v[i].stack, "alloc_from_pool (alloc_patterns.c:");
    /* every driver record of this program duplicates an API call (deduplicated by correlation
     * id), so the device peak is the API peak, and the pool allocation is named at it */
    cr_expect_eq(d->u.peak, d->u.api_peak);
    cr_expect(pool_at_peak, "alloc_from_pool (alloc_patterns.c:LINE) live at the peak");

    cr_assert_eq(a->failed_total, 1, "one deliberate OOM");
    cr_expect_eq(a->failed[0].bytes, 1ull << 50);
    cr_expect_eq(a->failed[0].result, 2, "CUDA_ERROR_OUT_OF_MEMORY");
    cr_expect(stack_has(a, a->failed[0].stack, "request_too_much (alloc_patterns.c:"));
    cr_expect_eq(a->failed[0].in_use, 3 * MiB, "only the 3 MiB buffer was live then");

    cr_expect_eq(d->leak_bytes, 5 * MiB, "the deliberate leak (the 6 MiB died with its context)");
    cr_assert_geq(d->leaks.n, 1);
    cr_expect(stack_has(a, d->leaks.v[0].stack, "leak_on_purpose (alloc_patterns.c:"));
    cr_expect_geq(a->anomalies.ctx_destroy_released, 1, "the destroyed context released 6 MiB");
    cr_assert_not_null(a->host, "pinned and registered host memory");
    cr_expect_eq(a->host->u.peak, 256 * 1024, "256 KiB registered > 64+128 KiB pinned");
    mt_analysis_free(a);
}

Test(fixtures, cifar_default_allocator_segments_equal_max_memory_reserved)
{
    mt_analysis *a = analyze("cifar_default.mtrace");
    const mt_device_report *d = device0(a);
    /* the recorder flags the caching allocator's segments: their peak is what torch reported */
    uint64_t want = printed("cifar_default", "max_memory_reserved");
    cr_expect_eq(d->u.segment_peak, want);
    cr_expect_eq(d->at_peak.caching_bytes, want);
    cr_expect_eq(d->u.by_kind_peak[MT_KIND_TENSOR], 0, "no tensors without --tensors");
    /* demangled libtorch/c10 names, no raw mangled symbols */
    int c10 = 0, mangled = 0;
    for (size_t i = 0; i < d->peak_stacks.n; i++) {
        const char *names[256];
        size_t n = mt_frames_path(a->frames, d->peak_stacks.v[i].stack, long_all, names, 256);
        for (size_t k = 0; k < n && k < 256; k++) {
            c10 |= strstr(names[k], "c10::cuda::CUDACachingAllocator") != NULL;
            mangled |= strncmp(names[k], "_Z", 2) == 0;
        }
    }
    cr_expect(c10, "c10::cuda::CUDACachingAllocator frames, demangled");
    cr_expect(!mangled, "no mangled names");
    mt_analysis_free(a);
}

/* record --tensors: the allocator unchanged, its tensors reported; both of PyTorch's peaks exact */
Test(fixtures, cifar_tensor_mode_peaks_equal_torchs_own)
{
    const char *runs[] = {"cifar_tensors", "cifar_tensors_b512"};
    for (size_t i = 0; i < 2; i++) {
        char file[64];
        snprintf(file, sizeof file, "%s.mtrace", runs[i]);
        mt_analysis *a = analyze(file);
        const mt_device_report *d = device0(a);
        uint64_t allocated = printed(runs[i], "max_memory_allocated");
        cr_expect_eq(d->u.by_kind_peak[MT_KIND_TENSOR], allocated, "%s: tensor peak", runs[i]);
        cr_expect_eq(d->u.tensor_counter_peak, allocated, "%s: the allocator's own counter",
                     runs[i]);
        cr_expect_eq(d->u.segment_peak, printed(runs[i], "max_memory_reserved"), "%s: segments",
                     runs[i]);
        cr_expect(d->at_peak.allocated_known, "tensors inside the reservation are known");
        cr_expect_eq(a->anomalies.unmatched_frees + a->anomalies.double_frees +
                         a->anomalies.replaced + a->anomalies.unknown_device, 0, "%s", runs[i]);
        mt_analysis_free(a);
    }
}

/* record --tensors=async (backend:cudaMallocAsync), as recorded by an earlier release */
Test(fixtures, cifar_async_tensor_mode_peak_equals_max_memory_allocated)
{
    mt_analysis *a = analyze("cifar_tensors_async.mtrace");
    const mt_device_report *d = device0(a);
    uint64_t want = printed("cifar_tensors_async", "max_memory_allocated");
    cr_expect_eq(d->u.by_kind_peak[MT_KIND_ASYNC], want);
    cr_expect(d->u.has_pool_info, "pool reservations recorded");
    cr_expect_eq(d->u.pool_reserved_peak, printed("cifar_tensors_async", "max_memory_reserved"));
    mt_analysis_free(a);
}

/* A DDP job recorded with --tensors on 2 H200s (samples/ddp.py under torchrun): each rank's trace
 * against that rank's own PyTorch numbers, and the rank table over both. */
/* The number at `subscript` (Python, e.g. ["devices"]["0"]["max_allocated"]) in a .stats.json
 * beside a fixture: what PyTorch or the library itself said on the GPU. */
static uint64_t json_number(const char *json_name, const char *subscript)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))%s)' %s/%s",
             subscript, MT_TEST_DATA_DIR, json_name);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    unsigned long long v = 0;
    cr_assert_eq(fscanf(p, "%llu", &v), 1, "%s", cmd);
    pclose(p);
    return v;
}

/* A device's number in a PyTorch sample's .stats.json. */
static uint64_t stat_of(const char *json_name, int device, const char *key)
{
    char sub[128];
    snprintf(sub, sizeof sub, "[\"devices\"][\"%d\"][\"%s\"]", device, key);
    return json_number(json_name, sub);
}

Test(fixtures, ddp_ranks_each_exact_and_the_rank_table)
{
    mt_rank_summary sums[2];
    for (int r = 0; r < 2; r++) {
        char name[64], stats[64];
        snprintf(name, sizeof name, "ddp_rank%d.mtrace", r);
        snprintf(stats, sizeof stats, "ddp_rank%d.stats.json", r);
        mt_analysis *a = analyze(name);
        cr_assert(a->header.flags & MT_HDR_RANK);
        cr_expect_eq(a->header.rank, r);
        cr_expect_eq(a->header.world_size, 2);
        const mt_device_report *d = NULL;
        for (size_t i = 0; i < a->n_devices; i++)
            if (a->devices[i].u.device == r) d = &a->devices[i];
        cr_assert(d, "rank %d's GPU is cuda:%d", r, r);
        cr_expect_eq(d->u.by_kind_peak[MT_KIND_TENSOR], stat_of(stats, r, "max_allocated"),
                     "rank %d tensor peak", r);
        cr_expect_eq(d->u.segment_peak, stat_of(stats, r, "max_reserved"), "rank %d segments", r);
        cr_expect_eq(a->anomalies.unmatched_frees + a->anomalies.double_frees +
                         a->anomalies.replaced + a->anomalies.unknown_device, 0,
                     "rank %d: NCCL's retained and imported VMM handles are no anomaly", r);
        cr_expect_gt(a->anomalies.retained, 0, "NCCL retains handles");
        /* its own context's static memory is on its GPU, and nothing else anywhere: CUPTI gives
         * that memory as device 0's (src/trace/contextless.h), NVML listed rank 1 on cuda:1 only */
        cr_expect_eq(a->n_devices, 1, "rank %d: %zu GPUs", r, a->n_devices);
        cr_expect(d->driver_at_peak > 600 * 1024 && !d->driver_guessed, "rank %d: %llu", r,
                  (unsigned long long)d->driver_at_peak);
        cr_assert_eq(mt_rank_summarize(a, &sums[r]), 0);
        /* the rank table's stacks at the peak: largest first, and not all of one size (so that
         * their order says something); together no more than the peak */
        const mt_rank_summary *s = &sums[r];
        cr_assert_gt(s->n_stacks, 1, "rank %d", r);
        uint64_t sum = 0;
        for (size_t i = 0; i < s->n_stacks; i++) {
            sum += s->stacks[i].bytes;
            if (i)
                cr_expect_geq(s->stacks[i - 1].bytes, s->stacks[i].bytes, "rank %d, stack %zu", r, i);
        }
        cr_expect_gt(s->stacks[0].bytes, s->stacks[s->n_stacks - 1].bytes, "rank %d", r);
        cr_expect_leq(sum, s->peak, "rank %d", r);
        mt_analysis_free(a);
    }
    mt_imbalance im;
    cr_assert_eq(mt_rank_imbalance(sums, 2, &im), 0);
    /* rank 1 trains on a larger batch: PyTorch's own peak says it is the larger */
    int want = stat_of("ddp_rank1.stats.json", 1, "max_allocated") >
               stat_of("ddp_rank0.stats.json", 0, "max_allocated");
    cr_expect_eq(sums[im.max].rank, want, "the rank table's largest rank");
    for (int r = 0; r < 2; r++) mt_rank_summary_free(&sums[r]);
}

/* A top-level number of a .stats.json beside a fixture (what the library itself said). */
static uint64_t top_stat(const char *json_name, const char *key)
{
    char sub[128];
    snprintf(sub, sizeof sub, "[\"%s\"]", key);
    return json_number(json_name, sub);
}

/* JAX with XLA's platform allocator (samples/jax_train.py, XLA_PYTHON_CLIENT_ALLOCATOR=platform,
 * an H200): what the report advises where XLA's BFC region hides the arrays. No BFC region; each
 * array is an allocation of its own with the Python line that made it: the MLP's weights and
 * biases under init() at the peak are its parameters, each rounded up to the driver's 2 MiB
 * granularity (the run's own numbers). XLA's stacks without Python are named by what asked
 * (autotuning's inputs, an executable's transient buffers), never by XLA's device-memory layer. */
Test(fixtures, jax_platform_allocator_shows_every_array)
{
    mt_analysis *a = analyze("jax_platform.mtrace");
    const mt_device_report *d = device0(a);
    cr_expect_null(d->at_peak.cache_owner, "no allocator reservation: %s",
                   d->at_peak.cache_owner ? d->at_peak.cache_owner : "");
    uint64_t params = top_stat("jax_platform.stats.json", "param_bytes");
    uint64_t arrays = top_stat("jax_platform.stats.json", "param_arrays");
    uint64_t under_init = 0;
    for (size_t k = 0; k < d->peak_stacks.n; k++) {
        uint32_t stack = d->peak_stacks.v[k].stack;
        if (fx_stack_has(a->frames, stack, "init (samples/jax_train.py:"))
            under_init += d->peak_stacks.v[k].bytes;
        const char *who = mt_frames_first_user(a->frames, stack, MT_NAME_SHORT);
        cr_expect(strncmp(who, "stream_executor::", 17) != 0, "named by XLA's layer: %s", who);
    }
    cr_expect(params > 0 && under_init >= params && under_init <= params + arrays * (2u << 20),
              "under init() %llu, parameters %llu in %llu arrays", (unsigned long long)under_init,
              (unsigned long long)params, (unsigned long long)arrays);
    mt_analysis_free(a);
}

/* Memory another library's allocator keeps (samples/holders.py on an H100: CuPy 14.2's pool at
 * exit, JAX 0.11.2's preallocated BFC region at the peak) is named after that allocator, to the
 * byte of what the library itself reports, and is neither a leak nor PyTorch's. */
Test(fixtures, other_allocators_caches_named_not_leaks)
{
    mt_analysis *a = analyze("cupy_pool.mtrace");
    const mt_device_report *d = device0(a);
    uint64_t pool = top_stat("cupy_pool.stats.json", "pool_total_bytes");
    int found = 0;
    for (size_t i = 0; i < d->n_end_holders; i++)
        if (strcmp(d->end_holders[i].holder, MT_OWNER_CUPY_POOL) == 0) {
            found = 1;
            cr_expect_eq(d->end_holders[i].kind, MT_HOLD_CACHE);
            cr_expect_eq(d->end_holders[i].bytes, pool, "CuPy's pool holds %llu B",
                         (unsigned long long)pool);
        }
    cr_expect(found, "the CuPy pool is a holder at exit");
    cr_expect_eq(d->leak_bytes, 0);
    cr_expect_str_eq(d->at_peak.cache_owner ? d->at_peak.cache_owner : "", MT_OWNER_CUPY_POOL);
    cr_expect_eq(d->at_peak.torch_bytes, 0);
    mt_analysis_free(a);

    a = analyze("jax_prealloc.mtrace");
    d = device0(a);
    cr_expect_str_eq(d->at_peak.cache_owner ? d->at_peak.cache_owner : "", MT_OWNER_XLA_ALLOCATOR);
    cr_expect_eq(d->at_peak.caching_bytes, top_stat("jax_prealloc.stats.json", "pool_bytes"),
                 "XLA's preallocation = memory_stats()['pool_bytes']");
    cr_expect_eq(d->at_peak.torch_bytes, 0);
    cr_expect_eq(d->leak_bytes, 0);
    mt_analysis_free(a);

    /* and the report says whose, without PyTorch's advice */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s report %s/jax_prealloc.mtrace %s/cupy_pool.mtrace",
             MT_TEST_BIN_DIR "/src/cli/memtrace", MT_TEST_DATA_DIR, MT_TEST_DATA_DIR);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[1024];
    int xla = 0, cupy = 0, torch_words = 0, platform = 0;
    while (fgets(line, sizeof line, p)) {
        xla += strstr(line, "allocator reserved") && strstr(line, MT_OWNER_XLA_ALLOCATOR);
        /* the way to see XLA's arrays: its platform allocator, without a change to the program */
        platform += strstr(line, "in use by arrays") && strstr(line, "XLA_PYTHON_CLIENT_ALLOCATOR=platform");
        cupy += strstr(line, "allocator reserved") && strstr(line, MT_OWNER_CUPY_POOL);
        torch_words += strstr(line, "--tensors") != NULL;
    }
    pclose(p);
    cr_expect_geq(xla, 1);
    cr_expect_geq(cupy, 1);
    cr_expect_eq(platform, 1, "JAX's run, at its peak (at its end XLA has let go), not CuPy's: %d", platform);
    cr_expect_eq(torch_words, 0, "no advice about PyTorch's tensor mode for JAX or CuPy");
}

/* PyTorch's pinned-memory allocator (CachingHostAllocator) keeps every pinned block it took until
 * exit: .item()'s 4-byte staging buffer in samples/cifar.py (H200, --tensors), which the report
 * called a leak of the program's before. It is that allocator's cache, named after it, at the end
 * and as the leaf of its stack; the cuDNN blocks beside it stay cuDNN's. */
Test(fixtures, pinned_blocks_are_pytorchs_cache_not_leaks)
{
    mt_analysis *a = analyze("cifar_tensors_h200.mtrace");
    const mt_device_report *h = a->host;
    cr_assert_not_null(h, "the trace has pinned host memory");
    int cached = 0, cudnn = 0;
    for (size_t i = 0; i < h->n_end_holders; i++) {
        const mt_end_holder *e = &h->end_holders[i];
        cr_expect_neq(e->kind, MT_HOLD_PROGRAM, "%s: %llu B called the program's", e->holder,
                      (unsigned long long)e->bytes);
        if (strcmp(e->holder, MT_OWNER_HOST_ALLOCATOR) == 0) {
            cached = 1;
            cr_expect_eq(e->kind, MT_HOLD_CACHE);
            cr_expect_eq(e->bytes, 4);
            cr_expect_eq(e->count, 1);
        }
        cudnn += strcmp(e->holder, "cuDNN") == 0 && e->kind == MT_HOLD_LIBRARY;
    }
    cr_expect(cached, "PyTorch's pinned-memory allocator holds a block at the end");
    cr_expect(cudnn, "cuDNN's pinned blocks stay cuDNN's");
    cr_expect_eq(h->leak_bytes, 0);
    cr_expect_eq(h->leaks.n, 0);
    /* the block's stack: .item() above the allocator, which names it */
    int found = 0;
    for (size_t k = 0; k < h->live_end.n; k++) {
        uint32_t leaf = h->live_end.v[k].stack;
        if (!stack_has(a, leaf, "CachingHostAllocator")) continue;
        found = 1;
        cr_expect(stack_has(a, leaf, "_local_scalar_dense"), "the block is .item()'s");
        int alloc = 0;
        cr_expect_str_eq(mt_frames_owner(a->frames, leaf, &alloc), MT_OWNER_HOST_ALLOCATOR);
        cr_expect(alloc, "an allocator");
    }
    cr_expect(found);
    mt_analysis_free(a);
}

/* dump and report read every fixture, and refuse or partially read cut copies without crashing */
static int run(const char *cmd)
{
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s died", cmd);
    return WEXITSTATUS(st);
}

/* `memtrace ARGS tests/data/TRACE | PIPE` succeeds (the pipeline's last command says so). */
static void expect_pipeline(const char *args, const char *trace, const char *pipe, const char *why)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, MEMTRACE " %s %s/%s | %s", args, MT_TEST_DATA_DIR, trace, pipe);
    cr_expect_eq(run(cmd), 0, "%s: %s", why, cmd);
}

Test(fixtures, dump_reads_every_fixture_and_survives_cut_copies)
{
    glob_t g;
    char pat[1024];
    snprintf(pat, sizeof pat, "%s/*.mtrace", MT_TEST_DATA_DIR);
    cr_assert_eq(glob(pat, 0, NULL, &g), 0);
    cr_assert_geq(g.gl_pathc, 3);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, MEMTRACE " dump %s > /dev/null", g.gl_pathv[i]);
        cr_expect_eq(run(cmd), 0, "%s", cmd);
        size_t len;
        uint8_t *data = mt_test_slurp(g.gl_pathv[i], &len);
        cr_assert_not_null(data);
        const size_t cuts[] = {0, 10, 63, 64, 70, len / 3, len / 2, len - 100, len - 1};
        for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
            char cut[512];
            mt_test_tmpname(cut, sizeof cut, "cut.mtrace");
            cr_assert_eq(mt_test_spit(cut, data, cuts[k]), 0);
            snprintf(cmd, sizeof cmd, MEMTRACE " dump %s > /dev/null 2>&1", cut);
            int status = run(cmd);
            /* a cut header is refused (2); anything after it reads up to the last whole chunk */
            cr_expect_eq(status, cuts[k] < 64 ? 2 : 0, "dump of %s cut at %zu", g.gl_pathv[i],
                         cuts[k]);
            snprintf(cmd, sizeof cmd, MEMTRACE " report %s > /dev/null 2>&1", cut);
            status = run(cmd);
            cr_expect(status == 0 || status == 2, "report of a cut copy: %d", status);
            unlink(cut);
        }
        free(data);
    }
    globfree(&g);
}

/* PyTorch's async backend, a backward pass (samples/autograd_python.py under
 * backend:cudaMallocAsync, H200): autograd's worker makes its first cudaMallocAsync with no current
 * context; the runtime's cuMemAllocAsync fails with CUDA_ERROR_INVALID_CONTEXT and succeeds when
 * the runtime calls it again in the same call. The program saw no error: no failed request. */
Test(fixtures, async_backend_first_worker_allocation_is_no_failure)
{
    mt_analysis *a = analyze("async_backward.mtrace");
    cr_expect_eq(a->failed_total, 0);
    cr_expect_eq(a->n_failed, 0);
    cr_expect_eq(a->failed_retried, 1);
    for (size_t i = 0; i < a->n_devices; i++)
        cr_expect_eq(a->devices[i].u.failed_count, 0);
    mt_analysis_free(a);
}

/* samples/host_memory.c on an H200: 32 MiB of cuMemCreate and 16 MiB of cuMemAllocAsync on the
 * device; 64 MiB of cuMemCreate on a host NUMA node (mapped for the GPU) and 32 MiB from a pool
 * on the host while it is held. The host's 96 MiB are the host's (the recorder gave them cuda:0
 * before), their releases (which name cuda:0) are found, and no unknown device appears. */
Test(fixtures, host_located_vmm_and_pool_memory_on_the_host)
{
    mt_analysis *a = analyze("host_memory.mtrace");
    const uint64_t MIB = 1u << 20;
    cr_assert_eq(a->n_devices, 1);
    const mt_device_report *d = &a->devices[0];
    cr_expect_eq(d->u.device, 0);
    cr_expect_eq(d->u.peak, 48 * MIB);
    cr_expect_eq(d->u.by_kind_peak[MT_KIND_VMM_PHYSICAL], 32 * MIB);
    cr_expect_eq(d->u.by_kind_peak[MT_KIND_ASYNC], 16 * MIB);
    cr_expect_eq(d->u.vmm_mapped_peak, 32 * MIB);
    cr_assert_not_null(a->host);
    cr_expect_eq(a->host->u.peak, 96 * MIB);
    cr_expect_eq(a->host->u.by_kind_peak[MT_KIND_VMM_PHYSICAL], 64 * MIB);
    cr_expect_eq(a->host->u.by_kind_peak[MT_KIND_ASYNC], 32 * MIB);
    cr_expect_eq(a->host->u.vmm_mapped_peak, 64 * MIB);
    cr_expect_eq(a->host->u.pool_reserved_peak, 32 * MIB);
    cr_expect_eq(a->host->u.in_use, 0);
    cr_expect_eq(d->u.in_use, 0);
    cr_expect_eq(a->anomalies.unmatched_frees, 0);
    cr_expect_eq(a->anomalies.unknown_device, 0);
    mt_analysis_free(a);
}

/* The spawned child of samples/ipc.py on an H200: it received its parent's 64 MiB CUDA tensor
 * through torch.multiprocessing (cudaIpcOpenMemHandle), allocated 8 MiB of its own (a 20 MiB
 * segment) and let the tensor go (cuIpcCloseMemHandle). The 64 MiB are the parent's: the child's
 * peak is its own allocator's, max_memory_reserved = 23068672 as the child printed it. (The
 * recorder before the fix left CUPTI's record of the mapping as a driver-internal allocation of
 * 64 MiB, and the child's peak read 86 MiB.) */
Test(fixtures, ipc_mapping_is_the_exporters_memory)
{
    mt_analysis *a = analyze("ipc_torch_child.mtrace");
    cr_assert_eq(a->n_devices, 1);
    const mt_device_report *d = &a->devices[0];
    cr_expect_eq(d->u.api_peak, 23068672);
    cr_expect_lt(d->u.peak, 23068672 + (64u << 10), "driver-internal bytes aside, nothing more");
    cr_expect_eq(d->u.imported_peak, 64u << 20, "the parent's tensor, said apart");
    cr_expect_eq(d->u.imported, 0, "closed when the tensor went");
    cr_expect_eq(a->anomalies.unmatched_frees + a->anomalies.double_frees, 0);
    mt_analysis_free(a);
    expect_pipeline("dump", "ipc_torch_child.mtrace",
                    "grep -c 'op=.* kind=device .*api=cuIpc.*MemHandle.* imported' | grep -qx 2",
                    "one mapping and its close");
    expect_pipeline("report", "ipc_torch_child.mtrace",
                    "grep -q '^  imported  *peak 64.00 MiB mapped from other processes "
                    "(cudaIpcOpenMemHandle), at end 0 B'",
                    "the text report says it apart");
}

/* cifar.py under `record --tensors=async` on an H200, which turns CUPTI's activity records off (its
 * note says so): no driver-internal allocation or CUDA array is in the trace, and the report says
 * "not recorded" where it said "0 B"; a trace recorded with them says "on". */
Test(fixtures, activity_records_off_are_said_not_zero)
{
    mt_analysis *a = analyze("cifar_tensors_async.mtrace");
    cr_expect_eq(a->activity, MT_ACTIVITY_OFF);
    mt_analysis_free(a);
    expect_pipeline("report", "cifar_tensors_async.mtrace",
                    "grep -c '^  driver-internal  not recorded, nor CUDA arrays: CUPTI.s activity "
                    "records, which report them, were off (record --activity off; the default "
                    "with --tensors=async)$' | grep -qx 1",
                    "the device's line");
    expect_pipeline("report", "cifar_tensors_async.mtrace",
                    "grep -c 'remainder; driver-internal seen by the trace: not recorded "
                    "(activity records off)$' | grep -qx 2",
                    "at the peak and at the end");
    expect_pipeline("report --json", "cifar_tensors_async.mtrace",
                    "grep -q '\"activity_records\":\"off\",'", "JSON");
    expect_pipeline("report --json", "cifar_tensors.mtrace",
                    "grep -q '\"activity_records\":\"on\",'", "JSON, recorded with them");
    expect_pipeline("report", "cifar_tensors.mtrace",
                    "grep -q '^  driver-internal  [0-9.]* [KMG]*i*B at the peak$'",
                    "bytes, recorded with them");
    expect_pipeline(
        "report --markdown", "cifar_tensors_async.mtrace",
        "grep -c 'the peaks leave out driver.*CUDA arrays: .*activity records were off' "
        "| grep -qx 1",
        "Markdown: a warning");
    expect_pipeline("report --markdown", "cifar_tensors.mtrace",
                    "grep -c 'activity records' | grep -qx 0",
                    "Markdown: none, recorded with them");
}

/* Two traces as a job: cifar.py --tensors and --tensors=async (H200). The rank table's tensor
 * column is max_memory_allocated for both (the async pools' live bytes for the second, which had
 * no tensor column before), and the line under it names the trace without activity records. */
Test(fixtures, rank_table_of_tensors_and_async)
{
    char dir[512], cmd[2048];
    mt_test_tmpname(dir, sizeof dir, "job");
    snprintf(cmd, sizeof cmd,
             "mkdir %1$s && cp %2$s/cifar_tensors.mtrace %2$s/cifar_tensors_async.mtrace %1$s/",
             dir, MT_TEST_DATA_DIR);
    cr_assert_eq(run(cmd), 0, "%s", cmd);
    uint64_t want[2] = {printed("cifar_tensors", "max_memory_allocated"),
                        printed("cifar_tensors_async", "max_memory_allocated")};
    snprintf(cmd, sizeof cmd,
             MEMTRACE
             " report --json %s | python3 -c 'import json,sys; "
             "r = json.load(sys.stdin)[\"rank_table\"][\"rows\"]; "
             "print(sorted((x[\"pid\"], x[\"tensors_peak_bytes\"], x[\"activity_records\"]) "
             "for x in r))' | grep -qx \"\\[(2083, %llu, .off.), (3583, %llu, .on.)\\]\"",
             dir, (unsigned long long)want[1], (unsigned long long)want[0]);
    cr_expect_eq(run(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd,
             MEMTRACE " report %s | grep -q '^  driver-internal allocations and CUDA arrays not "
                      "recorded: python3.2083. on vm; its peaks leave them out'",
             dir);
    cr_expect_eq(run(cmd), 0, "%s", cmd);
}

/* diff says what makes two runs' peaks count different things: tensors against the allocator's
 * segments, and a run without CUPTI's activity records (no driver-internal memory) against one
 * with them; tensors against cudaMallocAsync's pools (both max_memory_allocated) count alike. */
Test(fixtures, diff_notes_what_the_runs_count_differently)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             MEMTRACE " diff %1$s/cifar_tensors.mtrace %1$s/cifar_tensors_async.mtrace | "
                      "grep -c '^NOTE: ' | grep -qx 1",
             MT_TEST_DATA_DIR);
    cr_expect_eq(run(cmd), 0, "tensors against async: only the activity records' note: %s", cmd);
    snprintf(cmd, sizeof cmd,
             MEMTRACE " diff %1$s/cifar_tensors.mtrace %1$s/cifar_tensors_async.mtrace | grep -qx "
                      "'NOTE: the new run saw no driver-internal allocations or CUDA arrays "
                      "(CUPTI.s activity records off) and the base run did: their peaks differ "
                      "by those too'",
             MT_TEST_DATA_DIR);
    cr_expect_eq(run(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd,
             MEMTRACE
             " diff --markdown %1$s/cifar_tensors_async.mtrace %1$s/cifar_tensors.mtrace | "
             "grep -q '^> ⚠️ the base run saw no driver-internal allocations'",
             MT_TEST_DATA_DIR);
    cr_expect_eq(run(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd,
             MEMTRACE " diff %1$s/cifar_default.mtrace %1$s/cifar_tensors.mtrace | "
                      "grep -c '^NOTE: one run was recorded with tensors' | grep -qx 1",
             MT_TEST_DATA_DIR);
    cr_expect_eq(run(cmd), 0, "segments against tensors: %s", cmd);
}

/* samples/cuda_arrays.py (CuPy) on an H200: three 64 MiB CUDA arrays and a 16 MiB one, then a 2 TiB
 * one that the driver refuses. CUPTI reports arrays only in activity records (memory kind ARRAY);
 * the recorder before this one wrote them as driver-internal, so the peak's 208 MiB were "the
 * driver's" and the API peak 0. Now each is an array with its creating line's stack, and the
 * refusal a failed request of the bytes asked for. */
Test(fixtures, cuda_arrays_are_the_programs)
{
    mt_analysis *a = analyze("cuda_arrays.mtrace");
    cr_assert_eq(a->n_devices, 1);
    const mt_device_report *d = &a->devices[0];
    cr_expect_eq(d->u.api_peak, 218103808);
    cr_expect_eq(d->u.by_kind_peak[MT_KIND_ARRAY], 218103808);
    cr_expect_eq(d->driver_at_peak, 0);
    cr_expect_eq(a->anomalies.unmatched_frees, 0);
    cr_expect_eq(a->failed_total, 1);
    cr_assert_geq(a->n_failed, 1);
    cr_expect_eq(a->failed[0].kind, MT_KIND_ARRAY);
    cr_expect_eq(a->failed[0].bytes, 2199023255552ull, "16384 x 16384 x 2048 floats");
    cr_expect_eq(a->failed[0].result, 2, "CUDA_ERROR_OUT_OF_MEMORY");
    /* the breakdown names the line that made them, once */
    cr_assert_eq(d->at_peak.n_owners, 1);
    cr_expect_str_eq(d->at_peak.owners[0].owner, "make (samples/cuda_arrays.py:18)");
    cr_expect_eq(d->at_peak.owners[0].bytes, 218103808);
    mt_analysis_free(a);
}

/* samples/array_kinds.c on an H200: 3000 arrays of 16 KiB made in a row (the recorder before this
 * one kept the stacks of 256 until their activity records came: 2746 of 3012 arrays had none), a
 * mipmapped array (a record per level), the first versions of cuArrayCreate and cuArray3DCreate
 * (refused on CUDA 13: CUDA_ERROR_INVALID_CONTEXT), a 64 MiB array beside 128 MiB made by
 * cuMemCreate (the peak, 192 MiB, only if the array's records come in their place: the recorder
 * before wrote them at the end of the run, and the peak read 128 MiB), then the primary context
 * released. */
Test(fixtures, array_kinds_keep_their_stacks_and_their_place)
{
    mt_analysis *a = analyze("array_kinds.mtrace");
    const mt_device_report *d = device0(a);
    cr_expect_eq(d->u.peak, printed("array_kinds", "beside_peak"), "the array beside the VMM");
    cr_expect_eq(d->u.by_kind_peak[MT_KIND_ARRAY], 64 * MiB);
    cr_expect_eq(d->u.in_use, 0);
    cr_expect_eq(a->anomalies.unmatched_frees, 0);
    cr_expect_eq(a->anomalies.ctx_destroy_released, 0, "every array freed before the context");
    cr_assert_eq(d->at_peak.n_owners, 2);
    for (size_t i = 0; i < 2; i++)
        cr_expect_eq(strncmp(d->at_peak.owners[i].owner, "beside_vmm (array_kinds.c:", 26), 0, "%s",
                     d->at_peak.owners[i].owner);
    cr_expect_eq(a->failed_total, 3);
    cr_assert_geq(a->n_failed, 3);
    for (size_t i = 0; i < 3; i++) {
        cr_expect_eq(a->failed[i].kind, MT_KIND_ARRAY);
        cr_expect_eq(a->failed[i].result, 201, "CUDA_ERROR_INVALID_CONTEXT");
        /* every array was released before: none of their records still in a buffer */
        cr_expect_eq(a->failed[i].in_use, 0);
    }
    cr_expect_eq(a->failed[0].bytes, 512u * 512 * 4, "cuArrayCreate's 32-bit descriptor, read");
    cr_expect_eq(a->failed[1].bytes, 64u * 64 * 32 * 4, "cuArray3DCreate's");
    cr_expect_eq(a->failed[2].bytes, 16384ull * 16384 * 2048 * 4);
    cr_expect(stack_has(a, a->failed[0].stack, "v1_arrays (array_kinds.c:"));
    mt_analysis_free(a);
    /* every array allocation has its creating function's stack: the folded bytes ever allocated
     * under each function add up to all of them (244.21 MiB with the cuMemCreate) */
    expect_pipeline("export --format folded --metric alloc --frames all", "array_kinds.mtrace",
                    "awk '/;many_arrays \\(/ {m += $NF} /;mipmapped \\(/ {p += $NF} "
                    "/;beside_vmm \\(/ {b += $NF} {s += $NF} "
                    "END {exit !(m == 49152000 && p == 5592404 && b == 201326592 && "
                    "s == m + p + b)}'",
                    "arrays ever made, by function");
}

/* samples/device_reset.c on an H200: cudaDeviceReset while a 64 MiB cudaMalloc and a 16 MiB CUDA
 * array are live, then 32 MiB in a new context. The array's activity record is written before the
 * context's destruction (the recorder flushes CUPTI's buffers before it writes CTX_DESTROY), and
 * the driver's release of it, reported as the context is torn down, is no unmatched free. */
Test(fixtures, device_reset_ends_what_was_live)
{
    mt_analysis *a = analyze("device_reset.mtrace");
    const mt_device_report *d = device0(a);
    cr_expect_eq(d->u.peak, printed("device_reset", "ended_by_reset"));
    cr_expect_eq(d->u.by_kind_peak[MT_KIND_ARRAY], 16 * MiB);
    cr_expect_eq(d->u.in_use, 0);
    cr_expect_eq(a->anomalies.ctx_destroy_released, 2);
    cr_expect_eq(a->anomalies.unmatched_frees, 0);
    cr_expect_eq(a->anomalies.double_frees, 0);
    mt_analysis_free(a);
}

/* samples/cuda_ctypes.py: every allocation is made by one Python line, `alloc`, reached from
 * several callers. The breakdown lists that owner once (it listed it four times, one per frame
 * of that name). */
Test(fixtures, breakdown_owner_listed_once_per_name)
{
    mt_analysis *a = analyze("cuda_ctypes_py3.12.3.mtrace");
    const mt_breakdown *b = &a->devices[0].at_peak;
    cr_assert_eq(b->n_owners, 1);
    cr_expect_str_eq(b->owners[0].owner, "alloc (samples/cuda_ctypes.py:35)");
    cr_expect_eq(b->owners[0].bytes, 50u << 20);
    cr_expect_eq(b->owners[0].count, 12);
    mt_analysis_free(a);
}

/* Rank 0 of `NCCL_CUMEM_ENABLE=0 torchrun --nproc_per_node=2 samples/ddp.py` on 2 x H200: NCCL
 * maps its peer's buffers with cudaIpcOpenMemHandle (48 of them, 288 MiB) and closes them at
 * teardown. CUPTI reports no allocation for such a mapping of a peer GPU's memory but does report
 * its release, so the recorder before the fix left 48 driver-internal frees matching nothing
 * ("48 unmatched frees" on every rank). Now each mapping is an imported allocation, closed. */
Test(fixtures, nccl_legacy_ipc_peer_buffers_are_imported_and_closed)
{
    mt_analysis *a = analyze("ddp_ipc_rank0.mtrace");
    cr_expect_eq(a->anomalies.unmatched_frees + a->anomalies.double_frees, 0);
    cr_assert_eq(a->n_devices, 1);
    cr_expect_eq(a->devices[0].u.segment_peak, 853540864, "max_memory_reserved of rank 0");
    mt_analysis_free(a);
    expect_pipeline("dump", "ddp_ipc_rank0.mtrace",
                    "grep '^event .*kind=device .*imported' | "
                    "awk '/op=alloc .*api=cuIpcOpenMemHandle/ {n++; split($0, f, \" bytes=\"); "
                    "s += f[2] + 0} /op=free .*api=cuIpcCloseMemHandle/ {c++} "
                    "END {exit !(n == 48 && c == 48 && s == 301989888)}'",
                    "48 mappings of 288 MiB, 48 closes");
}

/* Rank 0 of `torchrun --nproc_per_node=2 samples/ddp.py --steps 5` on 2 x H200: NCCL (through
 * init_process_group) tries whether cuMem host allocations work with a 2 MiB cuMemCreate on a
 * host NUMA node (ncclCuMemHostEnable). That is the host's, not cuda:0's. */
Test(fixtures, nccl_host_cumem_probe_is_host_memory)
{
    mt_analysis *a = analyze("ddp_ncclhost_rank0.mtrace");
    cr_assert_not_null(a->host);
    cr_expect_eq(a->host->u.by_kind_peak[MT_KIND_VMM_PHYSICAL], 2u << 20);
    for (size_t i = 0; i < a->n_devices; i++)
        cr_expect_geq(a->devices[i].u.device, 0, "no unknown device");
    cr_expect_eq(a->anomalies.unmatched_frees, 0);
    mt_analysis_free(a);
    expect_pipeline("export --format folded --frames all --metric alloc --device host",
                    "ddp_ncclhost_rank0.mtrace", "grep -q 'ncclCuMemHostEnable.* 2097152$'",
                    "NCCL's probe on the host");
}

/* Expandable segments (samples/oom.py under expandable_segments:True, H200): the allocator's first
 * cuMemCreate asks for a fabric handle, which the machine refuses (CUDA_ERROR_NOT_PERMITTED); the
 * same 20 MiB with a POSIX descriptor succeeds at once. That is no failed request; the run's real
 * refusals (out of memory, at the end) stay, with the error they led to. */
Test(fixtures, expandable_segments_fabric_handle_refusal_is_no_failure)
{
    mt_analysis *a = analyze("oom_exp.mtrace");
    cr_expect_eq(a->failed_probes, 1);
    cr_expect_eq(a->failed_retried, 0);
    cr_assert_eq(a->n_failed, a->failed_total);
    cr_expect_geq(a->failed_total, 2, "the driver's refusals and the OutOfMemoryError");
    size_t raised = 0;
    for (size_t i = 0; i < a->n_failed; i++) {
        cr_expect_eq(a->failed[i].result, 2, "#%zu: CUDA_ERROR_OUT_OF_MEMORY", i);
        raised += a->failed[i].kind == MT_KIND_TENSOR;
    }
    cr_expect_eq(raised, 1);
    cr_assert_eq(a->n_devices, 1);
    cr_expect_eq(a->devices[0].u.failed_count, a->failed_total, "the probe not counted on cuda:0");
    mt_analysis_free(a);
}

/* samples/context_memory.py on 2 x H200: a context on cuda:0, then one on cuda:1; each loads the
 * same modules, so each GPU has the same static memory (288 records of CUPTI's, all "device 0"),
 * and cuda:1's is said to be placed by when it came. On cuda:1 alone, nothing is on cuda:0. */
Test(fixtures, each_context_static_memory_on_its_own_gpu)
{
    mt_analysis *a = analyze("contexts_two_gpus.mtrace");
    cr_assert_eq(a->n_devices, 2);
    const mt_device_report *d0 = &a->devices[0], *d1 = &a->devices[1]; /* in ordinal order */
    cr_assert(d0->u.device == 0 && d1->u.device == 1);
    cr_expect(d0->driver_at_peak > 200 * 1024 && d0->driver_at_peak == d1->driver_at_peak,
              "%llu %llu", (unsigned long long)d0->driver_at_peak,
              (unsigned long long)d1->driver_at_peak);
    cr_expect_eq(d0->driver_guessed, 0);
    cr_expect_eq(d1->driver_guessed, d1->driver_at_peak);
    cr_expect_eq(a->anomalies.unknown_device, 0);
    mt_analysis_free(a);
    a = analyze("contexts_gpu1.mtrace");
    cr_assert_eq(a->n_devices, 1);
    cr_expect_eq(a->devices[0].u.device, 1);
    cr_expect_gt(a->devices[0].driver_at_peak, 200 * 1024);
    cr_expect_eq(a->devices[0].driver_guessed, 0);
    mt_analysis_free(a);
}
