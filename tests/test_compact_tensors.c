/* Compactor semantics of record --tensors on synthetic traces: PyTorch's segments around the
 * tensors it reports, the allocator's own counter as a check, graph capture, unknown devices. */
#include "test_compact_fixture.h"

#define A ((uint64_t)0x7f0000000000)
#define SEG (MT_EF_SEGMENT | MT_EF_TENSORS_TRACKED)

/* A TENSOR event as the recorder makes it: aux = torch.cuda.memory_allocated() after it. */
static void tensor(fx *f, unsigned op, int device, uint64_t addr, uint64_t bytes, uint64_t t_ms,
                   uint32_t stack, uint64_t torch_allocated, uint16_t flags)
{
    mt_record r = {.type = MT_REC_EVENT};
    r.u.event = (mt_event){.time_ns = FX_T0 + t_ms * MS, .address = addr, .bytes = bytes,
                           .tid = 7, .context = 1, .stack = stack, .device = device,
                           .aux = torch_allocated, .flags = flags, .op = (uint8_t)op,
                           .kind = MT_KIND_TENSOR};
    fx_put(f, &r);
}

Test(compact_tensors, segments_are_the_reservation_and_tensors_the_peak)
{
    fx f;
    fx_open(&f, "tensors.mtrace");
    /* a 2 MiB segment; cuBLAS's 1 MiB workspace; tensors inside the segment, the first at its
     * very address (a tensor must not be taken for the segment, nor free it) */
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 2 << 20, 1, 1, 1, SEG);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + (64 << 20), 1 << 20, 2, 2);
    tensor(&f, MT_OP_ALLOC, 0, A, 512, 3, 3, 512, 0);
    tensor(&f, MT_OP_ALLOC, 0, A + 512, 1024, 4, 4, 1536, 0);
    tensor(&f, MT_OP_FREE, 0, A, 512, 5, 0, 1024, 0);
    tensor(&f, MT_OP_ALLOC, 0, A + 4096, 4096, 6, 5, 5120, 0);
    tensor(&f, MT_OP_FREE, 0, A + 512, 1024, 7, 0, 4096, 0);
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, A + (64 << 20), 0, 8, 0);
    tensor(&f, MT_OP_FREE, 0, A + 4096, 4096, 9, 0, 0, 0);
    fx_ev(&f, MT_OP_FREE, MT_KIND_DEVICE, 0, A, 0, 10, 0); /* empty_cache() */
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.by_kind_peak[MT_KIND_TENSOR], 5120, "tensor peak");
    cr_expect_eq(d->u.tensor_counter_peak, 5120, "torch's own counter, from aux");
    cr_expect_eq(d->u.peak, (1 << 20) + 5120, "the peak: tensors + the workspace, not the segment");
    cr_expect_eq(d->peak_time_ns, 6 * MS);
    cr_expect_eq(d->u.segment_peak, 2 << 20, "max_memory_reserved");
    cr_expect_eq(d->u.segment_bytes, 0);
    cr_expect_eq(d->by_kind_at_peak[MT_KIND_DEVICE], 1 << 20, "the segment is not 'device' bytes");
    cr_expect_eq(d->by_kind_at_peak[MT_KIND_TENSOR], 5120);
    cr_expect_eq(d->u.alloc_count, 4, "three tensors and the workspace; the segment is not one");
    cr_expect_eq(a->anomalies.unmatched_frees + a->anomalies.double_frees + a->anomalies.replaced, 0);
    /* at the peak, the breakdown splits the reservation into tensors and cache */
    cr_expect(d->at_peak.allocated_known);
    cr_expect_eq(d->at_peak.caching_bytes, 2 << 20);
    cr_expect_eq(d->at_peak.allocated_bytes, 5120);
    cr_expect_eq(d->at_peak.cached_free_bytes, (2 << 20) - 5120);
    cr_expect_eq(d->at_peak.other_bytes, 1 << 20);
    cr_assert_eq(d->peak_stacks.n, 3, "two tensor stacks and the workspace's");
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact_tensors, without_tensors_a_segment_is_an_allocation)
{
    fx f;
    fx_open(&f, "segments.mtrace");
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 2 << 20, 1, 1, 1, MT_EF_SEGMENT);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_VMM_PHYSICAL, 0, 0x1234, 20 << 20, 2, 1, 1, MT_EF_SEGMENT);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + (64 << 20), 1 << 20, 3, 2);
    fx_ev(&f, MT_OP_FREE, MT_KIND_VMM_PHYSICAL, 0, 0x1234, 0, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, (2 << 20) + (20 << 20) + (1 << 20));
    cr_expect_eq(d->u.segment_peak, (2 << 20) + (20 << 20), "max_memory_reserved");
    cr_expect_eq(d->u.segment_bytes, 2 << 20);
    cr_expect_eq(d->at_peak.caching_bytes, (2 << 20) + (20 << 20));
    cr_expect_eq(d->at_peak.allocated_known, 0, "which tensors are inside is not known");
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact_tensors, tensors_on_two_devices_and_a_counter_that_disagrees)
{
    fx f;
    fx_open(&f, "two.mtrace");
    tensor(&f, MT_OP_ALLOC, 0, A, 1000, 1, 1, 1000, 0);
    tensor(&f, MT_OP_ALLOC, 1, A + 0x100000, 3000, 2, 1, 3000, 0);
    tensor(&f, MT_OP_ALLOC, 1, A + 0x200000, 500, 3, 1, 9999, 0); /* a report memtrace missed */
    tensor(&f, MT_OP_FREE, 0, A, 1000, 4, 0, 0, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_assert_eq(a->n_devices, 2);
    cr_expect_eq(fx_dev(a, 0)->u.by_kind_peak[MT_KIND_TENSOR], 1000);
    cr_expect_eq(fx_dev(a, 0)->u.tensor_counter_peak, 1000);
    cr_expect_eq(fx_dev(a, 1)->u.by_kind_peak[MT_KIND_TENSOR], 3500);
    cr_expect_eq(fx_dev(a, 1)->u.tensor_counter_peak, 9999, "kept as reported: the report says "
                                                             "they differ");
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact_tensors, captured_allocations_are_counted_and_marked)
{
    fx f;
    fx_open(&f, "captured.mtrace");
    tensor(&f, MT_OP_ALLOC, 0, A, 4096, 1, 1, 4096, 0);
    tensor(&f, MT_OP_ALLOC, 0, A + 4096, 8192, 2, 2, 12288, MT_EF_CAPTURED);
    tensor(&f, MT_OP_FREE, 0, A + 4096, 8192, 3, 0, 4096, MT_EF_CAPTURED);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.captured_count, 1);
    cr_expect_eq(d->u.captured_bytes, 8192);
    cr_expect_eq(d->u.peak, 12288, "a graph's private-pool tensors count, as torch counts them");
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact_tensors, an_unknown_device_is_never_a_device)
{
    fx f;
    fx_open(&f, "unknown.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 100, 1, 1);
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_ASYNC, -1, A + 0x1000, 50, 2, 1); /* an old recorder's */
    fx_ev(&f, MT_OP_FAILED, MT_KIND_DEVICE, -1, 0, 1 << 30, 3, 1);
    fx_ev(&f, MT_OP_FREE, MT_KIND_ASYNC, -1, A + 0x1000, 0, 4, 0);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    cr_expect_eq(a->n_devices, 1, "no cuda:? device");
    cr_expect_eq(a->anomalies.unknown_device, 1);
    cr_expect_eq(a->anomalies.unmatched_frees, 0, "its free still matched it");
    cr_expect_eq(fx_dev(a, 0)->u.peak, 100);
    cr_expect_eq(a->failed_total, 1, "the failed request is listed");
    fx_check_invariants(a);
    mt_analysis_free(a);
}

Test(compact_tensors, graph_memory_nodes_count_through_their_pool_not_themselves)
{
    /* backend:cudaMallocAsync under torch.cuda.graph: cudaMallocAsync on the capturing stream
     * makes graph memory nodes; PyTorch's max_memory_allocated leaves them out, and so does the
     * peak (their pages are the graph memory pool's reservation, POOL_RESERVED) */
    fx f;
    fx_open(&f, "graph_nodes.mtrace");
    fx_ev(&f, MT_OP_ALLOC, MT_KIND_ASYNC, 0, A, 1000, 1, 1);
    fx_ev_full(&f, MT_OP_ALLOC, MT_KIND_ASYNC, 0, A + 0x10000, 5000, 2, 2, 1, MT_EF_CAPTURED);
    fx_ev_full(&f, MT_OP_FREE, MT_KIND_ASYNC, 0, A + 0x10000, 0, 3, 0, 1, MT_EF_CAPTURED);
    fx_close(&f);
    mt_analysis *a = fx_analyze(f.path);
    const mt_device_report *d = fx_dev(a, 0);
    cr_expect_eq(d->u.peak, 1000);
    cr_expect_eq(d->u.by_kind_peak[MT_KIND_ASYNC], 1000, "the stream-ordered peak leaves them out");
    cr_expect_eq(d->u.captured_count, 1);
    cr_expect_eq(a->anomalies.unmatched_frees, 0, "the node's free matched it");
    fx_check_invariants(a);
    mt_analysis_free(a);
}
