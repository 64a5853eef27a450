/* The traces a command was given: files, or directories holding them (a job's ranks, gathered
 * from a shared filesystem), ordered the way a reader expects: by rank, then by file name. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "grow.h" /* src/util: MT_GROW */
#include "memtrace/trace.h"

typedef struct entry {
    char *path;
    int has_rank;
    int32_t rank;
} entry;

static int by_rank(const void *pa, const void *pb)
{
    const entry *a = pa, *b = pb;
    if (a->has_rank != b->has_rank) return a->has_rank ? -1 : 1;
    if (a->has_rank && a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return strcmp(a->path, b->path);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int add(entry **v, size_t *n, size_t *cap, const char *path)
{
    if (MT_GROW(*v, *cap, *n + 1) < 0) return -1;
    char *p = strdup(path);
    if (!p) return -1;
    (*v)[(*n)++] = (entry){.path = p, .rank = -1};
    return 0;
}

/* The rank in a trace's header, read without reading the rest. Only from a regular file: a pipe
 * or FIFO can be read once, by the analysis (which copies it). */
static void read_rank(entry *e)
{
    char err[256];
    struct stat st;
    if (stat(e->path, &st) != 0 || !S_ISREG(st.st_mode)) return;
    mt_reader *r = mt_reader_open(e->path, err, sizeof err);
    if (!r) return; /* the analysis will say what is wrong with it */
    const mt_file_header *h = mt_reader_header(r);
    e->has_rank = (h->flags & MT_HDR_RANK) && h->rank >= 0;
    e->rank = h->rank;
    mt_reader_close(r);
}

int mt_cli_collect_traces(char **args, int n, char ***out, int *n_out)
{
    entry *v = NULL;
    size_t nv = 0, cap = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(args[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            struct dirent **names;
            int k = scandir(args[i], &names, NULL, alphasort);
            if (k < 0) return mt_cli_fail("cannot read directory %s", args[i]);
            for (int j = 0; j < k; j++) {
                if (ends_with(names[j]->d_name, ".mtrace")) {
                    size_t len = strlen(args[i]) + strlen(names[j]->d_name) + 2;
                    char *p = malloc(len);
                    if (p) {
                        snprintf(p, len, "%s/%s", args[i], names[j]->d_name);
                        if (add(&v, &nv, &cap, p) < 0) nv = 0;
                        free(p);
                    }
                }
                free(names[j]);
            }
            free(names);
        } else if (add(&v, &nv, &cap, args[i]) < 0) {
            return mt_cli_fail("out of memory");
        }
    }
    for (size_t i = 0; i < nv; i++) read_rank(&v[i]);
    if (nv > 1) qsort(v, nv, sizeof *v, by_rank);
    char **paths = calloc(nv + 1, sizeof *paths);
    if (!paths) return mt_cli_fail("out of memory");
    for (size_t i = 0; i < nv; i++) paths[i] = v[i].path;
    free(v);
    *out = paths;
    *n_out = (int)nv;
    return 0;
}

void mt_cli_free_traces(char **paths, int n)
{
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

int mt_cli_trace_rank(const char *path, int32_t *rank)
{
    entry e = {.path = (char *)path, .rank = -1};
    read_rank(&e);
    *rank = e.rank;
    return e.has_rank;
}
