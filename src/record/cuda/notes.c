/* What the recorder says: one warning per problem on stderr (and in the trace), notes in the
 * trace only, and at exit what recording cost the program, measured on itself. */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "recorder.h"

#define MAX_WARNINGS 64 /* distinct warning keys; each is a string literal */

static void put_note(int level, const char *msg)
{
    mt_sink *sink = mt_rec.sink;
    if (!sink) return;
    mt_record rec = {.type = MT_REC_NOTE};
    rec.u.note = (mt_note){.time_ns = mt_now_ns(), .level = (uint8_t)level, .text = msg};
    mt_sink_put_copy(sink, &rec);
}

int mt_warn_once(const char *key, const char *fmt, ...)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static const char *said[MAX_WARNINGS];
    pthread_mutex_lock(&lock);
    int seen = 0, n = 0;
    for (; n < MAX_WARNINGS && said[n]; n++)
        if (said[n] == key) seen = 1;
    if (!seen && n < MAX_WARNINGS) said[n] = key;
    pthread_mutex_unlock(&lock);
    if (seen) return 0;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "memtrace: %s\n", msg);
    put_note(MT_NOTE_WARNING, msg);
    return 1;
}

void mt_trace_note(int level, const char *fmt, ...)
{
    if (!mt_rec.sink) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    put_note(level, msg);
}

static double per(uint64_t total, uint64_t n) { return n ? (double)total / (double)n : 0.0; }

static void put_ns(char *buf, size_t len, uint64_t ns)
{
    if (ns < 10000) snprintf(buf, len, "%" PRIu64 " ns", ns);
    else snprintf(buf, len, "%.1f us", (double)ns / 1000.0);
}

/* "; timed calls: median under 310 ns, 90% under 520 ns, 99% under 2.1 us" (cost_spread.h:
 * the upper bounds of the buckets where those fractions of the timed calls are reached). */
static const char *spread_text(const mt_cost_spread *sp, char *buf, size_t len)
{
    buf[0] = 0;
    if (!mt_cost_quantile_end(sp, 1.0)) return buf;
    char t[3][32];
    put_ns(t[0], sizeof t[0], mt_cost_quantile_end(sp, 0.5));
    put_ns(t[1], sizeof t[1], mt_cost_quantile_end(sp, 0.9));
    put_ns(t[2], sizeof t[2], mt_cost_quantile_end(sp, 0.99));
    snprintf(buf, len, "; timed calls: median under %s, 90%% under %s, 99%% under %s", t[0], t[1],
             t[2]);
    return buf;
}

/* One sampled cost, as the notes of the hot paths put it:
 *   "NAME: about N WHAT, X ns each on average WHERE (ASIDE1 in 16 timed; timed calls: ...TAIL)"
 * nothing when there were no calls. */
static void cost_note(const char *name, const char *what, const char *where, const char *aside,
                      uint64_t calls, uint64_t ns, const mt_cost_spread *spread, const char *tail)
{
    if (!calls) return;
    char sp[160];
    mt_trace_note(MT_NOTE_INFO,
                  "%s: about %" PRIu64 " %s, %.0f" MT_COST_NOTE_EACH " %s (%s1 in %d timed%s%s)",
                  name, calls, what, per(ns, calls), where, aside, MT_TIME_SAMPLE,
                  spread_text(spread, sp, sizeof sp), tail);
}

/* "; the longest 912.3 us: cuMemAlloc_v2, at its exit" (mt_cost_longest); "" when none */
static const char *longest_text(uint64_t longest, char *buf, size_t len)
{
    buf[0] = 0;
    if (!MT_LONGEST_NS(longest)) return buf;
    char t[32];
    put_ns(t, sizeof t, MT_LONGEST_NS(longest));
    uint32_t what = MT_LONGEST_WHAT(longest);
    const char *name = mt_api_name(what >> 1);
    if (name[0])
        snprintf(buf, len, "; the longest %s: %s, at its %s", t, name, what & 1 ? "exit" : "entry");
    else
        snprintf(buf, len, "; the longest %s: callback %u", t, what >> 1);
    return buf;
}

/* "rare work: 68 pieces, 491177 ns each on average on the program's threads, each timed (stacks
 * built 52: 4.200 ms in all, the longest 0.310 ms; ...)": the work rare_work.h times every time,
 * by kind. */
static void rare_note(void)
{
    uint64_t pieces = atomic_load(&mt_rare_all.sections);
    if (!pieces) return;
    char kinds[640] = "";
    size_t n = 0;
    for (int k = 0; k < MT_RARE_KINDS && n < sizeof kinds; k++) {
        uint64_t c = atomic_load(&mt_rare_all.kind_sections[k]);
        if (!c) continue;
        double all = (double)atomic_load(&mt_rare_all.kind_ns[k]) / 1e6;
        double longest = (double)atomic_load(&mt_rare_all.kind_max_ns[k]) / 1e6;
        int w = snprintf(kinds + n, sizeof kinds - n,
                         "%s %" PRIu64 ": %.3f ms in all, the longest %.3f ms; ",
                         mt_rare_kind_names[k], c, all, longest);
        if (w > 0) n += (size_t)w;
    }
    mt_trace_note(MT_NOTE_INFO,
                  MT_COST_NOTE_RARE ": %" PRIu64 MT_COST_NOTE_PIECES ", %.0f" MT_COST_NOTE_EACH
                  " on the program's threads, each timed (%sleft out of the sampled times here)",
                  pieces, per(atomic_load(&mt_rare_all.ns), pieces), kinds);
}

/* The whole tensor report's average in ns, from its samples timed in TSC cycles, and how many
 * there were; 0 while there are none or the TSC's rate is unknown. */
static double whole_report_ns(mt_recorder *r, uint64_t *timed)
{
    double ns_per_cycle = mt_clock_tsc_khz() ? 1e6 / (double)mt_clock_tsc_khz() : 0.0;
    uint64_t calls = 0, cycles = 0;
    for (int k = 0; k < 3; k++) {
        calls += atomic_load(&r->tensors.whole_calls[k]);
        cycles += atomic_load(&r->tensors.whole_cycles[k]);
    }
    *timed = calls;
    return calls && ns_per_cycle > 0 ? per(cycles, calls) * ns_per_cycle : 0.0;
}

/* A sampled part as the notes give it: calls, the average, the timed calls (1 in MT_TIME_SAMPLE) */
static mt_cost_part sampled_part(_Atomic uint64_t *calls, _Atomic uint64_t *ns)
{
    uint64_t n = atomic_load(calls);
    return (mt_cost_part){.calls = n, .ns = per(atomic_load(ns), n), .timed = n / MT_TIME_SAMPLE};
}

/* The running totals (MT_COST_NOTE_RUNNING, trace.h): on the writer thread, 5 s after the trace
 * is created and then at intervals that double up to a minute, so that a trace whose process is
 * killed (a job's time limit, the kernel's OOM killer, a rank's abort) still says what recording
 * cost until then. A minute at most: the figure a killed run reports leaves out at most its last
 * minute, and says up to when it counts. A ten-hour run writes ~600 of these notes (~450 bytes
 * of text each before compression), a run of a minute four. Only the parts `memtrace report`
 * adds up, in one note, so that a kill between two notes cannot leave half of them. */
#define RUNNING_FIRST_NS 5000000000ull
#define RUNNING_MAX_EVERY_NS 60000000000ull

void mt_cost_running_tick(mt_recorder *r, uint64_t now)
{
    if (!mt_sink_is_open(r->sink)) return;
    if (!r->running.every_ns) { /* the first tick of an open trace */
        r->running.every_ns = RUNNING_FIRST_NS;
        r->running.next_ns = now + RUNNING_FIRST_NS;
        return;
    }
    if (now < r->running.next_ns) return;
    r->running.every_ns = r->running.every_ns * 2 < RUNNING_MAX_EVERY_NS ? r->running.every_ns * 2
                                                                          : RUNNING_MAX_EVERY_NS;
    r->running.next_ns = now + r->running.every_ns;
    mt_cost_part tensors = sampled_part(&r->tensors.calls, &r->tensors.ns);
    uint64_t whole_timed;
    double whole = whole_report_ns(r, &whole_timed);
    if (whole > 0) tensors.ns = whole, tensors.timed = whole_timed;
    mt_cost_part callbacks = sampled_part(&r->costs.callbacks, &r->costs.callback_ns);
    mt_cost_part hooked = sampled_part(&r->hooks.calls, &r->hooks.ns);
    uint64_t pieces = atomic_load(&mt_rare_all.sections);
    mt_cost_part rare = {.calls = pieces, .ns = per(atomic_load(&mt_rare_all.ns), pieces),
                         .timed = pieces};
    if (!(tensors.calls | callbacks.calls | hooked.calls | rare.calls)) return;
    char text[640];
    mt_cost_running_note(text, sizeof text, &tensors, whole > 0, &callbacks, &hooked, &rare);
    mt_trace_note(MT_NOTE_INFO, "%s", text);
}

/* The cost budget is part of the product: what memtrace's own work took, per call, from its
 * sampled self-timing (MT_TIME_SAMPLE), and what the writer made threads wait. */
void mt_write_cost_notes(mt_recorder *r)
{
    char clock_line[320];
    mt_clock_describe(clock_line, sizeof clock_line);
    mt_trace_note(MT_NOTE_INFO, "%s", clock_line);
    if (r->cfg.census) mt_census_note(r);
    char longest[160];
    cost_note(MT_COST_NOTE_CALLBACKS, "(API entry and exit)", "inside memtrace",
              "CUPTI's own dispatch not included; ", atomic_load(&r->costs.callbacks),
              atomic_load(&r->costs.callback_ns), &r->costs.callback_spread,
              longest_text(atomic_load(&r->costs.callback_longest), longest, sizeof longest));
    cost_note(MT_COST_NOTE_HOOKED, "cudaMallocAsync/cudaFreeAsync",
              "inside memtrace after the call", "", atomic_load(&r->hooks.calls),
              atomic_load(&r->hooks.ns), &r->hooks.spread, "");
    cost_note(MT_COST_NOTE_TENSORS, "allocations and frees reported by PyTorch's caching allocator",
              "inside memtrace", "", atomic_load(&r->tensors.calls), atomic_load(&r->tensors.ns),
              &r->tensors.spread, "");
    double ns_per_cycle = mt_clock_tsc_khz() ? 1e6 / (double)mt_clock_tsc_khz() : 0.0;
    uint64_t wa = atomic_load(&r->tensors.whole_calls[0]), wf = atomic_load(&r->tensors.whole_calls[1]);
    uint64_t wn = atomic_load(&r->tensors.whole_calls[2]);
    uint64_t ca = atomic_load(&r->tensors.whole_cycles[0]), cf = atomic_load(&r->tensors.whole_cycles[1]);
    uint64_t cn = atomic_load(&r->tensors.whole_cycles[2]), whole_timed;
    double whole = whole_report_ns(r, &whole_timed);
    char split[160] = "";
    if (wa && wn) /* both kinds of thread allocated: a training step, forward and backward */
        snprintf(split, sizeof split, ": %.0f ns with Python frames, %.0f ns without (%.0f%% of "
                 "them, autograd's threads)", per(ca, wa) * ns_per_cycle,
                 per(cn, wn) * ns_per_cycle, 100.0 * per(wn, wa + wn));
    if (whole > 0)
        mt_trace_note(MT_NOTE_INFO,
                      MT_COST_NOTE_TENSORS_WHOLE ": %.0f" MT_COST_NOTE_EACH " from the "
                      "stand-in's entry to its return, time stamp and in-flight count included "
                      "(allocations %.0f ns%s; frees %.0f ns; %" PRIu64 " other reports, timed in "
                      "TSC cycles and not by the clock: what an untimed report costs)",
                      whole, per(ca + cn, wa + wn) * ns_per_cycle, split,
                      per(cf, wf) * ns_per_cycle, whole_timed);
    rare_note();
    cost_note("events", "recorded", "to put one into its thread's buffer",
              "part of the times above; ", atomic_load(&r->costs.sink_calls),
              atomic_load(&r->costs.sink_ns), &r->costs.sink_spread, "");
    uint64_t samples = atomic_load(&r->costs.nvml_samples);
    double round_ns = per(atomic_load(&r->costs.nvml_ns), samples);
    if (samples)
        mt_trace_note(MT_NOTE_INFO,
                      "NVML sampler: %" PRIu64 " rounds on its own thread, %.0f us each on "
                      "average, the longest %.0f us (every %d ms: %.2f%% of one core)",
                      samples, round_ns / 1000.0,
                      (double)atomic_load(&r->costs.nvml_max_ns) / 1000.0, (int)r->cfg.nvml_ms,
                      100.0 * round_ns / (r->cfg.nvml_ms * 1e6));
    mt_unwind_totals u;
    mt_unwind_stats(&u);
    if (u.walks) {
        double w = (double)u.walks;
        mt_trace_note(MT_NOTE_INFO,
                      "unwinder: %" PRIu64 " walks, %.1f%% ended on an earlier walk's frames "
                      "(%.1f%% were one as a whole; %.2f remembered walks compared per walk), "
                      "%.1f frames stepped by rule per walk, %" PRIu64 " rule-cache misses; "
                      "%" PRIu64 " walks without a key (neither a Python frame nor a "
                      "stand-in to name the call site), %.1f%% of them whole; %" PRIu64
                      " walks remembered, %" PRIu64 " of them in place of another call site's",
                      u.walks, 100.0 * (double)u.memo_hits / w, 100.0 * (double)u.whole_hits / w,
                      (double)u.ways_checked / w, (double)u.rule_steps / w, u.rule_misses,
                      u.keyless, 100.0 * per(u.keyless_whole_hits, u.keyless), u.stored, u.evicted);
    }
    uint64_t calls = atomic_load(&r->costs.stack_calls);
    uint64_t built = atomic_load(&r->costs.stack_built);
    uint64_t nopy = atomic_load(&r->costs.nopy_calls);
    char sp[160], nopy_text[200] = "", py_text[120] = "";
    if (r->py && (r->cfg.stacks & MT_STACKS_PYTHON) && nopy < calls) { /* with Python frames */
        uint64_t with = calls - nopy;
        uint64_t py_ns = atomic_load(&r->costs.python_ns) - atomic_load(&r->costs.nopy_python_ns);
        snprintf(py_text, sizeof py_text, "; in a stack with them %.0f ns, the innermost found in "
                 "%.0f ns", per(py_ns, with), per(atomic_load(&r->costs.python_top_ns), with));
    }
    if (nopy && nopy < calls) /* a Python process whose allocations are on both kinds of thread */
        snprintf(nopy_text, sizeof nopy_text, "; with no Python frame (autograd's threads, "
                 "%.0f%%): %.0f ns, of which finding none %.0f ns, native unwinding %.0f ns",
                 100.0 * per(nopy, calls), per(atomic_load(&r->costs.nopy_ns), nopy),
                 per(atomic_load(&r->costs.nopy_python_ns), nopy),
                 per(atomic_load(&r->costs.nopy_unwind_ns), nopy));
    if (calls)
        mt_trace_note(MT_NOTE_INFO,
                      "stack capture: about %" PRIu64 " stacks, %.0f ns each on average (of which "
                      "Python frames %.0f ns%s; native unwinding %.0f ns%s); %.1f%% the same as the "
                      "call site's last stack (leaf memo; %.1f%% found in its table), the "
                      "others %.1f frames long (%.1f%% of them after a walk the unwinder did not "
                      "hold whole); 1 in %d timed%s; %u trie nodes",
                      calls, per(atomic_load(&r->costs.stack_ns), calls),
                      per(atomic_load(&r->costs.python_ns), calls), py_text,
                      per(atomic_load(&r->costs.unwind_ns), calls), nopy_text,
                      100.0 * (1.0 - per(built, calls)),
                      100.0 * per(atomic_load(&r->costs.stack_from_table), calls),
                      per(atomic_load(&r->costs.stack_frames), built),
                      100.0 * per(atomic_load(&r->costs.stack_built_walked), built),
                      MT_TIME_SAMPLE, spread_text(&r->costs.stack_spread, sp, sizeof sp),
                      mt_trie_size(r->trie));
    uint64_t unaddressed = atomic_load(&r->activity.unaddressed);
    if (unaddressed)
        mt_trace_note(MT_NOTE_INFO, "activity: %" PRIu64 " driver allocation records without an "
                      "address (%" PRIu64 " bytes in all) were not recorded as allocations: "
                      "unmapped physical pages, such as a graph memory pool's (its reservation "
                      "counts them)",
                      unaddressed, atomic_load(&r->activity.unaddressed_bytes));
    uint64_t unnamed = atomic_load(&r->activity.arrays.unnamed);
    if (unnamed) /* the arrays are in the trace, their bytes right; only who made them is lost */
        mt_trace_note(MT_NOTE_WARNING,
                      "activity: %" PRIu64 " CUDA arrays (%" PRIu64 " bytes in "
                      "all) are recorded without the stack of the call that made them: more "
                      "than %u were made before CUPTI delivered their records",
                      unnamed, atomic_load(&r->activity.arrays.unnamed_bytes), MT_ARRAY_SLOTS);
    uint64_t skipped = atomic_load(&r->capture.skipped_polls);
    if (skipped)
        mt_trace_note(MT_NOTE_INFO, "graph capture: %" PRIu64 " pool polls waited for a CUDA "
                      "graph capture to end (no CUDA call is made while one is in progress)",
                      skipped);
    mt_sink_stats st;
    mt_sink_stats_now(r->sink, &st);
    if (st.waits || st.late)
        mt_trace_note(st.late ? MT_NOTE_WARNING : MT_NOTE_INFO,
                      "writer: threads found their buffer full %" PRIu64 " times and waited "
                      "%.3f ms in all (longest %.3f ms) for it to be written; %" PRIu64
                      " events reached the writer after later ones had been written (out of "
                      "time order)", st.waits, (double)st.wait_ns / 1e6,
                      (double)st.max_wait_ns / 1e6, st.late);
    /* The writer's own work runs on none of the program's threads, so none of the times above
     * holds it; a step can still pay for it where the machine has fewer free cores than busy
     * threads. Its share of one core says whether that could matter. */
    if (st.writer_cycles && st.writer_wall_ns)
        mt_trace_note(MT_NOTE_INFO,
                      MT_COST_NOTE_WRITER ": %.1f" MT_COST_NOTE_CPU_IN "%.3f s (%.2f%% of one "
                      "core) over %" PRIu64
                      " cycles: %.1f ms in its ticks (modules, pool polls, CUPTI's buffers "
                      "flushed), the rest ordering, compressing and writing the trace; on none "
                      "of the program's threads, so in none of the times above",
                      (double)st.writer_cpu_ns / 1e6, (double)st.writer_wall_ns / 1e9,
                      100.0 * (double)st.writer_cpu_ns / (double)st.writer_wall_ns,
                      st.writer_cycles, (double)st.writer_tick_cpu_ns / 1e6);
}
