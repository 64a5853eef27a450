/* A process's rank, from whichever launcher started it. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "memtrace/record.h"

static const char *const all[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK",
                                  "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NODEID",
                                  "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                  "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                  "MPI_LOCALRANKID", NULL};

static void clean(void)
{
    for (const char *const *n = all; *n; n++) unsetenv(*n);
}

Test(record_rank, none)
{
    clean();
    mt_file_header h = {.flags = MT_HDR_RANK, .rank = 5};
    char from[32] = "x";
    cr_expect_eq(mt_rank_from_env(&h, from, sizeof from), 0);
    cr_expect_eq(h.flags & MT_HDR_RANK, 0u);
    cr_expect_eq(h.rank, -1);
    cr_expect_str_eq(from, "");
}

Test(record_rank, torchrun)
{
    clean();
    setenv("RANK", "3", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("GROUP_RANK", "1", 1);
    setenv("SLURM_PROCID", "0", 1); /* torchrun under Slurm: torchrun's rank wins */
    mt_file_header h = {0};
    char from[32];
    cr_expect_eq(mt_rank_from_env(&h, from, sizeof from), 1);
    cr_expect_eq(h.flags & MT_HDR_RANK, MT_HDR_RANK);
    cr_expect_eq(h.rank, 3);
    cr_expect_eq(h.local_rank, 1);
    cr_expect_eq(h.world_size, 4);
    cr_expect_eq(h.node_rank, 1);
    cr_expect_str_eq(from, "RANK");
    clean();
}

Test(record_rank, slurm_and_mpi)
{
    clean();
    setenv("SLURM_PROCID", "17", 1);
    setenv("SLURM_NTASKS", "64", 1);
    setenv("SLURM_NODEID", "2", 1);
    mt_file_header h = {0};
    char from[32];
    cr_expect_eq(mt_rank_from_env(&h, from, sizeof from), 1);
    cr_expect_eq(h.rank, 17);
    cr_expect_eq(h.world_size, 64);
    cr_expect_eq(h.node_rank, 2);
    cr_expect_eq(h.local_rank, -1, "not given: -1");
    cr_expect_str_eq(from, "SLURM_PROCID");
    clean();
    setenv("OMPI_COMM_WORLD_RANK", "5", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    cr_expect_eq(mt_rank_from_env(&h, from, sizeof from), 1);
    cr_expect_eq(h.rank, 5);
    cr_expect_eq(h.local_rank, 1);
    cr_expect_str_eq(from, "OMPI_COMM_WORLD_RANK");
    clean();
}

Test(record_rank, garbage_is_no_rank)
{
    clean();
    setenv("RANK", "three", 1);
    setenv("PMI_RANK", "-1", 1);
    mt_file_header h = {0};
    cr_expect_eq(mt_rank_from_env(&h, NULL, 0), 0);
    setenv("PMI_RANK", "2", 1); /* the next variable that holds a number wins */
    cr_expect_eq(mt_rank_from_env(&h, NULL, 0), 1);
    cr_expect_eq(h.rank, 2);
    clean();
}
