/* Where this process sits in a distributed job, from its launcher's environment.
 *
 * torchrun sets RANK, LOCAL_RANK, WORLD_SIZE and GROUP_RANK (the node's rank); Slurm sets
 * SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID; Open MPI OMPI_COMM_WORLD_RANK,
 * _LOCAL_RANK and _SIZE; MPICH and Intel MPI PMI_RANK, PMI_SIZE and MPI_LOCALRANKID. The first
 * variable of each list that holds a non-negative integer wins: torchrun under Slurm reports the
 * rank torchrun gave the process, not the launcher's task number.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "memtrace/record.h"

static int read_int(const char *name, int32_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > INT32_MAX) return 0;
    *out = (int32_t)x;
    return 1;
}

/* The first of names (NULL-terminated) that holds a rank; -1 and NULL when none does. */
static const char *first_of(const char *const *names, int32_t *out)
{
    *out = -1;
    for (; *names; names++)
        if (read_int(*names, out)) return *names;
    return NULL;
}

int mt_rank_from_env(mt_file_header *h, char *source, size_t len)
{
    static const char *const rank[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                       NULL};
    static const char *const local[] = {"LOCAL_RANK", "SLURM_LOCALID",
                                        "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", NULL};
    static const char *const world[] = {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
                                        "PMI_SIZE", NULL};
    static const char *const node[] = {"GROUP_RANK", "SLURM_NODEID", NULL};
    const char *from = first_of(rank, &h->rank);
    first_of(local, &h->local_rank);
    first_of(world, &h->world_size);
    first_of(node, &h->node_rank);
    if (source && len) snprintf(source, len, "%s", from ? from : "");
    if (!from) {
        h->flags &= ~MT_HDR_RANK;
        h->rank = h->local_rank = h->world_size = h->node_rank = -1;
        return 0;
    }
    h->flags |= MT_HDR_RANK;
    return 1;
}
