/* Synthetic traces for the CI features (check, diff, Markdown, JSON schema), written with the
 * trace writer, whose numbers are known by construction. Shared by tests/test_ci_gates.c and the
 * tests/tools/make_ci_traces program that the Python and JavaScript checks run first. */
#ifndef MT_TEST_CI_TRACES_H
#define MT_TEST_CI_TRACES_H

#include <stdint.h>

#define CI_MiB (1024ull * 1024ull)

/* budget.mtrace — a plain CUDA program ("train"), native stacks with symbols:
 *   cuda:0  load_model 1 MiB (freed at t=9), train_step 2 MiB + 5 (freed at t=4), leak_cache
 *           512 KiB never freed, a failed 1 GiB request from too_big; peak at t=3
 *   cuda:1  4 MiB from shard, freed at t=8
 *   host    4 KiB pinned, freed */
#define CI_BUDGET_PEAK0 (3 * CI_MiB + 5)
#define CI_BUDGET_PEAK1 (4 * CI_MiB)
#define CI_BUDGET_LEAK0 (512 * 1024ull)
#define CI_BUDGET_FAILED 1

/* tensors.mtrace — record --tensors, Python stacks: a 2 MiB segment; tensors A 512 (t3, freed
 * t5), B 1024 (t4, freed t7), C 4096 (t6): the tensor peak, 5120 = B + C, at t6; then a 1 MiB
 * cuBLAS-like workspace at t8: the device peak, 4096 + 1 MiB = C + workspace. So what is live at
 * the tensor peak (B, C) differs from what is live at the device peak (C, workspace). */
#define CI_TENSOR_PEAK 5120ull
#define CI_TENSOR_DEVICE_PEAK (4096ull + CI_MiB)
#define CI_TENSOR_RESERVED (2 * CI_MiB)
#define CI_TENSOR_FILE "proj/train.py" /* its Python file, relative; lines 10, 20, ... 60 */
#define CI_TENSOR_FN_B "make_b"
#define CI_TENSOR_FN_C "make_c"
#define CI_TENSOR_FN_WS "make_workspace"

/* names.mtrace — Python names that are Markdown or HTML to a renderer; each must come out as
 * written: */
#define CI_NAME_LOCALS "Model.to.<locals>.convert"
#define CI_NAME_PIPE "split|join"
#define CI_NAME_TICK "tick`tock"
#define CI_NAME_UNDER "_private_helper_"
#define CI_NAME_STAR "*args_star*"
#define CI_NAME_FILE "/home/u/proj/we|ird dir/mod_x.py"

/* moved_base.mtrace, moved_new.mtrace — the same Python program on two machines: different pids,
 * stack ids, code ids, module load biases and unsymbolized library offsets. In NEW, grow()
 * allocates 3 MiB instead of 1 MiB, step() moved from line 20 to line 22 (an edit above it) and
 * allocates 2.5 MiB instead of 2, only_base() is gone and only_new() is new; keep() is the same.
 * NEW's CUPTI activity records stopped (a warning) after its peak, before its frees. */
#define CI_MOVED_GROW_BASE (1 * CI_MiB)
#define CI_MOVED_GROW_NEW (3 * CI_MiB)
#define CI_MOVED_STEP (2 * CI_MiB)
#define CI_MOVED_STEP_NEW (5 * CI_MiB / 2)
#define CI_MOVED_KEEP (5 * CI_MiB)
#define CI_MOVED_ONLY_BASE (7 * CI_MiB)
#define CI_MOVED_ONLY_NEW (6 * CI_MiB)

/* rank0.mtrace, rank1.mtrace — ranks 0 and 1 of a job (the trace header says so, host
 * "ci-runner"), each on its own GPU: rank 1 peaks higher. */
#define CI_RANK_LABEL(r) "rank " #r " (ci-runner)"
#define CI_RANK0_PEAK (10 * CI_MiB)
#define CI_RANK1_PEAK (12 * CI_MiB)

/* Writes every trace above into dir (which must exist). 0, or -1 after a message on stderr. */
int ci_traces_write(const char *dir);

#endif
