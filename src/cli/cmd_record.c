/* memtrace record: run a program with the recorder injected, then symbolize and summarize.
 *
 *   memtrace record [options] -- CMD [ARGS...]       (options: see usage() below)
 *
 * The recorder (libmemtrace_inject.so) is named by CUDA_INJECTION64_PATH, so every process of the
 * command that makes a CUDA context — the command itself, torchrun ranks, multiprocessing spawn
 * workers — records into its own file (one that only initializes CUDA, like torchrun's launcher,
 * writes none and is listed as skipped). `record` itself only prepares the environment, waits,
 * and reports; it returns the command's exit status (a death by signal N as 128+N).
 *
 * Before the command starts: the output pattern always names the process (%p, or %r with %h: a
 * rank on its host; record_output.c) and its directory must exist and be writable (exit 2
 * otherwise). After it exits: `record` waits for every traced process that outlived it to close
 * its trace (record_wait.c), then symbolizes.
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "record_summary.h"

static void usage(FILE *out)
{
    fputs(
        "usage: memtrace record [options] -- CMD [ARGS...]\n\n"
        "Runs CMD unchanged and writes, for every process of it that initializes CUDA, one trace of\n"
        "every GPU memory event with its call stack. Returns CMD's exit status.\n\n"
        "options:\n"
        "  -o, --output PATTERN\n"
        "                    trace file name; %p = pid, %r = rank (from RANK, SLURM_PROCID,\n"
        "                    OMPI_COMM_WORLD_RANK or PMI_RANK; the pid in a process without\n"
        "                    one), %c = command name, %h = host name, %% = %\n"
        "                    (default: memtrace.%c.%h.%p.mtrace in the current directory);\n"
        "                    every process writes its own file, so a PATTERN with neither %p\n"
        "                    nor %r gets .%p before its extension (-o run.mtrace:\n"
        "                    run.<pid>.mtrace). A job's ranks: -o DIR/run.%h.rank%r.mtrace\n"
        "                    (docs/ranks.md). The directory must exist and be writable\n"
        "                    (checked before CMD starts)\n"
        "  -f, --force       replace existing trace files (default: never overwrite)\n"
        "  --stacks MODE     both (default: native frames; in a Python program the native\n"
        "                    frames below the innermost Python frame, then the Python frames),\n"
        "                    full (both, plus the C frames between Python frames),\n"
        "                    python (Python frames only: cheapest), native, or none\n"
        "  --tensors, --tensors=reports\n"
        "                    PyTorch: record every tensor (each block the caching allocator\n"
        "                    hands out, with its stack), from the allocator's own reports;\n"
        "                    the allocator and its settings stay as they are (CUDA graphs,\n"
        "                    torch.compile mode=\"reduce-overhead\", expandable segments all\n"
        "                    work). The peak is then the tensors' (max_memory_allocated) plus\n"
        "                    other libraries; PyTorch's segments are its reservation.\n"
        "  --tensors=async   the older way: switch PyTorch to backend:cudaMallocAsync (merged\n"
        "                    into PYTORCH_CUDA_ALLOC_CONF), every tensor a driver allocation.\n"
        "                    CUDA graph trees refuse to run under it; see docs/tensor-mode.md\n"
        "  --activity on|off CUPTI activity records: driver-internal allocations nobody asked\n"
        "                    for, and CUDA arrays, which only they report (default on; with\n"
        "                    --tensors=async off: there they cost more than the rest of the\n"
        "                    recording, measured on cifar.py)\n"
        "  --no-preload      do not preload the recorder (LD_PRELOAD): a CUPTI client the\n"
        "                    program starts (torch.profiler) then cannot get CUPTI while\n"
        "                    memtrace holds it; with the preload (default) both share it\n"
        "  --no-symbolize    skip resolving native frames at the end (do it later with\n"
        "                    `memtrace symbolize`, on this machine)\n"
        "  -q, --quiet       print nothing but errors\n"
        "  -h, --help        this text\n\n"
        "After CMD exits, record waits for every traced process that outlived it (a background\n"
        "worker) to close its trace before symbolizing; Ctrl-C stops that wait, and traces still\n"
        "being written are left for `memtrace symbolize`. Then, per trace, what it holds and\n"
        "what to run next; for several (a job's ranks), how to read them side by side, which\n"
        "rank raised torch.OutOfMemoryError or was killed, and which held memory on another\n"
        "rank's GPU.\n\n"
        "environment: MEMTRACE_CUPTI=/path/libcupti.so.13 overrides where CUPTI is found;\n"
        "MEMTRACE_INJECT=/path/libmemtrace_inject.so overrides the recorder library;\n"
        "MEMTRACE_CLOCK=monotonic stamps events with clock_gettime(CLOCK_MONOTONIC) instead of\n"
        "the CPU's time-stamp counter mapped to it (the trace's notes say which was used).\n",
        out);
}

/* PYTORCH_CUDA_ALLOC_CONF for tensor mode: the user's options, any "backend:..." replaced by
 * backend:cudaMallocAsync (options are comma-separated key:value pairs). */
void mt_tensor_mode_conf(const char *user, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    if (user) {
        const char *p = user;
        while (*p) {
            size_t n = strcspn(p, ",");
            int is_backend = n >= 8 && strncmp(p, "backend:", 8) == 0;
            if (n && !is_backend && o + n + 2 < len) {
                if (o) out[o++] = ',';
                memcpy(out + o, p, n);
                o += n;
                out[o] = 0;
            }
            p += n + (p[n] == ',');
        }
    }
    snprintf(out + o, len - o, "%sbackend:cudaMallocAsync", o ? "," : "");
}

static pid_t child_pid;
static volatile sig_atomic_t stop_waiting; /* Ctrl-C while waiting for traced processes */

static void forward_signal(int sig)
{
    if (child_pid > 0) kill(child_pid, sig);
}

static void on_interrupt(int sig)
{
    (void)sig;
    stop_waiting = 1;
}

int mt_cmd_record(int argc, char **argv)
{
    const char *pattern = "memtrace.%c.%h.%p.mtrace", *stacks = "both";
    int force = 0, symbolize = 1, quiet = 0, tensors = 0, preload = 1, activity = -1, i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (mt_cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (++i >= argc) return mt_cli_fail("record: %s needs a file name pattern", a);
            pattern = argv[i];
        } else if (strcmp(a, "-f") == 0 || strcmp(a, "--force") == 0) {
            force = 1;
        } else if (strcmp(a, "--stacks") == 0) {
            if (++i >= argc)
                return mt_cli_fail("record: --stacks needs both|full|python|native|none");
            stacks = argv[i];
            if (strcmp(stacks, "native") != 0 && strcmp(stacks, "none") != 0 &&
                strcmp(stacks, "python") != 0 && strcmp(stacks, "both") != 0 &&
                strcmp(stacks, "full") != 0)
                return mt_cli_fail("record: --stacks takes both, full, python, native or none, "
                                   "not '%s'", stacks);
        } else if (strcmp(a, "--tensors") == 0 || strcmp(a, "--tensors=reports") == 0) {
            tensors = 1;
        } else if (strcmp(a, "--tensors=async") == 0) {
            tensors = 2;
        } else if (strcmp(a, "--activity") == 0) {
            if (++i >= argc || (strcmp(argv[i], "on") != 0 && strcmp(argv[i], "off") != 0))
                return mt_cli_fail("record: --activity takes on or off");
            activity = strcmp(argv[i], "on") == 0;
        } else if (strcmp(a, "--no-preload") == 0) {
            preload = 0;
        } else if (strcmp(a, "--no-symbolize") == 0) {
            symbolize = 0;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            quiet = 1;
        } else if (a[0] == '-') {
            return mt_cli_fail("record: unknown option %s (see memtrace record --help)", a);
        } else {
            break; /* the command starts here even without "--" */
        }
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    char **cmd = argv + i;

    char inject[PATH_MAX];
    if (mt_record_find_inject(inject, sizeof inject) != 0)
        return mt_cli_fail("record: cannot find libmemtrace_inject.so (was memtrace built with "
                           "CUPTI? set MEMTRACE_INJECT=/path/to/libmemtrace_inject.so)");
    char cupti[PATH_MAX] = "";
    if (mt_record_find_cupti(cmd[0], cupti, sizeof cupti) != 0 && !quiet)
        fprintf(stderr, "memtrace: libcupti not found in the command's Python environment or the "
                        "CUDA toolkit; the recorder will ask the dynamic linker\n");

    /* An absolute pattern, so processes that chdir still write where the user expects; with the
     * pid in it, so processes never compete for one file. */
    char abs_pattern[PATH_MAX * 2], cwd[PATH_MAX], given[PATH_MAX * 2], errbuf[PATH_MAX + 200];
    if (!getcwd(cwd, sizeof cwd)) return mt_cli_fail("record: getcwd: %s", strerror(errno));
    if (pattern[0] == '/')
        snprintf(given, sizeof given, "%s", pattern);
    else
        snprintf(given, sizeof given, "%s/%s", cwd, pattern);
    if (mt_record_pattern_per_process(given, abs_pattern, sizeof abs_pattern) && !quiet)
        fprintf(stderr, "memtrace: -o %s has no %%p: each process writes its own file, named "
                        "with .%%p added (%s)\n", pattern, abs_pattern);
    if (mt_record_check_dir(abs_pattern, errbuf, sizeof errbuf) != 0)
        return mt_cli_fail("record: -o %s: %s", pattern, errbuf);

    char manifest[] = "/tmp/memtrace-manifest-XXXXXX";
    int mfd = mkstemp(manifest);
    if (mfd < 0) return mt_cli_fail("record: cannot create a temporary file: %s", strerror(errno));
    close(mfd);

    const char *old = getenv("CUDA_INJECTION64_PATH");
    if (old && *old && strcmp(old, inject) != 0 && !quiet)
        fprintf(stderr, "memtrace: replacing CUDA_INJECTION64_PATH=%s\n", old);
    if (!quiet)
        fprintf(stderr, "memtrace: recording into %s (one file per CUDA process)\n", abs_pattern);
    if (!quiet && tensors == 2)
        fprintf(stderr, "memtrace: --tensors=async switches PyTorch to backend:cudaMallocAsync; "
                        "CUDA graph trees (torch.compile mode=\"reduce-overhead\") and "
                        "expandable_segments do not work under it: use --tensors for those\n");

    fflush(NULL);
    child_pid = fork();
    if (child_pid < 0) {
        unlink(manifest);
        return mt_cli_fail("record: fork: %s", strerror(errno));
    }
    if (child_pid == 0) {
        setenv("CUDA_INJECTION64_PATH", inject, 1);
        if (preload) { /* so that other CUPTI clients can take over (src/record/cuda/interpose.c) */
            const char *old_pre = getenv("LD_PRELOAD");
            size_t n = strlen(inject) + (old_pre ? strlen(old_pre) : 0) + 2;
            char *pre = malloc(n);
            if (pre) {
                snprintf(pre, n, "%s%s%s", inject, old_pre && *old_pre ? ":" : "",
                         old_pre ? old_pre : "");
                setenv("LD_PRELOAD", pre, 1);
            }
        }
        setenv("MEMTRACE_OUTPUT", abs_pattern, 1);
        setenv("MEMTRACE_MANIFEST", manifest, 1);
        setenv("MEMTRACE_STACKS", stacks, 1);
        if (force) setenv("MEMTRACE_FORCE", "1", 1);
        if (cupti[0]) setenv("MEMTRACE_CUPTI", cupti, 1);
        if (activity == 0 || (activity < 0 && tensors == 2)) setenv("MEMTRACE_ACTIVITY", "0", 1);
        /* cudaMallocAsync/cudaFreeAsync taken where libraries call them, not through CUPTI
         * (MEMTRACE_ASYNC_HOOKS=0 in the environment keeps CUPTI: a diagnostic) */
        if (tensors) setenv("MEMTRACE_ASYNC_HOOKS", "1", 0);
        if (tensors == 1) setenv("MEMTRACE_TENSORS", "1", 1);
        if (tensors == 2) {
            char conf[4096];
            mt_tensor_mode_conf(getenv("PYTORCH_CUDA_ALLOC_CONF"), conf, sizeof conf);
            setenv("PYTORCH_CUDA_ALLOC_CONF", conf, 1);
        }
        execvp(cmd[0], cmd);
        fprintf(stderr, "memtrace: cannot run %s: %s\n", cmd[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }

    /* Ctrl-C reaches the whole foreground process group, the command included: we survive it to
     * write the summary. Termination requests sent to us alone are passed on. */
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGTERM, forward_signal);
    signal(SIGHUP, forward_signal);
    int status = 0;
    while (waitpid(child_pid, &status, 0) < 0 && errno == EINTR) {
    }
    int exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                    : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                          : 1;

    /* Processes that outlived the command may still be writing their traces. */
    signal(SIGINT, on_interrupt);
    mt_record_wait_writers(manifest, quiet, &stop_waiting);
    signal(SIGINT, SIG_IGN);
    mt_record_summarize(manifest, symbolize, quiet);
    unlink(manifest);
    return exit_code;
}
