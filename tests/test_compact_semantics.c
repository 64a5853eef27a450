/* Compactor semantics on synthetic traces: exact peaks, times, counts and every edge case. */
#include "test_compact_fixture.h"

#define A ((uint64_t)0x7f0000000000)
#define DEV MT_KIND_DEVICE

Test(compact, peak_time_totals_leaks)
{
    fx f;
    fx_open(&f, "basic.mtrace");
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A, 100, 1, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_PITCH, 0, A + 0x1000, 200, 2, 0);
    fx_ev(&f, MT_OP_FREE, DEV, 0, A, 0, 3, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_MANAGED, 0, A + 0x2000, 50, 4, 0);
    fx_end(&f, 10, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_devices, 1);
    cr_assert_null(a->host);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 300);
    cr_expect_eq(d->peak_time_ns, 2 * MS);
    cr_expect_eq(d->u.api_peak, 300);
    cr_expect_eq(d->u.alloc_bytes, 350);
    cr_expect_eq(d->u.alloc_count, 3);
    cr_expect_eq(d->u.free_count, 1);
    cr_expect_eq(d->leak_bytes, 250);
    cr_expect_eq(d->leak_count, 2);
    cr_expect_eq(d->by_kind_at_peak[DEV], 100);
    cr_expect_eq(d->by_kind_at_peak[MT_KIND_PITCH], 200);
    cr_expect_eq(a->events, 4);
    cr_expect_eq(a->duration_ns, 10 * MS);
    cr_expect(a->ended_cleanly);
    cr_expect_eq(a->truncated, 0);
    cr_assert_eq(d->peak_stacks.n, 1); /* all at stack 0 */
    cr_expect_eq(d->peak_stacks.v[0].bytes, 300);
    cr_expect_eq(d->peak_stacks.v[0].count, 2);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact, unmatched_and_double_free)
{
    fx f;
    fx_open(&f, "frees.mtrace");
    fx_ev(&f, MT_OP_FREE, DEV, 0, A + 0x9000, 0, 1, 0);    /* never allocated */
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A, 64, 2, 0);
    fx_ev(&f, MT_OP_FREE, DEV, 0, A, 64, 3, 0);
    fx_ev(&f, MT_OP_FREE, DEV, 0, A, 64, 4, 0);           /* double free */
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_ASYNC, 0, A, 32, 5, 0); /* reuse after free: fine */
    fx_ev(&f, MT_OP_FREE, MT_KIND_ASYNC, -1, A, 0, 6, 0);  /* device unknown: still matched */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_expect_eq(a->anomalies.unmatched_frees, 1);
    cr_expect_eq(a->anomalies.double_frees, 1);
    cr_expect_eq(a->anomalies.replaced, 0);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 64);
    cr_expect_eq(d->u.in_use, 0);
    cr_expect_eq(d->u.free_count, 2);
    cr_expect_eq(a->ended_cleanly, 0);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact, address_reuse_replaces)
{
    fx f;
    fx_open(&f, "reuse.mtrace");
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A, 100, 1, 0);
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A, 300, 2, 0); /* the free of the first was lost */
    fx_ev(&f, MT_OP_ALLOC, DEV, 1, A, 10, 3, 0);  /* same address, other device: independent */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_expect_eq(a->anomalies.replaced, 1);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 300);
    cr_expect_eq(d->peak_time_ns, 2 * MS);
    cr_expect_eq(d->leak_bytes, 300);
    cr_expect_eq(d->leak_count, 1);
    cr_expect_eq(fx_dev(a, 1)->u.peak, 10);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact, vmm_partial_unmap)
{
    const uint64_t M = 1 << 20, V = 0x7e0000000000ull, H = 0x55;
    fx f;
    fx_open(&f, "vmm.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_VMM_RESERVE, 0, V, 8 * M, 1, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_VMM_PHYSICAL, 0, H, 4 * M, 2, 0);
    fx_map(&f, 0, V, 3 * M, H, 3);
    fx_ev(&f, MT_OP_FREE, MT_KIND_VMM_MAP, 0, V + M, M, 4, 0); /* middle: splits in two */
    fx_ev(&f, MT_OP_FREE, MT_KIND_VMM_MAP, 0, V, M, 5, 0);     /* the left piece, whole */
    fx_ev(&f, MT_OP_FREE, MT_KIND_VMM_MAP, 0, V + 6 * M, M, 6, 0); /* nothing mapped there */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 4 * M, "mapped ranges and reserves are not device bytes");
    cr_expect_eq(d->u.vmm_reserved_peak, 8 * M);
    cr_expect_eq(d->u.vmm_mapped_peak, 3 * M);
    cr_expect_eq(d->u.vmm_mapped, M, "right piece [V+2M, V+3M) still mapped");
    cr_expect_eq(a->anomalies.partial_unmaps, 1);
    cr_expect_eq(a->anomalies.unmatched_frees, 1);
    cr_expect_eq(d->leak_bytes, 4 * M);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact, zero_byte_allocations)
{
    fx f;
    fx_open(&f, "zero.mtrace");
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A, 0, 1, 0);
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + 16, 0, 2, 0);
    fx_ev(&f, MT_OP_FREE, DEV, 0, A, 0, 3, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.zero_byte_allocs, 2);
    cr_expect_eq(d->u.alloc_count, 2);
    cr_expect_eq(d->u.peak, 0);
    cr_expect_eq(d->leak_count, 1);
    cr_expect_eq(a->anomalies.unmatched_frees, 0);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact, many_devices)
{
    fx f;
    fx_open(&f, "many.mtrace");
    for (int d = 0; d < 40; d++) fx_ev(&f, MT_OP_ALLOC, DEV, d, A + (uint64_t)d * 0x100000, 1000u * (d + 1), 1 + d, 0);
    for (int d = 0; d < 40; d += 2) fx_ev(&f, MT_OP_FREE, DEV, d, A + (uint64_t)d * 0x100000, 0, 100 + d, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_HOST_PINNED, 3, A + 0x90000000, 777, 200, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_devices, 40);
    for (int d = 0; d < 40; d++) {
        cr_expect_eq(a->devices[d].u.device, d);
        cr_expect_eq(a->devices[d].u.peak, 1000u * (d + 1));
        cr_expect_eq(a->devices[d].peak_time_ns, (uint64_t)(1 + d) * MS);
        cr_expect_eq(a->devices[d].leak_bytes, d % 2 ? 1000u * (d + 1) : 0);
    }
    cr_assert_not_null(a->host, "pinned memory goes to the host root");
    cr_expect_eq(a->host->u.peak, 777);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact, context_destroy_releases)
{
    fx f;
    fx_open(&f, "ctx.mtrace");
    fx_ev_full(&f, MT_OP_ALLOC, DEV, 0, A, 100, 1, 0, 1, 0);
    fx_ev_full(&f, MT_OP_ALLOC, DEV, 0, A + 0x100, 200, 2, 0, 2, 0);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_ASYNC, 0, A + 0x200, 400, 3, 0, 1, 0);
    fx_ev_full(&f, MT_OP_CTX_DESTROY, MT_KIND_UNKNOWN, 0, 0, 0, 4, 0, 1, 0);
    fx_ev_full(&f, MT_OP_FREE, DEV, 0, A, 0, 5, 0, 1, 0); /* already gone with its context */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 700);
    cr_expect_eq(d->u.in_use, 200);
    cr_expect_eq(d->leak_bytes, 200);
    cr_expect_eq(a->anomalies.ctx_destroy_released, 2);
    cr_expect_eq(a->anomalies.unmatched_frees, 1);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* The driver's own release of what a context's destruction ended (CUPTI reports a CUDA array's or a
 * driver-internal allocation's as the context is torn down, after CTX_DESTROY) is expected: not
 * an unmatched free. A release the program calls (not an activity record) after it still is one;
 * so is a second activity release of the same, and a new allocation at that key is tracked anew. */
Test(compact, teardown_release_after_context_destroy)
{
    fx f;
    fx_open(&f, "teardown.mtrace");
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_ARRAY, 0, A, 100, 1, 0, 1, MT_EF_ACTIVITY);
    fx_ev_full(&f, MT_OP_ALLOC, DEV, 0, A + 0x100, 200, 2, 0, 1, 0);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DRIVER, 0, A + 0x200, 400, 3, 0, 1, MT_EF_ACTIVITY);
    fx_ev_full(&f, MT_OP_CTX_DESTROY, MT_KIND_UNKNOWN, 0, 0, 0, 4, 0, 1, 0);
    fx_ev_full(&f, MT_OP_FREE, MT_KIND_ARRAY, 0, A, 100, 5, 0, 1, MT_EF_ACTIVITY);
    fx_ev_full(&f, MT_OP_FREE, MT_KIND_DRIVER, 0, A + 0x200, 400, 5, 0, 1, MT_EF_ACTIVITY);
    fx_ev_full(&f, MT_OP_FREE, DEV, 0, A + 0x100, 0, 6, 0, 1, 0); /* the program's: unmatched */
    fx_ev_full(&f, MT_OP_FREE, MT_KIND_ARRAY, 0, A, 100, 7, 0, 1, MT_EF_ACTIVITY); /* again */
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_ARRAY, 0, A, 50, 8, 0, 2, MT_EF_ACTIVITY);
    fx_ev_full(&f, MT_OP_FREE, MT_KIND_ARRAY, 0, A, 50, 9, 0, 2, MT_EF_ACTIVITY);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 700);
    cr_expect_eq(d->u.in_use, 0);
    cr_expect_eq(a->anomalies.ctx_destroy_released, 3);
    cr_expect_eq(a->anomalies.unmatched_frees, 1, "the program's own free after the destruction");
    cr_expect_eq(a->anomalies.double_frees, 1, "the second release of the array");
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact, failed_request_forensics)
{
    fx f;
    fx_open(&f, "oom.mtrace");
    fx_node(&f, 1, 0, 0x1000, MT_FRAME_NATIVE);
    fx_node(&f, 2, 0, 0x2000, MT_FRAME_NATIVE);
    fx_ev(&f, MT_OP_POOL_RESERVED, MT_KIND_POOL, 0, 0x9001, 1000, 1, 0);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_ASYNC, 0, A, 300, 2, 1);
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + 0x1000, 500, 3, 2);
    fx_ev(&f, MT_OP_FAILED, DEV, 0, 0, 2000, 4, 1);
    fx_ev(&f, MT_OP_FAILED, DEV, 1, 0, 64, 5, 0); /* device 1 has no pool information */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->failed_total, 2);
    cr_assert_eq(a->n_failed, 2);
    const mt_failed_request *r0 = &a->failed[0];
    cr_expect_eq(r0->time_ns, 4 * MS);
    cr_expect_eq(r0->bytes, 2000);
    cr_expect_eq(r0->in_use, 800);
    cr_expect(r0->pool_free_known);
    cr_expect_eq(r0->pool_free, 700);
    cr_assert_eq(r0->live.n, 2);
    cr_expect_eq(r0->live.v[0].stack, 2);
    cr_expect_eq(r0->live.v[0].bytes, 500);
    cr_expect_eq(r0->live.v[1].stack, 1);
    cr_expect_eq(r0->live.v[1].bytes, 300);
    cr_expect_eq(a->failed[1].pool_free_known, 0);
    cr_expect_eq(a->failed[1].in_use, 0);
    cr_expect_eq(fx_dev(a, 0)->u.failed_count, 1);
    cr_expect_eq(fx_dev(a, 0)->u.pool_reserved_peak, 1000);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* An event of thread tid (fx_ev_aux's are all thread 7). */
static void ev_on(fx *f, uint32_t tid, unsigned op, unsigned kind, uint64_t addr, uint64_t bytes,
                  uint64_t aux, uint64_t t_ms, uint16_t flags)
{
    mt_record r = {.type = MT_REC_EVENT};
    r.u.event = (mt_event){.time_ns = FX_T0 + t_ms * MS,
                           .address = addr,
                           .bytes = bytes,
                           .aux = aux,
                           .tid = tid,
                           .context = 1,
                           .stack = 1,
                           .device = 0,
                           .flags = flags,
                           .op = (uint8_t)op,
                           .kind = (uint8_t)kind,
                           .result = op == MT_OP_FAILED ? 2 : 0};
    fx_put(f, &r);
}

/* PyTorch's caching allocator: a refused segment request followed, on its thread, by one that
 * succeeds was recovered from; refusals followed by its OutOfMemoryError report (a failed TENSOR
 * request, aux = memory_allocated()) are tied to it, and counted there; other threads' and other
 * callers' failures are not; an OutOfMemoryError with no refusal before it had none. */
Test(compact, failed_requests_tied_to_pytorch_out_of_memory)
{
    const uint16_t SEG = MT_EF_SEGMENT;
    fx f;
    fx_open(&f, "oom_ties.mtrace");
    fx_node(&f, 1, 0, 0x1000, MT_FRAME_NATIVE);
    ev_on(&f, 7, MT_OP_ALLOC, DEV, A, 100, 0, 1, SEG);
    ev_on(&f, 7, MT_OP_FAILED, DEV, 0, 1000, 0, 2, SEG); /* #1: recovered */
    ev_on(&f, 7, MT_OP_FREE, DEV, A, 0, 0, 3, 0);
    ev_on(&f, 7, MT_OP_ALLOC, DEV, A + 0x10000, 1000, 0, 4, SEG);
    ev_on(&f, 7, MT_OP_FAILED, DEV, 0, 5000, 0, 5, SEG);            /* #2: raised as #5 */
    ev_on(&f, 8, MT_OP_FAILED, DEV, 0, 7000, 0, 6, SEG);            /* #3: another thread's */
    ev_on(&f, 7, MT_OP_FAILED, DEV, 0, 5000, 0, 7, SEG);            /* #4: raised as #5 */
    ev_on(&f, 7, MT_OP_FAILED, MT_KIND_TENSOR, 0, 4096, 555, 8, 0); /* #5 */
    ev_on(&f, 8, MT_OP_ALLOC, DEV, A + 0x20000, 7000, 0, 9, SEG);   /* #3 recovered */
    ev_on(&f, 7, MT_OP_FAILED, DEV, 0, 9000, 0, 10, 0);             /* #6: not the allocator's */
    ev_on(&f, 7, MT_OP_FAILED, MT_KIND_TENSOR, 0, 64, 777, 11, 0);  /* #7: no refusal */
    ev_on(&f, 9, MT_OP_FAILED, DEV, 0, 3000, 0, 12, SEG);           /* #8: the trace ends first */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_failed, 8);
    const mt_failed_request *x = a->failed;
    cr_expect_eq(x[0].outcome, MT_FAILED_RECOVERED);
    cr_expect_eq(x[0].torch_reserved, 100, "the segments live when it was refused");
    cr_expect_eq(x[1].outcome, MT_FAILED_RAISED);
    cr_expect_eq(x[1].raised_as, 4);
    cr_expect_eq(x[2].outcome, MT_FAILED_RECOVERED);
    cr_expect_eq(x[3].outcome, MT_FAILED_RAISED);
    cr_expect_eq(x[3].raised_as, 4);
    cr_expect_eq(x[4].driver_refusals, 2);
    cr_expect_eq(x[4].torch_allocated, 555);
    cr_expect_eq(x[4].torch_reserved, 1000);
    cr_expect_eq(x[5].outcome, MT_FAILED_UNTOLD);
    cr_expect_eq(x[5].raised_as, -1);
    cr_expect_eq(x[6].driver_refusals, 0);
    cr_expect_eq(x[6].torch_allocated, 777);
    cr_expect_eq(x[7].outcome, MT_FAILED_UNTOLD);
    char *text = fx_capture(a, fx_report_text_fn, NULL, "oom_ties.txt");
    cr_expect(strstr(text, "then: it raised torch.OutOfMemoryError: the driver had refused its "
                           "last 2 requests (#2, #4); PyTorch had 555 B allocated, 1000 B "
                           "reserved"),
              "%s", text);
    cr_expect(strstr(text, "#7 at +0.011000 s on cuda:0: 64 B tensor request failed (PyTorch's "
                           "caching allocator)"),
              "%s", text);
    cr_expect(strstr(text, "raised torch.OutOfMemoryError without asking the driver"), "%s", text);
    cr_expect(strstr(text, "with 100 B reserved, went on"), "%s", text);
    cr_expect(strstr(text, "\n  out of memory    torch.OutOfMemoryError at +0.008000 s: 4.00 KiB, "
                           "with 555 B allocated (failed request #5 below)\n"),
              "%s", text);
    free(text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, "oom_ties.json");
    cr_expect(strstr(json, "\"torch_allocated_bytes\":555,\"torch_reserved_bytes\":1000,"
                           "\"driver_refusals\":2,\"outcome\":\"raised\",\"raised_as\":-1,"),
              "%s", json);
    cr_expect(strstr(json, "\"outcome\":\"raised\",\"raised_as\":4,"), "%s", json);
    free(json);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* However many refusals a thread piles up, the open list stays bounded (the oldest forgotten). */
Test(compact, failed_request_ties_are_bounded)
{
    fx f;
    fx_open(&f, "oom_ties_many.mtrace");
    fx_node(&f, 1, 0, 0x1000, MT_FRAME_NATIVE);
    for (unsigned i = 0; i < 100; i++)
        ev_on(&f, 7, MT_OP_FAILED, DEV, 0, 1000, 0, 1 + i, MT_EF_SEGMENT);
    ev_on(&f, 7, MT_OP_FAILED, MT_KIND_TENSOR, 0, 1000, 5, 200, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->failed_total, 101);
    cr_assert_eq(a->n_failed, MT_MAX_FAILED_KEPT);
    cr_expect_eq(a->failed[0].outcome, MT_FAILED_UNTOLD, "forgotten: the oldest");
    cr_expect_eq(a->failed[MT_MAX_FAILED_KEPT - 1].outcome, MT_FAILED_RAISED);
    cr_expect_eq(a->failed[MT_MAX_FAILED_KEPT - 1].raised_as, -1, "the error was not kept");
    mt_analysis_free(a);
}

/* One event a line, for the tests of failed calls below: each at the next millisecond, on
 * context 1, device 0, stack 1; an allocation at its own address. */
typedef struct call_ev {
    uint32_t tid, corr;
    unsigned op, kind;
    uint16_t flags, result;
    uint64_t bytes, aux;
} call_ev;

static void put_calls(fx *f, const call_ev *evs, size_t n)
{
    mt_record r = {.type = MT_REC_EVENT};
    for (size_t i = 0; i < n; i++) {
        r.u.event = (mt_event){.context = 1, .stack = 1, .device = 0};
        r.u.event.time_ns = FX_T0 + (i + 1) * MS;
        r.u.event.tid = evs[i].tid;
        r.u.event.correlation = evs[i].corr;
        r.u.event.op = (uint8_t)evs[i].op;
        r.u.event.kind = (uint8_t)evs[i].kind;
        r.u.event.flags = evs[i].flags;
        r.u.event.result = evs[i].result;
        r.u.event.bytes = evs[i].bytes;
        r.u.event.aux = evs[i].aux;
        r.u.event.address = evs[i].op == MT_OP_ALLOC ? A + i * 0x1000 : 0;
        fx_put(f, &r);
    }
}

/* failed[0] is thread 8's driver refusal, raised as the out-of-memory error failed[1] (the tie's
 * index after the retried call left failed[]). */
static void expect_refusal_raised_as_next(const mt_analysis *a)
{
    cr_expect_eq(a->failed[0].tid, 8);
    cr_expect_eq(a->failed[0].outcome, MT_FAILED_RAISED);
    cr_expect_eq(a->failed[0].raised_as, 1, "the error's index once the retried call left");
    cr_expect_eq(a->failed[1].kind, MT_KIND_TENSOR);
    cr_expect_eq(a->failed[1].driver_refusals, 1);
}

/* A failed driver call whose API call made it again at once and succeeded (the same correlation
 * id on the same thread: the CUDA runtime on a thread with no current context) is no failed
 * request: it leaves failed[], failed_total and its device's count, and is counted apart; the
 * indexes of the failures after it follow. The same id on another thread is another call. */
Test(compact, failed_call_retried_by_the_same_call_is_not_a_failure)
{
    fx f;
    fx_open(&f, "retried.mtrace");
    fx_node(&f, 1, 0, 0x1000, MT_FRAME_NATIVE);
    const call_ev evs[] = {
        {7, 21, MT_OP_FAILED, MT_KIND_ASYNC, 0, 201, 100, 0}, /* retried below */
        {8, 30, MT_OP_FAILED, DEV, MT_EF_SEGMENT, 2, 500, 0}, /* #1 then, #0 at the end */
        {9, 21, MT_OP_ALLOC, MT_KIND_ASYNC, 0, 0, 100, 0},    /* another thread's call 21 */
        {7, 21, MT_OP_ALLOC, MT_KIND_ASYNC, 0, 0, 100, 0},    /* call 21 succeeds after all */
        {8, 0, MT_OP_FAILED, MT_KIND_TENSOR, 0, 2, 500, 9},   /* OutOfMemoryError: ties #0 */
        {10, 40, MT_OP_FAILED, MT_KIND_ASYNC, 0, 201, 64, 0}, /* #2: its thread allocates */
        {10, 41, MT_OP_ALLOC, MT_KIND_ASYNC, 0, 0, 64, 0},    /* in another call first, */
        {10, 40, MT_OP_ALLOC, MT_KIND_ASYNC, 0, 0, 64, 0},    /* so this is no retry of #2 */
    };
    put_calls(&f, evs, sizeof evs / sizeof evs[0]);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_expect_eq(a->failed_total, 3);
    cr_expect_eq(a->failed_retried, 1);
    cr_assert_eq(a->n_failed, 3);
    expect_refusal_raised_as_next(a);
    cr_expect_eq(fx_dev(a, 0)->u.failed_count, 3, "the retried call is not counted on cuda:0");
    char *text = fx_capture(a, fx_report_text_fn, NULL, "retried.txt");
    cr_expect(strstr(text, "failed requests: 3; and 1 failed driver call that the same API call "
                           "made again at once, with success"),
              "%s", text);
    free(text);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* The same, with the retried call's success after another thread's error was tied to its
 * refusal: the tie (raised_as) moves down with the error's index when the retried one leaves. */
Test(compact, failed_call_retried_after_an_error_keeps_the_errors_tie)
{
    fx f;
    fx_open(&f, "retried-late.mtrace");
    fx_node(&f, 1, 0, 0x1000, MT_FRAME_NATIVE);
    const call_ev evs[] = {
        {7, 21, MT_OP_FAILED, MT_KIND_ASYNC, 0, 201, 100, 0}, /* #0, retried at the end */
        {8, 30, MT_OP_FAILED, DEV, MT_EF_SEGMENT, 2, 500, 0}, /* #1, then #0 */
        {8, 0, MT_OP_FAILED, MT_KIND_TENSOR, 0, 2, 500, 9},   /* #2, then #1: ties the refusal */
        {7, 21, MT_OP_ALLOC, MT_KIND_ASYNC, 0, 0, 100, 0},    /* call 21 succeeds after all */
    };
    put_calls(&f, evs, sizeof evs / sizeof evs[0]);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_expect_eq(a->failed_retried, 1);
    cr_assert_eq(a->n_failed, 2);
    expect_refusal_raised_as_next(a);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* Managed memory counts in full on its context's GPU although its pages move as they are touched:
 * the report says so where managed bytes are part of the peak, and not elsewhere. */
Test(compact, managed_memory_at_the_peak_is_said_to_be_an_upper_bound)
{
    fx f;
    fx_open(&f, "managed.mtrace");
    fx_node(&f, 1, 0, 0x1000, MT_FRAME_NATIVE);
    ev_on(&f, 7, MT_OP_ALLOC, MT_KIND_MANAGED, A, 4u << 20, 0, 1, 0);
    ev_on(&f, 7, MT_OP_ALLOC, DEV, A + 0x1000000, 1u << 20, 0, 2, 0);
    ev_on(&f, 7, MT_OP_FREE, MT_KIND_MANAGED, A, 0, 0, 3, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    char *text = fx_capture(a, fx_report_text_fn, NULL, "managed.txt");
    cr_expect(strstr(text, "  at the peak      device 1.00 MiB, managed 4.00 MiB (managed memory "
                           "counts in full here, wherever its pages are: an upper bound)\n"),
              "%s", text);
    free(text);
    mt_analysis_free(a);
    fx_open(&f, "unmanaged.mtrace");
    fx_node(&f, 1, 0, 0x1000, MT_FRAME_NATIVE);
    ev_on(&f, 7, MT_OP_ALLOC, MT_KIND_MANAGED, A, 1u << 20, 0, 1, 0);
    ev_on(&f, 7, MT_OP_FREE, MT_KIND_MANAGED, A, 0, 0, 2, 0);
    ev_on(&f, 7, MT_OP_ALLOC, DEV, A + 0x1000000, 4u << 20, 0, 3, 0);
    fx_close(&f);
    a = fx_analyze(f.path);
    text = fx_capture(a, fx_report_text_fn, NULL, "unmanaged.txt");
    cr_expect(!strstr(text, "upper bound"), "no managed bytes at the peak: %s", text);
    free(text);
    mt_analysis_free(a);
}

/* cuMemCreate on the host (a host NUMA node) and a memory pool on the host give pinned host RAM:
 * the recorder writes them with device -1 and MT_EF_HOST_MEMORY, and their releases, mappings and
 * frees name the context's device (cuMemRelease, cuMemMap, cudaFreeAsync know no location). All
 * of it is the host's: nothing on cuda:0 but its own memory, no unknown device, every release
 * found (seen on an H200: samples/host_memory.c counted 96 MiB of host RAM on cuda:0 before). */
Test(compact, host_located_vmm_and_pool_memory_is_the_hosts)
{
    fx f;
    fx_open(&f, "hostmem.mtrace");
    fx_node(&f, 1, 0, 0x1000, MT_FRAME_NATIVE);
    enum { H = MT_EF_HOST_MEMORY, POOL = MT_EF_FROM_POOL };
    const uint64_t MIB = 1u << 20, HANDLE = 0x5000, VA = A, POOLH = 0x9000, P = VA + 0x10000000;
    fx_ev_aux(&f, MT_OP_ALLOC, DEV, 0, A + 0x100000000ull, 8 * MIB, 0, 1, 1, 1, 0); /* cuda:0's */
    fx_ev_aux(&f, MT_OP_ALLOC, MT_KIND_VMM_PHYSICAL, -1, HANDLE, 64 * MIB, 0, 2, 1, 1, H);
    fx_ev_aux(&f, MT_OP_ALLOC, MT_KIND_VMM_RESERVE, 0, VA, 64 * MIB, 0, 3, 1, 1, 0);
    fx_map(&f, 0, VA, 64 * MIB, HANDLE, 4); /* maps the host's pages */
    fx_ev_aux(&f, MT_OP_ALLOC, MT_KIND_ASYNC, -1, P, 32 * MIB, POOLH, 5, 1, 1, H | POOL);
    fx_ev_aux(&f, MT_OP_POOL_RESERVED, MT_KIND_POOL, -1, POOLH, 32 * MIB, 32 * MIB, 6, 0, 0, H);
    fx_ev_aux(&f, MT_OP_FREE, MT_KIND_ASYNC, 0, P, 0, 0, 7, 0, 1, 0); /* cudaFreeAsync: cuda:0 */
    fx_ev_aux(&f, MT_OP_POOL_RESERVED, MT_KIND_POOL, -1, POOLH, 0, 32 * MIB, 8, 0, 0, H);
    fx_ev_aux(&f, MT_OP_FREE, MT_KIND_VMM_MAP, 0, VA, 64 * MIB, 0, 9, 0, 1, 0);
    fx_ev_aux(&f, MT_OP_FREE, MT_KIND_VMM_RESERVE, 0, VA, 64 * MIB, 0, 10, 0, 1, 0);
    fx_ev_aux(&f, MT_OP_FREE, MT_KIND_VMM_PHYSICAL, 0, HANDLE, 0, 0, 11, 0, 1, 0); /* cuda:0 */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_devices, 1, "cuda:0 only: no unknown device");
    cr_expect_eq(a->devices[0].u.device, 0);
    cr_expect_eq(a->devices[0].u.peak, 8 * MIB);
    cr_expect_eq(a->devices[0].u.vmm_mapped_peak, 0, "the mapping is of the host's pages");
    cr_expect_eq(a->devices[0].u.pool_reserved_peak, 0);
    cr_assert_not_null(a->host);
    cr_expect_eq(a->host->u.peak, 96 * MIB);
    cr_expect_eq(a->host->u.in_use, 0, "every release found");
    cr_expect_eq(a->host->u.vmm_mapped_peak, 64 * MIB);
    cr_expect_eq(a->host->u.vmm_mapped, 0);
    cr_expect_eq(a->host->u.pool_reserved_peak, 32 * MIB);
    cr_expect_eq(a->anomalies.unmatched_frees, 0);
    cr_expect_eq(a->anomalies.unknown_device, 0);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* PyTorch's expandable segments ask cuMemCreate for a fabric handle first; a machine without one
 * says CUDA_ERROR_NOT_PERMITTED (800) and PyTorch asks again for a POSIX descriptor (seen on an
 * H200 in every such run). A request refused for its handle type (800 or 801) and made again on
 * its thread at once, same size, other handle types (aux; 0 = not recorded, older traces), with
 * success, is no failed request. A refusal of memory (2), the same handle types again, another
 * size or another thread's request stay failures. */
Test(compact, cumemcreate_refused_for_its_handle_type_then_made_with_another_is_not_a_failure)
{
    fx f;
    fx_open(&f, "probe.mtrace");
    fx_node(&f, 1, 0, 0x1000, MT_FRAME_NATIVE);
    enum { FABRIC = 8, POSIX_FD = 1, SEG = MT_EF_SEGMENT, PHYS = MT_KIND_VMM_PHYSICAL };
    const uint64_t MIB = 1u << 20;
    const call_ev evs[] = {
        {7, 50, MT_OP_FAILED, PHYS, SEG, 800, 20 * MIB, FABRIC}, /* a probe: taken back below */
        {9, 51, MT_OP_ALLOC, PHYS, SEG, 0, 20 * MIB, POSIX_FD},  /* another thread's */
        {7, 52, MT_OP_ALLOC, PHYS, SEG, 0, 20 * MIB, POSIX_FD},  /* the same request, other type */
        {8, 60, MT_OP_FAILED, PHYS, SEG, 2, 20 * MIB, POSIX_FD}, /* #0: out of memory */
        {8, 61, MT_OP_ALLOC, PHYS, SEG, 0, 20 * MIB, POSIX_FD},  /* recovered from, not a probe */
        {10, 70, MT_OP_FAILED, PHYS, 0, 800, 4 * MIB, POSIX_FD}, /* #1: */
        {10, 71, MT_OP_ALLOC, PHYS, 0, 0, 4 * MIB, POSIX_FD},    /* the same handle types again */
        {11, 80, MT_OP_FAILED, PHYS, 0, 801, 2 * MIB, 0},        /* #2: */
        {11, 81, MT_OP_ALLOC, PHYS, 0, 0, 8 * MIB, 0},           /* another size */
        {12, 90, MT_OP_FAILED, PHYS, 0, 800, 2 * MIB, 0},        /* an older trace's probe: */
        {12, 91, MT_OP_ALLOC, PHYS, 0, 0, 2 * MIB, 0},           /* taken back by size and thread */
    };
    put_calls(&f, evs, sizeof evs / sizeof evs[0]);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_expect_eq(a->failed_total, 3);
    cr_expect_eq(a->failed_probes, 2);
    cr_expect_eq(a->failed_retried, 0);
    cr_assert_eq(a->n_failed, 3);
    cr_expect_eq(a->failed[0].tid, 8);
    cr_expect_eq(a->failed[0].result, 2);
    cr_expect_eq(a->failed[0].outcome, MT_FAILED_RECOVERED);
    cr_expect_eq(a->failed[1].tid, 10);
    cr_expect_eq(a->failed[2].tid, 11);
    cr_expect_eq(fx_dev(a, 0)->u.failed_count, 3, "the probes are not counted on cuda:0");
    char *text = fx_capture(a, fx_report_text_fn, NULL, "probe.txt");
    cr_expect(strstr(text, "failed requests: 3; and 2 cuMemCreates refused for the handle type "
                           "asked for and made again at once with another, with success"),
              "%s", text);
    free(text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, "probe.json");
    cr_expect(strstr(json, "\"failed_total\":3,\"failed_retried\":0,\"failed_probes\":2"), "%s",
              json);
    free(json);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact, driver_internal_bytes)
{
    fx f;
    fx_open(&f, "driver.mtrace");
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A, 100, 1, 0);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DRIVER, 0, A + 0x1000, 400, 2, 0, 1, MT_EF_ACTIVITY);
    fx_ev(&f, MT_OP_FREE, DEV, 0, A, 0, 3, 0);
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A, 150, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 550);
    cr_expect_eq(d->peak_time_ns, 4 * MS);
    cr_expect_eq(d->u.api_peak, 150);
    cr_expect_eq(d->api_peak_time_ns, 4 * MS);
    cr_expect_eq(d->driver_at_peak, 400);
    cr_assert_eq(d->peak_stacks.n, 2);
    cr_expect_eq(d->peak_stacks.v[0].driver, 1);
    cr_expect_eq(d->peak_stacks.v[0].bytes, 400);
    char *folded = fx_folded_of(a, d, MT_METRIC_PEAK, MT_FRAMES_AUTO);
    cr_expect(strstr(folded, "cuda:0;[driver internal] 400\n"), "%s", folded);
    cr_expect(strstr(folded, "cuda:0;[no stack] 150\n"), "%s", folded);
    free(folded);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact, dropped_events)
{
    fx f;
    fx_open(&f, "dropped.mtrace");
    mt_record r = {.type = MT_REC_DROPPED, .u.dropped = 5};
    fx_put(&f, &r);
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A, 1, 1, 0);
    r.u.dropped = 7;
    fx_put(&f, &r);
    fx_end(&f, 2, 1, 12);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_expect_eq(a->dropped, 12);
    mt_analysis_free(a);
}

Test(compact, truncated_file_is_analysed)
{
    fx f;
    fx_open(&f, "trunc.mtrace");
    for (int i = 0; i < 10; i++) fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + (uint64_t)i * 0x1000, 100, 1 + i, 0);
    cr_assert_eq(mt_writer_flush(f.w), 0);
    for (int i = 10; i < 20; i++) fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + (uint64_t)i * 0x1000, 100, 1 + i, 0);
    fx_close(&f);
    size_t n;
    uint8_t *buf = mt_test_slurp(f.path, &n);
    cr_assert(buf && n > 20);
    cr_assert_eq(mt_test_spit(f.path, buf, n - 5), 0); /* cut inside the last chunk */
    free(buf);
    mt_analysis *a = fx_analyze(f.path);
    cr_expect(a->truncated);
    cr_expect_not_null(a->truncated_msg);
    cr_expect_eq(a->events, 10);
    cr_expect_eq(fx_dev(a, 0)->u.peak, 1000);
    mt_analysis_free(a);
}

Test(compact, corrupt_file_fails_with_reason)
{
    char path[512], err[256] = "";
    mt_test_tmpname(path, sizeof path, "garbage.mtrace");
    static const char junk[] = "this is not a trace at all, not even close.......................";
    cr_assert_eq(mt_test_spit(path, junk, sizeof junk - 1), 0);
    mt_analysis *a = (mt_analysis *)1;
    cr_expect_eq(mt_analyze(path, NULL, &a, err, sizeof err), -1);
    cr_expect_null(a);
    cr_expect(err[0], "a one-line reason is given");
    cr_expect_null(strchr(err, '\n'));
    cr_expect_eq(mt_analyze("/nonexistent/x.mtrace", NULL, &a, err, sizeof err), -1);
}

/* NCCL's way with VMM handles: it takes a handle back from a mapped address (a new reference) and
 * releases it, and imports its peers' handles over IPC. Neither is a double free nor new memory. */
Test(compact, vmm_handles_are_reference_counted_and_imports_are_not_ours)
{
    fx f;
    fx_open(&f, "vmm_refs.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_VMM_PHYSICAL, 0, 0x5000, 2 << 20, 1, 1);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_VMM_PHYSICAL, 0, 0x5000, 0, 2, 1, 1, MT_EF_RETAIN);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_VMM_PHYSICAL, -1, 0x5000, 0, 3, 1, 1, MT_EF_RETAIN);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_VMM_PHYSICAL, 0, 0x6000, 0, 4, 1, 1, MT_EF_IMPORTED);
    fx_ev(&f, MT_OP_FREE, MT_KIND_VMM_PHYSICAL, 0, 0x5000, 0, 5, 0);
    fx_ev(&f, MT_OP_FREE, MT_KIND_VMM_PHYSICAL, 0, 0x5000, 0, 6, 0);
    fx_ev(&f, MT_OP_FREE, MT_KIND_VMM_PHYSICAL, 0, 0x6000, 0, 7, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 2 << 20, "the imported handle is not this process's memory");
    cr_expect_eq(d->u.in_use, 2 << 20, "two releases of three references: still live");
    cr_expect_eq(a->anomalies.double_frees + a->anomalies.unmatched_frees, 0);
    cr_expect_eq(a->anomalies.retained, 2);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* Legacy CUDA IPC: cuIpcOpenMemHandle maps another process's cudaMalloc here (a tensor received
 * through torch.multiprocessing, NCCL with NCCL_CUMEM_ENABLE=0). The recorder writes it as an
 * imported device allocation of the range's size: the exporter's bytes, counted there and by
 * nvidia-smi there, never here; its cuIpcCloseMemHandle matches it, and one never closed is held by
 * nobody at the end. */
Test(compact, ipc_mappings_are_another_process_memory)
{
    fx f;
    fx_open(&f, "ipc.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, 0x10000000, 64 << 20, 1, 1); /* 64 MiB of its own */
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, 0x20000000, 256 << 20, 2, 2, 1, MT_EF_IMPORTED);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, 0x40000000, 32 << 20, 3, 2, 1, MT_EF_IMPORTED);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, 0x18000000, 8 << 20, 4, 3); /* the peak: 72 MiB */
    /* the same handle opened again: the same address, one more reference */
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, 0x20000000, 256 << 20, 5, 2, 1, MT_EF_IMPORTED);
    fx_ev_full(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, 0x20000000, 0, 6, 0, 1, MT_EF_IMPORTED);
    fx_ev_full(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, 0x20000000, 0, 7, 0, 1, MT_EF_IMPORTED);
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, 0x18000000, 0, 8, 0);
    fx_end(&f, 10, 8, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 72 << 20, "the mapped bytes are the exporter's");
    cr_expect_eq(d->u.api_peak, 72 << 20);
    cr_expect_eq(d->u.in_use, 64 << 20, "the mapping left open is no memory of this process");
    cr_expect_eq(d->u.alloc_count, 2);
    cr_expect_eq(d->peak_stacks.n, 2, "nothing of the mappings among what was live at the peak");
    cr_expect_eq(a->anomalies.double_frees + a->anomalies.unmatched_frees, 0,
                 "each cuIpcCloseMemHandle matched an open of its mapping");
    cr_expect_eq(a->anomalies.replaced, 0, "an open of an open handle replaces nothing");
    cr_expect_eq(d->leak_bytes, 64 << 20,
                 "its own 64 MiB are held at the end, the open mapping is not");
    cr_expect_eq(d->u.imported_peak, 288 << 20, "both mappings open at once, each counted once");
    cr_expect_eq(d->u.imported, 32 << 20, "the one left open");
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* CUDA arrays (textures, surfaces): the recorder writes each from CUPTI's activity record, with
 * its creating call's stack; address = the CUarray handle, freed by the record of its release.
 * The program's memory: in the peak, and held by the program at the end (before, they were
 * driver-internal and "released with the context"). */
Test(compact, cuda_arrays_are_the_programs_memory)
{
    fx f;
    fx_open(&f, "arrays.mtrace");
    fx_ev_aux(&f, MT_OP_ALLOC, MT_KIND_ARRAY, 0, 0x2b29e9f0, 64 << 20, 4, 1, 1, 1, MT_EF_ACTIVITY);
    fx_ev_aux(&f, MT_OP_ALLOC, MT_KIND_ARRAY, 0, 0x2b3a18f0, 16 << 20, 4, 2, 2, 1, MT_EF_ACTIVITY);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, 0x7f0000000000, 8 << 20, 3, 3);
    fx_ev_aux(&f, MT_OP_FREE, MT_KIND_ARRAY, 0, 0x2b29e9f0, 64 << 20, 4, 4, 0, 1, MT_EF_ACTIVITY);
    fx_end(&f, 10, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 88 << 20);
    cr_expect_eq(d->u.api_peak, 88 << 20, "arrays are asked for by the program");
    cr_expect_eq(d->u.by_kind_peak[MT_KIND_ARRAY], 80 << 20);
    cr_expect_eq(d->driver_at_peak, 0);
    cr_expect_eq(a->anomalies.unmatched_frees, 0);
    cr_expect_eq(d->leak_bytes, 24 << 20, "the array kept to the end is the program's");
    int found = 0;
    for (size_t i = 0; i < d->n_end_holders; i++)
        if (d->end_holders[i].kind == MT_HOLD_DRIVER) found = 1;
    cr_expect_not(found, "nothing of it driver-internal");
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* What was live at each device's peak, gathered while pass 1 reads (no tensors): a lifetime that
 * ended between an earlier peak and the last one is not in it, one that started before the peak
 * and ended after it is, and so is one still live at the end; a device whose peak comes late
 * (cuda:1) is counted from its own peak. */
static uint64_t peak_bytes_of(const mt_device_report *d, uint32_t stack)
{
    for (size_t i = 0; i < d->peak_stacks.n; i++)
        if (d->peak_stacks.v[i].stack == stack) return d->peak_stacks.v[i].bytes;
    return 0;
}

Test(compact, live_at_peak_in_one_pass)
{
    fx f;
    fx_open(&f, "peakset.mtrace");
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A, 100, 1, 1);
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + 0x1000, 200, 2, 2);
    fx_ev(&f, MT_OP_FREE, DEV, 0, A, 0, 3, 0);
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + 0x2000, 400, 4, 3); /* 600: an earlier peak */
    fx_ev(&f, MT_OP_FREE, DEV, 0, A + 0x1000, 0, 5, 0);    /* live then, not at the last peak */
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + 0x3000, 50, 6, 4);
    fx_ev(&f, MT_OP_ALLOC, DEV, 1, A + 0x10000, 70, 7, 7);
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + 0x4000, 300, 8, 5); /* 750: the peak of cuda:0 */
    fx_ev(&f, MT_OP_FREE, DEV, 0, A + 0x2000, 0, 9, 0);    /* live at it, ended after */
    fx_ev(&f, MT_OP_FREE, DEV, 0, A + 0x4000, 0, 10, 0);
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + 0x5000, 10, 11, 6); /* after the peak */
    fx_ev(&f, MT_OP_ALLOC, DEV, 1, A + 0x11000, 1000, 12, 8); /* 1070: the peak of cuda:1 */
    fx_ev(&f, MT_OP_FREE, DEV, 1, A + 0x10000, 0, 13, 0);
    fx_end(&f, 20, 13, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d0 = fx_dev(a, 0), *d1 = fx_dev(a, 1);
    cr_expect_eq(d0->u.peak, 750);
    cr_expect_eq(d0->peak_stacks.n, 3);
    cr_expect_eq(peak_bytes_of(d0, 3), 400);
    cr_expect_eq(peak_bytes_of(d0, 4), 50);
    cr_expect_eq(peak_bytes_of(d0, 5), 300);
    cr_expect_eq(peak_bytes_of(d0, 2), 0);
    cr_expect_eq(peak_bytes_of(d0, 6), 0);
    cr_expect_eq(d0->by_kind_at_peak[DEV], 750);
    cr_expect_eq(d1->u.peak, 1070);
    cr_expect_eq(d1->peak_stacks.n, 2);
    cr_expect_eq(peak_bytes_of(d1, 7), 70);
    cr_expect_eq(peak_bytes_of(d1, 8), 1000);
    fx_check_invariants(a);
    mt_analysis_free(a);
}

/* A recorder warning says when it happened (issue 11: "activity enrichment stopped" with no time
 * left the reader unable to tell which part of the run lacks driver-internal allocations). */
Test(compact, warnings_carry_their_time)
{
    fx f;
    fx_open(&f, "warn.mtrace");
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A, 100, 1, 0);
    mt_record note = {.type = MT_REC_NOTE};
    note.u.note = (mt_note){.time_ns = FX_T0 + 2500 * MS, .level = MT_NOTE_WARNING,
                            .text = "activity enrichment stopped: test"};
    fx_put(&f, &note);
    note.u.note = (mt_note){.time_ns = FX_T0 + 3000 * MS, .level = MT_NOTE_INFO, .text = "info"};
    fx_put(&f, &note);
    fx_end(&f, 4000, 1, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_warnings, 1);
    cr_expect_eq(a->warning_times_ns[0], 2500 * MS);
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "WARNING (recorder, at +2.500000 s): activity enrichment stopped: test"),
              "%s", text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, ".json");
    cr_expect(strstr(json, "\"warning_times_ns\":[2500000000]"), "%s", json);
    free(text);
    free(json);
    mt_analysis_free(a);
}

/* Driver-internal allocations and CUDA arrays come only in CUPTI's activity records. Where the
 * recorder had none (record --activity off, CUPTI refused them, or another client took them
 * mid-run: its notes say which), their bytes are not known, and a report that printed "0 B" there
 * said something it did not know. */
static mt_analysis *activity_trace(const char *stem, mt_note_level level, const char *note,
                                   uint64_t note_ms)
{
    fx f;
    fx_open(&f, stem);
    mt_record r = {.type = MT_REC_NOTE};
    r.u.note = (mt_note){.time_ns = FX_T0 + note_ms * MS, .level = (uint8_t)level, .text = note};
    fx_put(&f, &r);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DRIVER, 0, A, 30, 1000, 0); /* seen while records came */
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + 0x1000, 100, 1500, 1);  /* a first peak: 130 */
    fx_ev(&f, MT_OP_FREE, DEV, 0, A + 0x1000, 0, 1600, 0);
    fx_ev(&f, MT_OP_ALLOC, DEV, 0, A + 0x2000, 200, 3000, 1); /* the peak: 230 */
    fx_end(&f, 4000, 4, 0);
    fx_close(&f);
    return fx_analyze(f.path);
}

Test(compact, driver_internal_not_known_where_activity_records_were_not)
{
    static const struct {
        mt_note_level level;
        const char *note;
        uint64_t note_ms;
        mt_activity_state want;
        const char *line, *json;
    } cases[] = {
        {MT_NOTE_INFO, MT_ACTIVITY_NOTE_OFF " (MEMTRACE_ACTIVITY=0): test", 0, MT_ACTIVITY_OFF,
         "  driver-internal  not recorded, nor CUDA arrays: CUPTI's activity records, which "
         "report them, were off (record --activity off; the default with --tensors=async)\n",
         "\"activity_records\":\"off\","},
        {MT_NOTE_WARNING, MT_ACTIVITY_NOTE_UNAVAILABLE ": test", 0, MT_ACTIVITY_UNAVAILABLE,
         "  driver-internal  not recorded, nor CUDA arrays: CUPTI's activity records, which "
         "report them, were unavailable (see the warning)\n",
         "\"activity_records\":\"unavailable\","},
        {MT_NOTE_WARNING, MT_ACTIVITY_NOTE_STOPPED ": test", 2500, MT_ACTIVITY_STOPPED,
         "  driver-internal  30 B at the peak, of those made before +2.500000 s: CUPTI's activity "
         "records, which report them, stopped then (see the warning)\n",
         "\"activity_records\":\"stopped\",\"activity_stopped_ns\":2500000000,"},
        /* stopped after the peak: what was live at it was all seen */
        {MT_NOTE_WARNING, MT_ACTIVITY_NOTE_STOPPED ": test", 3500, MT_ACTIVITY_STOPPED,
         "  driver-internal  30 B at the peak\n",
         "\"activity_records\":\"stopped\",\"activity_stopped_ns\":3500000000,"},
        {MT_NOTE_INFO, "something else", 0, MT_ACTIVITY_ON, "  driver-internal  30 B at the peak\n",
         "\"activity_records\":\"on\","},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mt_analysis *a =
            activity_trace("activity.mtrace", cases[i].level, cases[i].note, cases[i].note_ms);
        cr_expect_eq(a->activity, cases[i].want, "case %zu", i);
        const mt_device_report *d = fx_dev(a, 0);
        cr_expect_eq(d->u.peak, 230, "case %zu", i);
        cr_expect_eq(mt_activity_saw(a, d->peak_time_ns),
                     cases[i].want == MT_ACTIVITY_ON || cases[i].note_ms > 3000, "case %zu", i);
        char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
        cr_expect(strstr(text, cases[i].line), "case %zu:\n%s", i, text);
        char *json = fx_capture(a, fx_report_json_fn, NULL, ".json");
        cr_expect(strstr(json, cases[i].json), "case %zu:\n%s", i, json);
        free(text);
        free(json);
        mt_analysis_free(a);
    }
}
