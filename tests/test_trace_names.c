/* Names of ops, kinds, pseudo frames, and CUPTI callback ids — the ids checked against the CUPTI
 * header itself when the toolkit is installed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memtrace/driver_calls.h"
#include "memtrace/driver_results.h"
#include "memtrace/trace.h"

Test(trace_names, ops_kinds_pseudo)
{
    cr_assert_str_eq(mt_op_name(MT_OP_ALLOC), "alloc");
    cr_assert_str_eq(mt_op_name(MT_OP_FREE), "free");
    cr_assert_str_eq(mt_op_name(MT_OP_CTX_DESTROY), "ctx_destroy");
    cr_assert_str_eq(mt_op_name(0), "?");
    cr_assert_str_eq(mt_op_name(MT_OP_MAX_), "?");
    cr_assert_str_eq(mt_op_name(~0u), "?");
    for (unsigned k = 0; k < MT_KIND_MAX_; k++)
        cr_assert_str_neq(mt_kind_name(k), "?", "%u", k);
    cr_assert_str_eq(mt_kind_name(MT_KIND_ASYNC), "async");
    cr_assert_str_eq(mt_kind_name(MT_KIND_MAX_), "?");
    cr_assert_str_eq(mt_pseudo_name(MT_PSEUDO_DRIVER_INTERNAL), "[driver internal]");
    cr_assert_str_eq(mt_pseudo_name(MT_PSEUDO_TRUNCATED), "[truncated]");
    cr_assert_str_eq(mt_pseudo_name(0), "[?]");
}

Test(trace_names, api_names)
{
    cr_assert_str_eq(mt_api_name(29), "cuMemAlloc");
    cr_assert_str_eq(mt_api_name(243), "cuMemAlloc_v2");
    cr_assert_str_eq(mt_api_name(612), "cuMemAllocFromPoolAsync_ptsz");
    cr_assert_str_eq(mt_api_name(11), "cuCtxDestroy");
    cr_assert_str_eq(mt_api_name(0), "");
    cr_assert_str_eq(mt_api_name(30), "", "30 is cuMemGetInfo: not traced");
    cr_assert_str_eq(mt_api_name(100000), "");
}

/* Every name we hand out must be the one cupti_driver_cbid.h gives that id. */
Test(trace_names, api_ids_match_cupti_header)
{
    FILE *f = fopen("/usr/local/cuda/include/cupti_driver_cbid.h", "r");
    if (!f) cr_skip_test("CUPTI headers not installed");
    char line[512], name[256];
    unsigned id, checked = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, " CUPTI_DRIVER_TRACE_CBID_%255s = %u", name, &id) != 2) continue;
        const char *ours = mt_api_name(id);
        if (*ours) {
            cr_assert_str_eq(ours, name, "id %u", id);
            checked++;
        }
    }
    fclose(f);
#define COUNT(...) +1
    unsigned listed = 0 MT_TRACED_DRIVER_CALLS(COUNT) MT_NAMED_DRIVER_CALLS(COUNT);
#undef COUNT
    cr_assert_eq(checked, listed, "every id in driver_calls.h was found in the header");
}

Test(trace_names, result_names)
{
    cr_assert_str_eq(mt_result_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
    cr_assert_str_eq(mt_result_name(201), "CUDA_ERROR_INVALID_CONTEXT");
    cr_assert_str_eq(mt_result_name(0), "CUDA_SUCCESS");
    cr_assert_str_eq(mt_result_name(998), "");
    cr_assert_str_eq(mt_result_name(~0u), "");
}

/* Every CUresult of cuda.h is named as cuda.h names it, and nothing else is. */
Test(trace_names, result_names_match_cuda_header)
{
    FILE *f = fopen("/usr/local/cuda/include/cuda.h", "r");
    if (!f) cr_skip_test("CUDA headers not installed");
    char line[512], name[256];
    unsigned value, checked = 0;
    int in_enum = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "typedef enum cudaError_enum", 27) == 0) in_enum = 1;
        if (in_enum && strncmp(line, "} CUresult;", 11) == 0) break;
        if (!in_enum || sscanf(line, " %255[A-Z0-9_] = %u", name, &value) != 2) continue;
        cr_assert_str_eq(mt_result_name(value), name, "value %u", value);
        checked++;
    }
    fclose(f);
#define COUNT(...) +1
    unsigned listed = 0 MT_DRIVER_RESULTS(COUNT);
#undef COUNT
    cr_assert_eq(checked, listed, "cuda.h has %u codes, driver_results.h %u", checked, listed);
}

Test(trace_names, a_gpu_uuid_reads_as_nvidia_smi_writes_it)
{
    const uint8_t u[16] = {0x5e, 0x2f, 0x1c, 0x0a, 0x9b, 0x3d, 0x47, 0x01,
                           0x8c, 0xe4, 0x00, 0xff, 0x12, 0x34, 0x56, 0x78};
    char buf[64];
    mt_format_gpu_uuid(u, buf, sizeof buf);
    cr_assert_str_eq(buf, "GPU-5e2f1c0a-9b3d-4701-8ce4-00ff12345678");
    char small[10];
    mt_format_gpu_uuid(u, small, sizeof small);
    cr_assert_str_eq(small, "GPU-5e2f1", "cut, still terminated");
}
