/* record_libs.c — where `memtrace record` finds the libraries it hands to the command: the
 * recorder (libmemtrace_inject.so, beside or near the memtrace binary, or MEMTRACE_INJECT) and
 * CUPTI (the one the command's Python environment ships, else the CUDA toolkit's, or
 * MEMTRACE_CUPTI). */
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "record_summary.h"

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int dir_of_self(char *dir, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", dir, len - 1);
    if (n <= 0) return -1;
    dir[n] = 0;
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    return 0;
}

/* The recorder library: beside the program, in ../lib, or in the build tree's src/record. */
int mt_record_find_inject(char *out, size_t len)
{
    const char *env = getenv("MEMTRACE_INJECT");
    if (env && *env) {
        if (!realpath(env, out)) return -1;
        return is_file(out) ? 0 : -1;
    }
    char dir[PATH_MAX];
    if (dir_of_self(dir, sizeof dir) != 0) return -1;
    static const char *const rel[] = {"/libmemtrace_inject.so", "/../lib/libmemtrace_inject.so",
                                      "/../record/libmemtrace_inject.so"};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        char cand[PATH_MAX + 64];
        snprintf(cand, sizeof cand, "%s%s", dir, rel[i]);
        if (is_file(cand) && realpath(cand, out)) return 0;
    }
    (void)len;
    return -1;
}

/* First match of a glob pattern, or -1. */
static int first_glob(const char *pattern, char *out, size_t len)
{
    glob_t g;
    int rc = -1;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && rc != 0; i++)
            if (is_file(g.gl_pathv[i])) {
                snprintf(out, len, "%s", g.gl_pathv[i]);
                rc = 0;
            }
        globfree(&g);
    }
    return rc;
}

/* Looks up CMD on PATH like execvp would. */
static int which(const char *cmd, char *out, size_t len)
{
    if (strchr(cmd, '/')) return realpath(cmd, out) ? 0 : -1;
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        char cand[PATH_MAX];
        snprintf(cand, sizeof cand, "%.*s/%s", (int)n, path, cmd);
        if (access(cand, X_OK) == 0 && is_file(cand)) {
            snprintf(out, len, "%s", cand);
            return 0;
        }
        path += n + (path[n] == ':');
    }
    return -1;
}

/* libcupti, in the order a user would expect: an explicit MEMTRACE_CUPTI; the copy inside the
 * Python environment the command runs in (the one PyTorch itself would load, so the process holds
 * one CUPTI); the CUDA toolkit. Returns 0 with a path, or -1 (the recorder then asks the dynamic
 * linker). */
int mt_record_find_cupti(const char *cmd, char *out, size_t len)
{
    const char *env = getenv("MEMTRACE_CUPTI");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return 0;
    }
    char exe[PATH_MAX];
    if (which(cmd, exe, sizeof exe) == 0 && strstr(exe, "python")) {
        /* <prefix>/bin/python3 -> <prefix>/lib/python3.X/site-packages/nvidia/... (a symlinked
         * interpreter keeps the venv's prefix, so use the path as found, then its realpath) */
        for (int pass = 0; pass < 2; pass++) {
            char base[PATH_MAX];
            if (pass == 0)
                snprintf(base, sizeof base, "%s", exe);
            else if (!realpath(exe, base))
                break;
            char *slash = strrchr(base, '/');
            if (!slash) continue;
            *slash = 0;
            slash = strrchr(base, '/');
            if (!slash) continue;
            *slash = 0; /* base = prefix */
            static const char *const rel[] = {
                "/lib/python3*/site-packages/nvidia/cu13/lib/libcupti.so.13",
                "/lib/python3*/site-packages/nvidia/cuda_cupti/lib/libcupti.so.*",
                "/lib/python3*/site-packages/nvidia/cu12/lib/libcupti.so.12"};
            for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
                char pat[PATH_MAX + 128];
                snprintf(pat, sizeof pat, "%s%s", base, rel[i]);
                if (first_glob(pat, out, len) == 0) return 0;
            }
        }
    }
    const char *cuda = getenv("CUDA_HOME");
    static const char *const roots[] = {NULL, "/usr/local/cuda", "/usr/local/cuda-*", "/opt/cuda"};
    static const char *const libs[] = {"/lib64/libcupti.so*", "/lib/libcupti.so*",
                                       "/targets/x86_64-linux/lib/libcupti.so*",
                                       "/extras/CUPTI/lib64/libcupti.so*"};
    for (size_t r = 0; r < sizeof roots / sizeof *roots; r++) {
        const char *root = r == 0 ? cuda : roots[r];
        if (!root) continue;
        for (size_t i = 0; i < sizeof libs / sizeof *libs; i++) {
            char pat[PATH_MAX];
            snprintf(pat, sizeof pat, "%s%s", root, libs[i]);
            if (first_glob(pat, out, len) == 0) return 0;
        }
    }
    return -1;
}

