/* The trace read once more, up to its last kept failed request, for what pass 1 cannot know at
 * that moment.
 *
 * Why: pass 1 reads the trace once, in order, and some of what a failure needs is only known
 * later. The backward() call that started a backward pass is found among allocations of another
 * thread by their stacks' Python frames (backward_calls.c). And what the tensors live at the
 * failure were for (parameters, activations, gradients of activations...) takes their stacks'
 * names, which `record` writes after the run (SYMBOL records at the end of the trace), so pass 1
 * cannot categorize them: this replay runs the tracker with the categorizer, as pass 2 does up to
 * the peak, and keeps each GPU's live tensor bytes by category at each failure (by_category). Those
 * are the categories of that moment: until a backward pass ends, a gradient it handed to .grad
 * without a copy counts among its backward temporaries (categories.c).
 *
 * What it costs: only a trace with a kept failure that wants either (an OOM run, mostly under
 * --tensors) is read again, up to that failure, which ends most such runs: about what `report`
 * spends reading the trace once more.
 */
#include <string.h>

#include "analysis_parts.h"
#include "err_text.h" /* src/util: mt_err_text */

/* A request on a GPU of a tensor trace: its tensors' categories then are worth keeping. */
static int wants_categories(const mt_analysis *a, const mt_failed_request *f)
{
    return a->categories && !f->is_host && f->device >= 0;
}

static void keep_categories(mt_tracker *t, mt_failed_request *f)
{
    const mt_usage *u = mt_tracker_usage(t, f->device, 0);
    f->categories_known = 1;
    if (u) memcpy(f->by_category, u->by_category, sizeof f->by_category);
}

int mt_failure_replay(mt_analysis *a, char *err, size_t errlen)
{
    uint64_t last = 0;
    int categorize = 0, calls = 0;
    for (size_t i = 0; i < a->n_failed; i++) {
        const mt_failed_request *f = &a->failed[i];
        int cats = wants_categories(a, f), call = mt_backward_wanted(a, f);
        categorize |= cats;
        calls |= call;
        if ((cats || call) && f->event_index > last) last = f->event_index;
    }
    if (!last) return 0;
    mt_reader *r = mt_reader_open_fd(a->fd, a->path, err, errlen);
    if (!r) return -1;
    mt_backward_seen seen = {0};
    mt_tracker_hooks none = {0};
    mt_tracker *t = categorize ? mt_tracker_new(&none) : NULL;
    if (t) mt_tracker_set_categorizer(t, a->categories);
    uint64_t events = 0;
    size_t next = 0; /* failed[] is in the order of the events */
    int rc = categorize && !t ? -1 : 0;
    mt_record rec;
    while (rc == 0 && events < last && mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (rec.type != MT_REC_EVENT) continue;
        const mt_event *e = &rec.u.event;
        events++;
        if (calls && mt_backward_see(a, &seen, e) < 0) rc = -1;
        /* before its own event: a failed request changes no category */
        for (; next < a->n_failed && a->failed[next].event_index <= events; next++) {
            mt_failed_request *f = &a->failed[next];
            if (f->event_index != events) continue;
            if (calls) mt_backward_name(a, &seen, f);
            if (t && wants_categories(a, f)) keep_categories(t, f);
        }
        if (t && mt_tracker_event(t, e) < 0) rc = -1;
    }
    if (rc < 0) mt_err_text(err, errlen, "%s: out of memory", a->path);
    mt_tracker_free(t);
    mt_backward_seen_free(&seen);
    mt_reader_close(r);
    return rc;
}
