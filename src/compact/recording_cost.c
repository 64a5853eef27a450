/* What recording cost the program, read back from the recorder's notes at exit.
 *
 * The recorder times 1 call in 16 of each hot path on the thread that makes it and writes, at
 * exit, one note per path: "NAME: about CALLS WHAT, NS ns each on average ..." (notes.c; the
 * names are shared through trace.h), and one for its rare, slow work, which it times every
 * time ("rare work: PIECES pieces, NS ns each on average ..."; src/record/rare_work.h says why).
 * Their products, summed, are memtrace's own time on the program's threads. On the GPU the
 * per-step share of it matched the in-process A/B within the A/B's spread (docs/performance.md,
 * "What a step's cost is made of"), so the report can say what the run paid without a second,
 * untraced run. While the program runs, the recorder also notes its running totals, all parts in
 * one note (MT_COST_NOTE_RUNNING, written by src/trace/cost_note.c): the analysis takes the last
 * of them when a killed process left no notes at exit. A note that does not read as expected is
 * left out: the notes are text, and a trace is untrusted input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* After "NAME: " in text: the rest, or NULL when text is another note. */
static const char *after_name(const char *text, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(text, name, n) != 0 || text[n] != ':' || text[n + 1] != ' ') return NULL;
    return text + n + 2;
}

/* The number just before the first MT_COST_NOTE_EACH in s; -1 when there is none. */
static double ns_each(const char *s)
{
    const char *end = strstr(s, MT_COST_NOTE_EACH);
    if (!end) return -1;
    const char *p = end;
    while (p > s && (p[-1] == '.' || (p[-1] >= '0' && p[-1] <= '9'))) p--;
    if (p == end || (p > s && p[-1] != ' ')) return -1; /* a number of its own, as written */
    char *stop;
    double ns = strtod(p, &stop);
    /* at most 1000 s a call: a note that says more was not written by a recorder that ran */
    return stop == end && isfinite(ns) && ns >= 0 && ns <= 1e12 ? ns : -1;
}

/* The whole number just before the first `what` in s; 0 when there is none. */
static uint64_t number_before(const char *s, const char *what)
{
    const char *end = strstr(s, what), *p = end;
    if (!end) return 0;
    while (p > s && p[-1] >= '0' && p[-1] <= '9') p--;
    return p < end ? strtoull(p, NULL, 10) : 0;
}

/* "(... 1 in K timed ...)": the calls behind the average are CALLS / K (0 when not said). */
static uint64_t timed_of(const char *s, uint64_t calls)
{
    const char *p = strstr(s, "1 in ");
    if (!p) return 0;
    char *stop;
    unsigned long long k = strtoull(p + 5, &stop, 10);
    if (!k || strncmp(stop, " timed", 6) != 0) return 0;
    return calls / k;
}

/* "about CALLS ..., NS ns each on average ... (1 in K timed ...)": 1 with calls and ns, 0
 * otherwise. */
static int calls_and_ns(const char *s, mt_cost_part *part)
{
    if (!s || strncmp(s, "about ", 6) != 0 || s[6] < '0' || s[6] > '9') return 0;
    char *stop;
    unsigned long long n = strtoull(s + 6, &stop, 10);
    double each = ns_each(stop);
    if (each < 0) return 0;
    *part = (mt_cost_part){.calls = n, .ns = each, .timed = timed_of(stop, n)};
    return 1;
}

/* A number as the recorder writes it ("12.5": digits first, no sign, no exponent) at s, in
 * [0, max]; the character after it in *stop. -1 when s reads otherwise. */
static double plain_number(const char *s, double max, char **stop)
{
    const char *end = s;
    while ((*end >= '0' && *end <= '9') || *end == '.') end++;
    if (*s < '0' || *s > '9') return -1;
    double v = strtod(s, stop);
    return *stop == end && isfinite(v) && v <= max ? v : -1;
}

/* "MS ms of CPU in S s (...": the writer thread's note; 0 when it does not read so. */
static int writer_note(const char *s, mt_recording_cost *c)
{
    char *stop;
    /* at most ~11 days of CPU and of wall time: a recorder that ran says less */
    double ms = plain_number(s, 1e9, &stop);
    size_t n = strlen(MT_COST_NOTE_CPU_IN);
    if (ms < 0 || strncmp(stop, MT_COST_NOTE_CPU_IN, n) != 0) return 0;
    double secs = plain_number(stop + n, 1e6, &stop);
    if (!(secs > 0) || strncmp(stop, " s (", 4) != 0) return 0;
    c->writer_cpu_ns = ms * 1e6;
    c->writer_wall_ns = secs * 1e9;
    return 1;
}

void mt_cost_read_note(mt_recording_cost *c, const char *text)
{
    if (!text) return;
    const char *rest;
    if ((rest = after_name(text, MT_COST_NOTE_WRITER))) {
        writer_note(rest, c);
        return;
    }
    if ((rest = after_name(text, MT_COST_NOTE_TENSORS_WHOLE))) {
        double ns = ns_each(rest);
        if (ns >= 0 && strncmp(rest, "about ", 6) != 0) {
            c->tensors.ns = ns; /* the whole report replaces the timed part */
            c->tensors.timed = number_before(rest, " other reports");
            c->tensor_whole = 1;
        }
        return;
    }
    if ((rest = after_name(text, MT_COST_NOTE_RARE))) {
        char *stop;
        unsigned long long n = rest[0] >= '0' && rest[0] <= '9' ? strtoull(rest, &stop, 10) : 0;
        double ns = n ? ns_each(rest) : -1;
        if (n && strncmp(stop, MT_COST_NOTE_PIECES ",", strlen(MT_COST_NOTE_PIECES) + 1) == 0 &&
            ns >= 0)
            c->rare = (mt_cost_part){.calls = n, .ns = ns, .timed = n};
        return;
    }
    mt_cost_part p;
    if (calls_and_ns(after_name(text, MT_COST_NOTE_TENSORS), &p)) {
        if (c->tensor_whole) /* keep the whole report's average, and what it stands on */
            p.ns = c->tensors.ns, p.timed = c->tensors.timed;
        c->tensors = p;
    } else if (calls_and_ns(after_name(text, MT_COST_NOTE_CALLBACKS), &p)) {
        c->callbacks = p;
    } else if (calls_and_ns(after_name(text, MT_COST_NOTE_HOOKED), &p)) {
        c->hooked = p;
    }
}

/* "LABEL C x N ns (T timed" at s: the part; returns what follows "timed", or NULL when s reads
 * otherwise. */
static const char *running_part(const char *s, const char *label, mt_cost_part *p)
{
    size_t n = strlen(label);
    if (strncmp(s, label, n) != 0 || s[n] != ' ' || s[n + 1] < '0' || s[n + 1] > '9') return NULL;
    char *stop;
    unsigned long long calls = strtoull(s + n + 1, &stop, 10);
    if (strncmp(stop, " x ", 3) != 0 || stop[3] < '0' || stop[3] > '9') return NULL;
    double ns = strtod(stop + 3, &stop);
    /* at most 1000 s a call, as ns_each */
    if (!isfinite(ns) || ns < 0 || ns > 1e12 || strncmp(stop, " ns (", 5) != 0 || stop[5] < '0' ||
        stop[5] > '9')
        return NULL;
    unsigned long long timed = strtoull(stop + 5, &stop, 10);
    if (strncmp(stop, " timed", 6) != 0) return NULL;
    *p = (mt_cost_part){.calls = calls, .timed = timed, .ns = ns};
    return stop + 6;
}

/* ", LABEL C x N ns (T timed)" at s: the part, and what follows; NULL otherwise */
static const char *next_part(const char *s, const char *label, mt_cost_part *p)
{
    if (!s || strncmp(s, ", ", 2) != 0 || !(s = running_part(s + 2, label, p)) || *s != ')')
        return NULL;
    return s + 1;
}

int mt_cost_read_running(mt_recording_cost *c, const char *text)
{
    const char *s = text ? after_name(text, MT_COST_NOTE_RUNNING) : NULL;
    mt_recording_cost r = {0};
    if (!s || !(s = running_part(s, "tensor reports", &r.tensors))) return 0;
    if (strncmp(s, ", whole)", 8) == 0) r.tensor_whole = 1, s += 8;
    else if (*s == ')') s++;
    else return 0;
    s = next_part(s, "callbacks", &r.callbacks);
    s = next_part(s, "hooked calls", &r.hooked);
    s = next_part(s, "rare work", &r.rare);
    if (!s) return 0;
    r.until_ns = c->until_ns;
    *c = r;
    return 1;
}

double mt_recording_cost_ns(const mt_recording_cost *c)
{
    return (double)c->tensors.calls * c->tensors.ns + (double)c->callbacks.calls * c->callbacks.ns +
           (double)c->hooked.calls * c->hooked.ns + (double)c->rare.calls * c->rare.ns;
}
