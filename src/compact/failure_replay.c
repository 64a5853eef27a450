/* What a kept failed request needs that pass 1 cannot know at its moment, taken in a replay of the
 * trace: pass 2's when there is one (peak_replay.c), else a read of its own up to the failure.
 *
 * Why: pass 1 reads the trace once, in order, and some of what a failure needs is only known
 * later. The backward() call that started a backward pass is found among allocations of another
 * thread by their stacks' Python frames (backward_calls.c). And what the tensors live at the
 * failure were for (parameters, activations, gradients of activations...) takes their stacks'
 * names, which `record` writes after the run (SYMBOL records at the end of the trace), so pass 1
 * cannot categorize them: a replay runs the tracker with the categorizer, as pass 2 does up to
 * the peak, and keeps each GPU's live tensor bytes by category at each failure (by_category). Those
 * are the categories of that moment: until a backward pass ends, a gradient it handed to .grad
 * without a copy counts among its backward temporaries (categories.c).
 *
 * What it costs: nothing unless a kept failure wants either (an OOM run, mostly under --tensors).
 * A trace with tensors has pass 2, which goes on reading, if it has to, up to the last such
 * failure: most OOM runs end at theirs, after their peak, so that is a few more events than pass 2
 * reads anyway. Without tensors (a backward pass's failure under backend:cudaMallocAsync) the
 * trace is read once more up to that failure, without a tracker.
 */
#include <string.h>

#include "analysis_parts.h"
#include "err_text.h" /* src/util: mt_err_text */

/* A request on a GPU of a tensor trace: its tensors' categories then are worth keeping. */
static int wants_categories(const mt_analysis *a, const mt_failed_request *f)
{
    return a->categories && !f->is_host && f->device >= 0;
}

static void keep_categories(const mt_tracker *t, mt_failed_request *f)
{
    const mt_usage *u = mt_tracker_usage(t, f->device, 0);
    f->categories_known = 1;
    if (u) memcpy(f->by_category, u->by_category, sizeof f->by_category);
}

void mt_failure_watch_begin(mt_analysis *a, mt_failure_watch *w)
{
    memset(w, 0, sizeof *w);
    for (size_t i = 0; i < a->n_failed; i++) {
        const mt_failed_request *f = &a->failed[i];
        int cats = wants_categories(a, f) && !f->categories_known, call = mt_backward_wanted(a, f);
        w->categorize |= cats;
        w->calls |= call;
        if ((cats || call) && f->event_index > w->last) w->last = f->event_index;
    }
}

int mt_failure_watch_event(mt_analysis *a, mt_failure_watch *w, const mt_event *e, mt_tracker *t)
{
    if (!mt_failure_watch_wants(w)) return 0;
    w->events++;
    int rc = w->calls ? mt_backward_see(a, &w->seen, e) : 0;
    /* before its own event is applied: a failed request changes no category */
    for (; w->next < a->n_failed && a->failed[w->next].event_index <= w->events; w->next++) {
        mt_failed_request *f = &a->failed[w->next];
        if (f->event_index != w->events) continue;
        if (w->calls) mt_backward_name(a, &w->seen, f);
        if (t && wants_categories(a, f) && !f->categories_known) keep_categories(t, f);
    }
    return rc;
}

void mt_failure_categories_now(mt_analysis *a, mt_failed_request *f, const mt_tracker *t)
{
    if (wants_categories(a, f)) keep_categories(t, f);
}

void mt_failure_categories_settle(mt_analysis *a, int ok)
{
    for (size_t i = 0; i < a->n_failed; i++) {
        mt_failed_request *f = &a->failed[i];
        if (!ok) {
            f->categories_known = 0;
            memset(f->by_category, 0, sizeof f->by_category);
        } else if (wants_categories(a, f) && !f->categories_known) {
            f->categories_known = 1; /* before the first tensor: nothing live had a category */
        }
    }
}

void mt_failure_watch_end(mt_failure_watch *w)
{
    mt_backward_seen_free(&w->seen);
}

int mt_failure_replay(mt_analysis *a, char *err, size_t errlen)
{
    mt_failure_watch w;
    mt_failure_watch_begin(a, &w);
    if (!mt_failure_watch_wants(&w)) return 0;
    mt_reader *r = mt_reader_open_fd(a->fd, a->path, err, errlen);
    if (!r) return -1;
    mt_tracker_hooks none = {0};
    mt_tracker *t = w.categorize ? mt_tracker_new(&none) : NULL;
    if (t) mt_tracker_set_categorizer(t, a->categories);
    int rc = w.categorize && !t ? -1 : 0;
    const mt_record *rec; /* in the reader's batch, not copied: valid until the next read */
    while (rc == 0 && mt_failure_watch_wants(&w) && mt_reader_next_ref(r, &rec) == MT_READ_RECORD) {
        if (rec->type != MT_REC_EVENT) continue;
        if (mt_failure_watch_event(a, &w, &rec->u.event, t) < 0) rc = -1;
        if (t && mt_tracker_event(t, &rec->u.event) < 0) rc = -1;
    }
    if (rc < 0) mt_err_text(err, errlen, "%s: out of memory", a->path);
    mt_tracker_free(t);
    mt_failure_watch_end(&w);
    mt_reader_close(r);
    return rc;
}
