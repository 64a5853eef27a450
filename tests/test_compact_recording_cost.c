/* What recording cost the program, read back from the recorder's cost notes (recording_cost.c):
 * the notes of real GPU runs, in either order, hostile ones, few timed calls, the running totals
 * of a killed process, and the report's line and JSON object. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compact/internal.h"
#include "memtrace/export.h"
#include "test_compact_fixture.h"

/* Verbatim from a trace recorded on an H200 (GPT-2-like, batch 2, --tensors; 2026-11-26). */
#define TENSORS                                                                                    \
    "tensor reports: about 421024 allocations and frees reported by PyTorch's caching "           \
    "allocator, 519 ns each on average inside memtrace (1 in 16 timed; timed calls: median under " \
    "320 ns, 90% under 1024 ns, 99% under 2048 ns)"
#define WHOLE                                                                                      \
    "tensor reports, whole: 458 ns each on average from the stand-in's entry to its return, time " \
    "stamp and in-flight count included (allocations 732 ns: 827 ns with Python frames, 623 ns "   \
    "without (47% of them, autograd's threads); frees 185 ns; 24775 other reports, timed in TSC "  \
    "cycles and not by the clock: what an untimed report costs)"
#define CALLBACKS                                                                                  \
    "callbacks: about 112 (API entry and exit), 10577 ns each on average inside memtrace (CUPTI's " \
    "own dispatch not included; 1 in 16 timed; timed calls: median under 13.3 us, 90% under 28.7 " \
    "us, 99% under 28.7 us)"
/* From tests/data/cifar_tensors_async.mtrace (H100, backend:cudaMallocAsync). */
#define HOOKED                                                                                     \
    "hooked calls: about 2512 cudaMallocAsync/cudaFreeAsync, 4839 ns each on average inside "      \
    "memtrace after the call (1 in 16 timed)"

/* A trace of one allocation, these INFO notes, and an END at 10 s. */
static mt_analysis *with_notes(const char *stem, const char *const *notes, int n)
{
    fx f;
    fx_open(&f, stem);
    fx_ev(&f, MT_OP_ALLOC, 0, 0, 0x1000, 100, 1, 0);
    for (int i = 0; i < n; i++) {
        mt_record r = {.type = MT_REC_NOTE};
        r.u.note = (mt_note){.time_ns = FX_T0 + 9000 * MS, .level = MT_NOTE_INFO, .text = notes[i]};
        fx_put(&f, &r);
    }
    fx_end(&f, 10000, 1, 0);
    fx_close(&f);
    return fx_analyze(f.path);
}

Test(recording_cost, the_notes_of_a_gpu_run_add_up)
{
    const char *notes[] = {"Python frames: on", CALLBACKS, TENSORS, WHOLE, HOOKED};
    mt_analysis *a = with_notes("cost.mtrace", notes, 5);
    const mt_recording_cost *c = &a->cost;
    cr_expect_eq(c->tensors.calls, 421024);
    cr_expect(c->tensor_whole);
    cr_expect_float_eq(c->tensors.ns, 458.0, 1e-9, "the whole report's average, not the timed part's");
    cr_expect_eq(c->tensors.timed, 24775);
    cr_expect_eq(c->callbacks.calls, 112);
    cr_expect_float_eq(c->callbacks.ns, 10577.0, 1e-9);
    cr_expect_eq(c->callbacks.timed, 7); /* 112 / 16 */
    cr_expect_eq(c->hooked.calls, 2512);
    cr_expect_float_eq(c->hooked.ns, 4839.0, 1e-9);
    double total = 421024.0 * 458 + 112.0 * 10577 + 2512.0 * 4839;
    cr_expect_float_eq(mt_recording_cost_ns(c), total, 1e-3);

    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    /* 192.83 + 1.18 + 12.16 ms = 206.17 ms of the 10 s recorded */
    cr_expect(strstr(text, "recording cost: about 206.17 ms of memtrace's own work on the "
                           "program's threads, 2.06% of the 10.000000 s recorded (421024 tensor "
                           "reports × 458 ns, 112 CUDA API callbacks × 10577 ns (rough: from 7 "
                           "timed calls), 2512 cudaMallocAsync/cudaFreeAsync calls × 4839 ns;"),
              "%s", text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, ".json");
    cr_expect(strstr(json, "\"recording_cost\":{\"ns\":206169184,\"share_of_duration\":0.0206169,"
                           "\"tensor_report_whole\":true,\"until_ns\":null,"
                           "\"tensor_reports\":{\"calls\":421024,"
                           "\"ns_each\":458,\"timed\":24775},\"callbacks\":{\"calls\":112,"
                           "\"ns_each\":10577,\"timed\":7},\"hooked_calls\":{\"calls\":2512,"
                           "\"ns_each\":4839,\"timed\":157},\"rare_work\":{\"calls\":0,"
                           "\"ns_each\":0,\"timed\":0},\"writer_thread\":null}"),
              "%s", json);
    free(text);
    free(json);
    mt_analysis_free(a);
}

/* The whole report's note may come first; the timed part's note must not replace it. */
Test(recording_cost, the_whole_report_wins_in_either_order)
{
    const char *notes[] = {WHOLE, TENSORS};
    mt_analysis *a = with_notes("cost_order.mtrace", notes, 2);
    cr_expect_float_eq(a->cost.tensors.ns, 458.0, 1e-9);
    cr_expect_eq(a->cost.tensors.timed, 24775);
    cr_expect_eq(a->cost.tensors.calls, 421024);
    mt_analysis_free(a);
    const char *older[] = {TENSORS}; /* a recorder from before the whole report's note */
    a = with_notes("cost_older.mtrace", older, 1);
    cr_expect(!a->cost.tensor_whole);
    cr_expect_float_eq(a->cost.tensors.ns, 519.0, 1e-9);
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "421024 tensor reports × 519 ns (time stamp not included)"), "%s", text);
    free(text);
    mt_analysis_free(a);
}

/* Parts that stand on few timed calls are marked, and the total with them when they weigh. */
Test(recording_cost, few_timed_calls_are_called_rough)
{
    const char *notes[] = {"callbacks: about 32 (API entry and exit), 722676 ns each on average "
                           "inside memtrace (1 in 16 timed)",
                           "tensor reports: about 2256 allocations and frees, 846 ns each on "
                           "average inside memtrace (1 in 16 timed)"};
    mt_analysis *a = with_notes("cost_rough.mtrace", notes, 2);
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "recording cost: about 25.03 ms (rough: 92% of it from parts with few "
                           "timed calls) of"), "%s", text);
    /* 141 timed tensor reports: not rough */
    cr_expect(strstr(text, "(2256 tensor reports × 846 ns (time stamp not included), 32 CUDA API "
                           "callbacks × 722676 ns (rough: from 2 timed calls);"), "%s", text);
    free(text);
    mt_analysis_free(a);
    const char *few[] = {"tensor reports: about 688 allocations and frees, 816 ns each on average "
                         "inside memtrace (1 in 16 timed)"};
    a = with_notes("cost_few.mtrace", few, 1);
    text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "about 561.4 µs (rough: 100% of it from parts with few timed calls) of"),
              "%s", text);
    cr_expect(strstr(text, "(688 tensor reports × 816 ns (time stamp not included; rough: from 43 "
                           "timed calls);"), "%s", text);
    free(text);
    mt_analysis_free(a);
}

/* Notes are text in an untrusted file: anything that does not read as a cost note is no cost. */
Test(recording_cost, notes_that_do_not_read_add_nothing)
{
    const char *notes[] = {
        "tensor reports: about x allocations, 519 ns each on average",
        "tensor reports: about 5 allocations, 1e999 ns each on average",
        "callbacks: about 18446744073709551615 (API), 9999999999999999 ns each on average",
        "callbacks: about 12 (API entry and exit), ns each on average",
        "callbacks about 12, 5 ns each on average",
        "hooked calls: about 7 calls, 12 ns each",
        "tensor reports, whole: about 12 ns each on average",
        "tensor reports, whole: 1.2.3 ns each on average",
        "tensor reports:about 3, 4 ns each on average",
        "",
    };
    mt_analysis *a = with_notes("cost_hostile.mtrace", notes, 10);
    cr_expect_eq(mt_recording_cost_ns(&a->cost), 0.0);
    cr_expect(!a->cost.tensor_whole);
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "recording cost") == NULL, "%s", text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, ".json");
    cr_expect(strstr(json, "\"recording_cost\":null,"), "%s", json);
    free(text);
    free(json);
    mt_analysis_free(a);
}

/* Verbatim from a trace recorded on an H200 (samples/cifar.py, --tensors; 2026-11-27). */
#define RARE                                                                                       \
    "rare work: 135 pieces, 78163 ns each on average on the program's threads, each timed "       \
    "(stacks built 59: 0.477 ms in all, the longest 0.050 ms; walks not remembered 69: 2.053 ms " \
    "in all, the longest 0.452 ms; thread starts 6: 0.302 ms in all, the longest 0.122 ms; CUDA " \
    "resource events 1: 7.720 ms in all, the longest 7.720 ms; left out of the sampled times "    \
    "here)"

/* Rare, slow work is timed every time: counted once, added to the sampled parts, never rough. */
Test(recording_cost, rare_work_counts_once_and_is_never_rough)
{
    const char *notes[] = {RARE, WHOLE, TENSORS, CALLBACKS};
    mt_analysis *a = with_notes("cost_rare.mtrace", notes, 4);
    const mt_recording_cost *c = &a->cost;
    cr_expect_eq(c->rare.calls, 135);
    cr_expect_eq(c->rare.timed, 135, "every piece timed");
    cr_expect_float_eq(c->rare.ns, 78163.0, 1e-9);
    double total = 421024.0 * 458 + 112.0 * 10577 + 135.0 * 78163;
    cr_expect_float_eq(mt_recording_cost_ns(c), total, 1e-3);
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    /* 192.83 + 1.18 + 10.55 ms */
    cr_expect(strstr(text, "recording cost: about 204.57 ms of memtrace's own work"), "%s", text);
    cr_expect(strstr(text, ", 135 pieces of rare work × 78163 ns (stacks built, thread starts, "
                           "waits...; each timed);"), "%s", text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, ".json");
    cr_expect(strstr(json, "\"rare_work\":{\"calls\":135,\"ns_each\":78163,\"timed\":135},"),
              "%s", json);
    free(text);
    free(json);
    mt_analysis_free(a);
    /* few pieces, most of the total: still exact, so neither the part nor the total is rough */
    const char *few[] = {"rare work: 3 pieces, 2000000 ns each on average on the program's threads",
                         "tensor reports: about 2256 allocations and frees, 846 ns each on "
                         "average inside memtrace (1 in 16 timed)"};
    a = with_notes("cost_rare_few.mtrace", few, 2);
    text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "recording cost: about 7.91 ms of memtrace's own work"), "%s", text);
    cr_expect(strstr(text, "3 pieces of rare work × 2000000 ns (stacks built, thread starts, "
                           "waits...; each timed);"), "%s", text);
    cr_expect(strstr(text, "rough") == NULL, "%s", text);
    free(text);
    mt_analysis_free(a);
    const char *hostile[] = {
        "rare work: about 12 pieces, 5 ns each on average",
        "rare work: 12 pieces 5 ns each on average",
        "rare work: 12 things, 5 ns each on average",
        "rare work: 0 pieces, 5 ns each on average",
        "rare work: 12 pieces, 1e999 ns each on average",
        "rare work: -12 pieces, 5 ns each on average",
        "rare work: 12 pieces, ns each on average",
    };
    a = with_notes("cost_rare_hostile.mtrace", hostile, 7);
    cr_expect_eq(mt_recording_cost_ns(&a->cost), 0.0);
    mt_analysis_free(a);
}

/* A trace the recorder wrote on the GPU (tests/data, H100): its notes read back as they say. */
Test(recording_cost, a_gpu_recorded_fixture)
{
    mt_analysis *a = fx_analyze(MT_TEST_DATA_DIR "/gpt2_tensors.mtrace");
    cr_expect_eq(a->cost.tensors.calls, 4576);
    cr_expect_float_eq(a->cost.tensors.ns, 884.0, 1e-9);
    cr_expect_eq(a->cost.tensors.timed, 286);
    cr_expect_eq(a->cost.callbacks.calls, 16);
    cr_expect_float_eq(a->cost.callbacks.ns, 113.0, 1e-9);
    cr_expect_eq(a->cost.hooked.calls, 0);
    mt_analysis_free(a);
}

/* A trace of one allocation, INFO notes at the given times (ms), events until last_ms, and an
 * END there only when `ended`: a killed process has none. */
static mt_analysis *with_notes_at(const char *stem, const char *const *notes, const int *at_ms,
                                  int n, uint64_t last_ms, int ended)
{
    fx f;
    fx_open(&f, stem);
    fx_ev(&f, MT_OP_ALLOC, 0, 0, 0x1000, 100, 1, 0);
    for (int i = 0; i < n; i++) {
        mt_record r = {.type = MT_REC_NOTE};
        r.u.note = (mt_note){.time_ns = FX_T0 + (uint64_t)at_ms[i] * MS, .level = MT_NOTE_INFO,
                             .text = notes[i]};
        fx_put(&f, &r);
    }
    fx_ev(&f, MT_OP_FREE, 0, 0, 0x1000, 0, last_ms, 0);
    if (ended) fx_end(&f, last_ms, 2, 0);
    fx_close(&f);
    return fx_analyze(f.path);
}

/* The running totals, as the recorder writes them (src/trace/cost_note.c) */
static void running(char *buf, size_t len, uint64_t tensors, double tensor_ns, int whole,
                    uint64_t callbacks, uint64_t rare)
{
    mt_cost_part t = {.calls = tensors, .ns = tensor_ns, .timed = tensors / 16};
    mt_cost_part cb = {.calls = callbacks, .ns = 1814, .timed = callbacks / 16};
    mt_cost_part h = {0};
    mt_cost_part r = {.calls = rare, .ns = 78163, .timed = rare};
    mt_cost_running_note(buf, len, &t, whole, &cb, &h, &r);
}

/* A killed process leaves no notes at exit: the last running totals give the cost, and say up to
 * when; a process that exits gives its notes at exit, whatever running totals came before. */
Test(recording_cost, a_killed_process_has_its_running_totals)
{
    char first[640], last[640];
    running(first, sizeof first, 1600, 500, 1, 32, 100);
    running(last, sizeof last, 32000, 454, 1, 80, 135);
    const char *notes[] = {first, "Python frames: on", last};
    int at[] = {5000, 6000, 15000};
    mt_analysis *a = with_notes_at("cost_killed.mtrace", notes, at, 3, 20000, 0);
    const mt_recording_cost *c = &a->cost;
    cr_expect_eq(c->until_ns, 15000 * MS, "the last running totals' time");
    cr_expect_eq(c->tensors.calls, 32000);
    cr_expect_float_eq(c->tensors.ns, 454.0, 1e-9);
    cr_expect_eq(c->tensors.timed, 2000);
    cr_expect(c->tensor_whole);
    cr_expect_eq(c->callbacks.calls, 80);
    cr_expect_eq(c->callbacks.timed, 5);
    cr_expect_eq(c->rare.calls, 135);
    cr_expect_eq(c->rare.timed, 135);
    double total = 32000.0 * 454 + 80.0 * 1814 + 135.0 * 78163;
    cr_expect_float_eq(mt_recording_cost_ns(c), total, 1e-3);
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    /* 14.528 + 0.145 + 10.552 ms = 25.23 ms, 0.17% of 15 s (not of the 20 s recorded); the
     * rough callbacks are under a tenth of it */
    cr_expect(strstr(text, "recording cost: about 25.23 ms of memtrace's own work on the "
                           "program's threads until "
                           "15.000000 s, 0.17% of that time (the process left no notes at exit: "
                           "these are its last running totals; 20.000000 s recorded in all) (32000 "
                           "tensor reports × 454 ns, 80 CUDA API callbacks × 1814 ns (rough: from "
                           "5 timed calls), 135 pieces of rare work"), "%s", text);
    char brief[64], sentence[1024];
    cr_assert(mt_cost_describe(a, brief, sizeof brief, sentence, sizeof sentence));
    cr_expect_str_eq(brief, "25.23 ms (0.17% of the first 15.000 s)", "record's summary, HTML");
    char *json = fx_capture(a, fx_report_json_fn, NULL, ".json");
    cr_expect(strstr(json, "\"share_of_duration\":0.00168168,\"tensor_report_whole\":true,"
                           "\"until_ns\":15000000000,"), "%s", json);
    free(text);
    free(json);
    mt_analysis_free(a);

    /* the same run, exited: its notes at exit, over the whole recording */
    const char *exited[] = {first, last, WHOLE, TENSORS, CALLBACKS};
    int at2[] = {5000, 15000, 19000, 19000, 19000};
    a = with_notes_at("cost_exited.mtrace", exited, at2, 5, 20000, 1);
    cr_expect_eq(a->cost.until_ns, 0);
    cr_expect_eq(a->cost.tensors.calls, 421024, "the notes at exit");
    cr_expect_eq(a->cost.rare.calls, 0, "nothing of the running totals");
    json = fx_capture(a, fx_report_json_fn, NULL, ".json");
    cr_expect(strstr(json, "\"until_ns\":null,"), "%s", json);
    free(json);
    mt_analysis_free(a);
}

/* The running totals read back exactly as written, or not at all. */
Test(recording_cost, running_totals_read_whole_or_not_at_all)
{
    char note[640];
    mt_cost_part t = {.calls = 18446744073709551615ull, .ns = 0.4, .timed = 7};
    mt_cost_part cb = {.calls = 3, .ns = 999999999999.0, .timed = 0};
    mt_cost_part h = {.calls = 2512, .ns = 4839, .timed = 157};
    mt_cost_part r = {0};
    mt_cost_running_note(note, sizeof note, &t, 0, &cb, &h, &r);
    mt_recording_cost c = {.until_ns = 42};
    cr_assert(mt_cost_read_running(&c, note), "%s", note);
    cr_expect_eq(c.tensors.calls, 18446744073709551615ull);
    cr_expect_float_eq(c.tensors.ns, 0.0, 1e-9, "written as %%.0f");
    cr_expect(!c.tensor_whole);
    cr_expect_float_eq(c.callbacks.ns, 999999999999.0, 1e-3);
    cr_expect_eq(c.hooked.timed, 157);
    cr_expect_eq(c.rare.calls, 0);
    cr_expect_eq(c.until_ns, 42, "left to the caller");
    const char *hostile[] = {
        "recording cost so far: tensor reports 1 x 2 ns (3 timed)",
        "recording cost so far: tensor reports 1 x 2 ns (3 timed), callbacks 1 x 2 ns (3 timed), "
        "hooked calls 1 x 2 ns (3 timed), rare work 1 x 1e999 ns (3 timed)",
        "recording cost so far: tensor reports 1 x 2 ns (3 timed), callbacks 1 x 2 ns (3 timed), "
        "hooked calls 1 x 2 ns (3 timed), rare work 1 x -2 ns (3 timed)",
        "recording cost so far: tensor reports 1 x 2 ns (3 timed), callbacks 1 x nan ns (3 timed), "
        "hooked calls 1 x 2 ns (3 timed), rare work 1 x 2 ns (3 timed)",
        "recording cost so far: tensor reports -1 x 2 ns (3 timed), callbacks 1 x 2 ns (3 timed), "
        "hooked calls 1 x 2 ns (3 timed), rare work 1 x 2 ns (3 timed)",
        "recording cost so far: tensor reports 1 x 2 ns (3 timed, half), callbacks 1 x 2 ns (3 "
        "timed), hooked calls 1 x 2 ns (3 timed), rare work 1 x 2 ns (3 timed)",
        "recording cost so far: callbacks 1 x 2 ns (3 timed), tensor reports 1 x 2 ns (3 timed), "
        "hooked calls 1 x 2 ns (3 timed), rare work 1 x 2 ns (3 timed)",
        "recording cost so far:tensor reports 1 x 2 ns (3 timed), callbacks 1 x 2 ns (3 timed), "
        "hooked calls 1 x 2 ns (3 timed), rare work 1 x 2 ns (3 timed)",
        "recording cost so far: tensor reports 1 x 2 ns (3 timed), callbacks 1 x 2 ns (3 timed), "
        "hooked calls 1 x 2 ns (3 timed), rare work 1 x 2 ns (timed)",
        "recording cost so far: ",
        "recording cost so far",
    };
    const mt_recording_cost before = c;
    for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
        cr_expect(!mt_cost_read_running(&c, hostile[i]), "read: %s", hostile[i]);
        cr_expect(memcmp(&c, &before, sizeof c) == 0, "touched by: %s", hostile[i]);
    }
    cr_expect(!mt_cost_read_running(&c, NULL));
}

/* The writer thread's note (recorders since 2026-11-28): said beside the total, never added to
 * it, since it ran on none of the program's threads; a note that does not read as the recorder
 * writes it is left out. */
#define WRITER                                                                                     \
    "writer thread: 212.4 ms of CPU in 9.875 s (2.15% of one core) over 61 cycles: 40.2 ms in "    \
    "its ticks (modules, pool polls, CUPTI's buffers flushed), the rest ordering, compressing "    \
    "and writing the trace; on none of the program's threads, so in none of the times above"

Test(recording_cost, the_writer_thread_is_said_beside_the_total)
{
    const char *notes[] = {WHOLE, TENSORS, WRITER};
    mt_analysis *a = with_notes("cost_writer.mtrace", notes, 3);
    cr_expect_float_eq(a->cost.writer_cpu_ns, 212.4e6, 1e-3);
    cr_expect_float_eq(a->cost.writer_wall_ns, 9.875e9, 1e-3);
    cr_expect_float_eq(mt_recording_cost_ns(&a->cost), 421024.0 * 458, 1e-3, "not in the total");
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "sampled self-timing); beside it, 212.40 ms of CPU on memtrace's "
                           "writer thread, 2.15% of one core over its 9.875 s (ordering, "
                           "compressing and writing the trace)"),
              "%s", text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, ".json");
    cr_expect(strstr(json, "\"writer_thread\":{\"cpu_ns\":212400000,\"wall_ns\":9875000000}}"),
              "%s", json);
    free(text);
    free(json);
    mt_analysis_free(a);

    static const char *const bad[] = {
        "writer thread: 1e3 ms of CPU in 9.875 s (x)",    /* not as the recorder writes it */
        "writer thread: 212.4 ms of CPU in 0.000 s (x)",  /* no time to run in */
        "writer thread: -1 ms of CPU in 9.875 s (x)",
        "writer thread: 212.4 ms of CPU in 9.8.75 s (x)",
        "writer thread: inf ms of CPU in 9.875 s (x)",
        "writer thread: 212.4 ms of CPU in 9.875 s",     /* cut short */
        "writer thread: 9999999999 ms of CPU in 9.875 s (x)", /* more than a recorder can run */
        "writer thread:212.4 ms of CPU in 9.875 s (x)",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *n[] = {WHOLE, TENSORS, bad[i]};
        mt_analysis *b = with_notes("cost_writer_bad.mtrace", n, 3);
        cr_expect(b->cost.writer_cpu_ns == 0 && b->cost.writer_wall_ns == 0, "read: %s", bad[i]);
        char *t = fx_capture(b, fx_report_text_fn, NULL, ".txt");
        cr_expect(!strstr(t, "writer thread"), "%s", t);
        free(t);
        mt_analysis_free(b);
    }
}

/* The notes as the recorder wrote them on the GPU, writer thread included: a tensor-mode run of
 * samples/cifar.py recorded on an H200 on 2026-11-28 (tests/data/cifar_tensors_h200.mtrace; its
 * notes: `memtrace dump FILE | grep '^note'`). The synthetic notes above are copies; this one
 * fails if the recorder's wording and the reader's drift apart. */
Test(recording_cost, a_gpu_recorded_trace_says_its_cost_and_its_writer_thread)
{
    mt_analysis *a = fx_analyze(MT_TEST_DATA_DIR "/cifar_tensors_h200.mtrace");
    const mt_recording_cost *c = &a->cost;
    cr_expect(c->tensor_whole);
    cr_expect_eq(c->tensors.calls, 1984);
    cr_expect_float_eq(c->tensors.ns, 716.0, 1e-9);
    cr_expect_eq(c->callbacks.calls, 64);
    cr_expect_float_eq(c->callbacks.ns, 1604.0, 1e-9);
    cr_expect_eq(c->rare.calls, 142);
    cr_expect_float_eq(c->writer_cpu_ns, 12.0e6, 1e-3);
    cr_expect_float_eq(c->writer_wall_ns, 6.131e9, 1e-3);
    double total = 1984.0 * 716 + 64.0 * 1604 + 142.0 * 20273;
    cr_expect_float_eq(mt_recording_cost_ns(c), total, 1e-3, "the writer's CPU is not in it");
    char *text = fx_capture(a, fx_report_text_fn, NULL, ".txt");
    cr_expect(strstr(text, "recording cost: about 4.40 ms of memtrace's own work on the program's "
                           "threads"), "%s", text);
    cr_expect(strstr(text, "; beside it, 12.00 ms of CPU on memtrace's writer thread, 0.20% of "
                           "one core over its 6.131 s (ordering, compressing and writing the "
                           "trace)"), "%s", text);
    char *json = fx_capture(a, fx_report_json_fn, NULL, ".json");
    cr_expect(strstr(json, "\"writer_thread\":{\"cpu_ns\":12000000,\"wall_ns\":6131000000}}"),
              "%s", json);
    free(text);
    free(json);
    mt_analysis_free(a);
}
