/* cost_note.c — the text of the recorder's running cost totals (MT_COST_NOTE_RUNNING, trace.h).
 *
 * Written here, beside the format, and read in src/compact/recording_cost.c: the recorder and the
 * analysis must agree on it to the character, and a test of the trace library can write one and
 * read it back without CUDA. */
#include <stdio.h>

#include "memtrace/trace.h"

void mt_cost_running_note(char *buf, size_t len, const mt_cost_part *tensors, int tensor_whole,
                          const mt_cost_part *callbacks, const mt_cost_part *hooked,
                          const mt_cost_part *rare)
{
    if (!buf || !len) return;
    snprintf(buf, len,
             MT_COST_NOTE_RUNNING ": tensor reports %llu x %.0f ns (%llu timed%s), callbacks %llu x "
             "%.0f ns (%llu timed), hooked calls %llu x %.0f ns (%llu timed), rare work %llu x "
             "%.0f ns (%llu timed) (the running totals, noted while the program runs so that a "
             "trace whose process is killed still says what recording cost until then)",
             (unsigned long long)tensors->calls, tensors->ns, (unsigned long long)tensors->timed,
             tensor_whole ? ", whole" : "", (unsigned long long)callbacks->calls, callbacks->ns,
             (unsigned long long)callbacks->timed, (unsigned long long)hooked->calls, hooked->ns,
             (unsigned long long)hooked->timed, (unsigned long long)rare->calls, rare->ns,
             (unsigned long long)rare->timed);
}
