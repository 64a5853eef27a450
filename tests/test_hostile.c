/* Hostile and damaged traces (issue 13): each case made mt_analyze allocate gigabytes, run for tens
 * of seconds, or give up on the whole file. Time and memory are asserted loosely (a few seconds,
 * a few hundred MiB: each test runs in its own process, so ru_maxrss is its own), the results
 * exactly. The files come from tests/support/hostile.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "hostile.h"
#include "memtrace/compact.h"
#include "memtrace/export.h"
#include "testutil.h"

/* mt_frames_path options: every frame, short or long names */
static const mt_path_opts short_all = {.style = MT_NAME_SHORT, .filter = MT_FRAMES_ALL};
static const mt_path_opts long_all = {.style = MT_NAME_LONG, .filter = MT_FRAMES_ALL};

#if defined(__SANITIZE_ADDRESS__)
#define RSS_LIMIT_MIB 1024 /* AddressSanitizer's shadow memory and quarantine come on top */
#define SLOWER 4           /* and its checks cost time */
#else
#define RSS_LIMIT_MIB 256
#define SLOWER 1
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

/* mt_analyze plus every output (to /dev/null), within `seconds` and RSS_LIMIT_MIB. */
static mt_analysis *analyze_within(const char *path, double seconds)
{
    char err[512];
    mt_analysis *a = NULL;
    double t0 = now_s();
    cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "%s", err);
    mt_out *o = mt_out_open("/dev/null", err, sizeof err);
    cr_assert_not_null(o, "%s", err);
    mt_report_options ro = {.top = 10};
    cr_assert_eq(mt_report_text(o, a, &ro), 0);
    cr_assert_eq(mt_report_json(o, &a, 1, &ro), 0);
    mt_folded_options fo = {.metric = MT_METRIC_PEAK, .device = MT_DEVICE_AUTO};
    cr_assert_eq(mt_export_folded(o, &a, 1, &fo), 0);
    mt_chrome_options co = {0};
    cr_assert_eq(mt_export_chrome(o, &a, 1, &co, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mt_out_close(o), 0);
    double s = now_s() - t0;
    cr_expect_lt(s, seconds * SLOWER, "%s took %.2f s", path, s);
    cr_expect_lt(peak_rss_mib(), RSS_LIMIT_MIB, "peak RSS %ld MiB", peak_rss_mib());
    return a;
}

Test(hostile, a_single_node_with_a_huge_id)
{
    char path[256];
    uint32_t ids[] = {(1u << 26) - 1, UINT32_MAX};
    for (size_t i = 0; i < 2; i++) {
        mt_test_tmpname(path, sizeof path, "idbomb.mtrace");
        cr_assert_eq(mt_hostile_id_bomb(path, ids[i]), 0);
        mt_analysis *a = analyze_within(path, 1.0); /* was 3 GiB and 9-22 s */
        cr_assert_eq(a->n_devices, 1);
        cr_assert_eq(a->devices[0].peak_stacks.n, 1);
        const char *names[4];
        cr_expect_eq(mt_frames_path(a->frames, ids[i], long_all, names, 4), 1,
                     "the node is found by its id");
        cr_expect_str_eq(names[0], "0x401000");
        mt_analysis_free(a);
        unlink(path);
    }
}

Test(hostile, twenty_thousand_device_ordinals)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "devices.mtrace");
    cr_assert_eq(mt_hostile_devices(path, 20000), 0);
    mt_analysis *a = analyze_within(path, 2.0); /* was 64 s and 630 MB */
    /* ordinals 0..255 except every 16th (those are written negative): 240 devices */
    cr_expect_eq(a->n_devices, 240);
    cr_expect_eq(a->anomalies.bad_devices, 20000 - 240, "the other events are counted, not used");
    cr_expect_eq(a->events, 20000);
    mt_analysis_free(a);
    unlink(path);
}

Test(hostile, frees_of_unknown_device_after_many_devices)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "frees.mtrace");
    cr_assert_eq(mt_hostile_unknown_device_frees(path, 20000, 20000), 0);
    mt_analysis *a = analyze_within(path, 2.0); /* was 23 s */
    cr_expect_eq(a->anomalies.unmatched_frees, 20000);
    cr_expect_eq(a->n_devices, MT_MAX_DEVICE_ORDINAL + 1);
    mt_analysis_free(a);
    unlink(path);
}

Test(hostile, a_parent_cycle_with_many_leaves)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "cycle.mtrace");
    cr_assert_eq(mt_hostile_parent_cycle(path, 4, 20000), 0);
    mt_analysis *a = analyze_within(path, 2.0); /* was 5.7 s */
    cr_expect_eq(a->anomalies.bad_stack_nodes, 1, "node 1 names node 4 as its parent");
    /* leaf 5 hangs off node 1, whose parent link is cut: leaf and node 1 */
    const char *names[300];
    cr_expect_eq(mt_frames_path(a->frames, 5, short_all, names, 300), 2);
    /* leaf 8 hangs off node 4: 4 -> 3 -> 2 -> 1, then the leaf */
    cr_expect_eq(mt_frames_path(a->frames, 8, short_all, names, 300), 5);
    mt_analysis_free(a);
    unlink(path);
}

Test(hostile, a_deep_chain_with_many_leaves)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "chain.mtrace");
    cr_assert_eq(mt_hostile_deep_chain(path, 5000, 20000), 0);
    mt_analysis *a = analyze_within(path, 3.0);
    const char *names[300];
    cr_expect_eq(mt_frames_path(a->frames, 5001, short_all, names, 300), 256,
                 "paths are cut at 256 frames");
    cr_expect_eq(a->anomalies.bad_stack_nodes, 0);
    mt_analysis_free(a);
    unlink(path);
}

/* ---- damaged fixtures: one bad byte costs one chunk, not the trace ------------------------------
 */

static uint64_t events_of(const char *path, uint64_t *max_per_chunk)
{
    char err[512];
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    uint64_t n = 0, in_chunk = 0, chunk = UINT64_MAX;
    *max_per_chunk = 0;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (mt_reader_offset(r) != chunk) {
            chunk = mt_reader_offset(r);
            in_chunk = 0;
        }
        if (rec.type == MT_REC_EVENT) n++, in_chunk++;
        if (in_chunk > *max_per_chunk) *max_per_chunk = in_chunk;
    }
    mt_reader_close(r);
    return n;
}

Test(hostile, flipped_bytes_in_a_recorded_trace_lose_one_chunk_at_most, .timeout = 120)
{
    const char *fixture = MT_TEST_DATA_DIR "/cifar_default.mtrace";
    size_t len;
    uint8_t *data = mt_test_slurp(fixture, &len);
    cr_assert_not_null(data);
    uint64_t per_chunk, total = events_of(fixture, &per_chunk);
    char path[256], err[512];
    mt_test_tmpname(path, sizeof path, "flipped.mtrace");
    size_t flips = 0, damaged = 0;
    for (size_t at = 64; at < len; at += 13, flips++) { /* past the file header */
        data[at] ^= 0x04;
        cr_assert_eq(mt_test_spit(path, data, len), 0);
        data[at] ^= 0x04;
        mt_analysis *a = NULL;
        cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "byte %zu: %s", at, err);
        cr_assert_leq(a->damaged_chunks, 1, "byte %zu", at);
        cr_assert_geq(a->events + per_chunk, total, "byte %zu: %llu of %llu events", at,
                      (unsigned long long)a->events, (unsigned long long)total);
        damaged += a->damaged_chunks + (uint64_t)a->truncated;
        mt_analysis_free(a);
        if (at % 130 == 64 % 13) { /* now and then: strict mode refuses it */
            mt_analyze_options o = {.strict = 1};
            cr_assert_eq(mt_analyze(path, &o, &a, err, sizeof err), -1, "byte %zu", at);
        }
    }
    cr_expect_gt(flips, 500);
    cr_expect_geq(damaged, flips * 9 / 10, "%zu of %zu flips were noticed", damaged, flips);
    free(data);
    unlink(path);
}

Test(hostile, resync_reports_what_was_lost)
{
    /* a good trace, 1000 bytes of garbage, the same trace's chunks again */
    const char *fixture = MT_TEST_DATA_DIR "/alloc_patterns.mtrace";
    size_t len;
    uint8_t *data = mt_test_slurp(fixture, &len);
    cr_assert_not_null(data);
    size_t body = len - 64, total = len + 1000 + body;
    uint8_t *twice = malloc(total);
    memcpy(twice, data, len);
    for (size_t i = 0; i < 1000; i++)
        twice[len + i] = (uint8_t)(i * 37);
    memcpy(twice + len + 1000, data + 64, body);
    char path[256], err[512];
    mt_test_tmpname(path, sizeof path, "garbage.mtrace");
    cr_assert_eq(mt_test_spit(path, twice, total), 0);
    mt_analysis *a = NULL, *once = NULL;
    cr_assert_eq(mt_analyze(fixture, NULL, &once, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "%s", err);
    cr_expect_eq(a->damaged_chunks, 1);
    cr_expect_eq(a->damaged_bytes, 1000);
    cr_expect(a->damage_msg && strstr(a->damage_msg, "bad chunk magic"), "%s", a->damage_msg);
    cr_expect_eq(a->events, 2 * once->events, "every event of both copies");
    mt_out *o = mt_out_open("/dev/null", err, sizeof err);
    mt_report_options ro = {0};
    cr_assert_eq(mt_report_text(o, a, &ro), 0);
    mt_out_close(o);
    mt_analysis_free(a);
    mt_analysis_free(once);
    free(twice);
    free(data);
    unlink(path);
}

Test(hostile, fixtures_read_the_same_as_before)
{
    /* the committed traces have no damage: resync changes nothing about them */
    const char *names[] = {"alloc_patterns", "cifar_default", "cifar_tensors"};
    for (size_t i = 0; i < 3; i++) {
        char path[512], err[512];
        snprintf(path, sizeof path, "%s/%s.mtrace", MT_TEST_DATA_DIR, names[i]);
        mt_analysis *a = NULL;
        mt_analyze_options o = {.strict = 1};
        cr_assert_eq(mt_analyze(path, &o, &a, err, sizeof err), 0, "%s", err);
        cr_expect_eq(a->damaged_chunks, 0);
        cr_expect_eq(a->truncated, 0);
        cr_expect_eq(a->anomalies.bad_devices + a->anomalies.bad_stack_nodes, 0);
        mt_analysis_free(a);
    }
}

/* ---- paths that were quadratic in the number of events --------------------------------------- */

Test(hostile, many_device_peaks_over_a_large_live_set)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "peaks.mtrace");
    /* 600 k live allocations in 8 KB of file, then a peak on each of 255 more devices: every
     * peak looked at the whole live set (15 s) */
    cr_assert_eq(mt_hostile_peaks_over_a_big_live_set(path, 600000, 255), 0);
    char err[512];
    mt_analysis *a = NULL;
    double t0 = now_s();
    cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "%s", err);
    double s = now_s() - t0;
    cr_expect_lt(s, 5.0 * SLOWER, "%.2f s", s);
    cr_assert_eq(a->n_devices, 256);
    cr_expect_eq(a->devices[0].u.peak, 600000ull * 512);
    cr_expect_eq(a->devices[0].peak_stacks.n, 64, "64 stacks live at device 0's peak");
    uint64_t sum = 0;
    for (size_t k = 0; k < a->devices[0].peak_stacks.n; k++) sum += a->devices[0].peak_stacks.v[k].bytes;
    cr_expect_eq(sum, a->devices[0].u.peak, "the peak's stacks add up to it");
    for (size_t i = 1; i < a->n_devices; i++) {
        cr_expect_eq(a->devices[i].peak_stacks.n, 1, "device %zu", i);
        cr_expect_eq(a->devices[i].at_peak.other_bytes, 4096, "device %zu", i);
    }
    mt_analysis_free(a);
    unlink(path);
}

Test(hostile, many_pools_descending_mappings_and_context_churn)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "pools.mtrace");
    cr_assert_eq(mt_hostile_many_pools(path, 300000), 0); /* was 41 s */
    mt_analysis *a = analyze_within(path, 5.0);
    cr_expect_eq(a->devices[0].u.pool_reserved, 300000ull << 20);
    mt_analysis_free(a);
    unlink(path);

    mt_test_tmpname(path, sizeof path, "maps.mtrace");
    cr_assert_eq(mt_hostile_descending_maps(path, 300000), 0); /* was 40 s */
    a = analyze_within(path, 5.0);
    cr_expect_eq(a->devices[0].u.vmm_mapped_peak, 300000ull * 0x200000);
    cr_expect_eq(a->devices[0].u.vmm_mapped, 0, "every mapping was unmapped");
    cr_expect_eq(a->anomalies.unmatched_frees + a->anomalies.partial_unmaps, 0);
    mt_analysis_free(a);
    unlink(path);

    mt_test_tmpname(path, sizeof path, "contexts.mtrace");
    cr_assert_eq(mt_hostile_context_churn(path, 100000, 20000), 0); /* was 57 s */
    a = analyze_within(path, 5.0);
    cr_expect_eq(a->anomalies.ctx_destroy_released, 20000, "each destroy ended its allocation");
    cr_expect_eq(a->devices[0].leak_count, 100000, "the other context's allocations stayed");
    mt_analysis_free(a);
    unlink(path);
}

Test(hostile, nvml_samples_from_the_future)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "samples.mtrace");
    /* 281 KB: 100 k samples no event ever reaches, then 1 M events (was 119 s) */
    cr_assert_eq(mt_hostile_future_samples(path, 100000, 1000000), 0);
    mt_analysis *a = analyze_within(path, 5.0);
    cr_expect_eq(a->devices[0].n_nvml, 100000 + 1000, "every sample is kept");
    cr_expect_eq(a->devices[0].u.peak, 1000ull * 4096);
    mt_analysis_free(a);
    unlink(path);
}

Test(hostile, optimizer_steps_ending_over_a_large_live_set)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "phases.mtrace");
    cr_assert_eq(mt_hostile_phase_churn(path, 100000, 20000), 0);
    mt_analysis *a = analyze_within(path, 5.0);
    cr_assert_eq(a->n_devices, 1);
    const mt_device_report *d = &a->devices[0];
    cr_expect(d->categories_known);
    /* every optimizer temporary outlived its step: optimizer state; the rest are activations */
    cr_expect_eq(d->by_category_at_peak[MT_CAT_OPTIMIZER_STATE] +
                     d->by_category_at_peak[MT_CAT_OPTIMIZER_TEMP], 20000ull * 512);
    cr_expect_eq(d->by_category_at_peak[MT_CAT_ACTIVATIONS], 120000ull * 512);
    mt_analysis_free(a);
    unlink(path);
}

/* The rank table's stacks by name: every peak stack was compared with every other by its joined
 * names (20 000 stacks 256 frames deep: 14 s in the HTML report, which summarizes every trace). */
Test(hostile, rank_summary_of_many_deep_stacks)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "deep-ranks.mtrace");
    cr_assert_eq(mt_hostile_deep_chain(path, 5000, 20000), 0);
    char err[512];
    mt_analysis *a = NULL;
    cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "%s", err);
    mt_rank_summary s;
    double t0 = now_s();
    cr_assert_eq(mt_rank_summarize(a, &s), 0);
    double took = now_s() - t0;
    cr_expect_lt(took, 2.0 * SLOWER, "%.2f s", took);
    /* 20 000 stacks of 4 KiB each: the 64 kept are the first by name, in name order */
    cr_assert_eq(s.n_stacks, MT_RANK_STACKS);
    for (size_t i = 0; i < s.n_stacks; i++) {
        cr_expect_eq(s.stacks[i].bytes, 4096);
        cr_expect_eq(s.stacks[i].count, 1);
        if (i) cr_expect_lt(strcmp(s.stacks[i - 1].name, s.stacks[i].name), 0, "%zu", i);
    }
    const char *first = s.stacks[0].name;
    cr_expect(strlen(first) > 9 && strcmp(first + strlen(first) - 9, ";0x500000") == 0, "%s",
              first + (strlen(first) > 40 ? strlen(first) - 40 : 0));
    mt_rank_summary_free(&s);
    mt_analysis_free(a);
    unlink(path);
}

/* The HTML report's moments walked the whole live set for every moment of every device: 256
 * device peaks over 600 k live allocations (4.7 s); each moment also sorted all its stacks. */
Test(hostile, moments_of_many_devices_over_a_large_live_set)
{
    char path[256];
    mt_test_tmpname(path, sizeof path, "moments.mtrace");
    cr_assert_eq(mt_hostile_peaks_over_a_big_live_set(path, 600000, 255), 0);
    char err[512];
    mt_analysis *a = NULL;
    cr_assert_eq(mt_analyze(path, NULL, &a, err, sizeof err), 0, "%s", err);
    mt_moments *m = NULL;
    double t0 = now_s();
    cr_assert_eq(mt_moments_compute(a, NULL, &m, err, sizeof err), 0, "%s", err);
    double took = now_s() - t0;
    cr_expect_lt(took, 2.5 * SLOWER, "%.2f s", took);
    cr_assert_eq(m->n_devices, 256);
    for (size_t i = 0; i < m->n_devices; i++) {
        const mt_device_moments *d = &m->devices[i];
        int peak = 0;
        for (size_t k = 0; k < d->n_moments; k++) {
            const mt_moment *x = &d->moments[k];
            uint64_t sum = x->rest_bytes;
            for (size_t j = 0; j < x->top.n; j++) sum += x->top.v[j].bytes;
            cr_expect_eq(sum, x->in_use, "device %zu moment %zu: top + rest = its bytes", i, k);
            peak |= x->is_peak;
        }
        cr_expect(peak, "device %zu has its peak among its moments", i);
    }
    const mt_moment *pk = NULL;
    for (size_t k = 0; k < m->devices[0].n_moments; k++)
        if (m->devices[0].moments[k].is_peak) pk = &m->devices[0].moments[k];
    cr_assert_not_null(pk);
    cr_expect_eq(pk->in_use, 600000ull * 512);
    cr_expect_eq(pk->top.n + pk->rest_stacks, 64, "64 stacks live at device 0's peak");
    mt_moments_free(m);
    mt_analysis_free(a);
    unlink(path);
}
