/* The caller's stack at an allocating call, as a leaf id of the stack trie.
 *
 * Frames come innermost first from the unwinder; the first ones are ours and CUPTI's and the
 * driver's (kept: they are cheap once interned, and the analysis side knows which modules are the
 * CUDA stack). A stack the unwinder could not finish ends in a "[truncated]" pseudo frame at the
 * outermost end, so a flame graph shows where knowledge stops instead of a wrong root.
 */
#include <stdlib.h>

#include "recorder.h"

uint32_t mt_capture_stack(mt_recorder *r, uint16_t *flags)
{
    static __thread mt_trie_cache *cache;
    if (!r->cfg.stacks) return 0;
    if (!cache && !(cache = calloc(1, sizeof *cache))) return 0;

    uint64_t words[MT_MAX_FRAMES];
    int truncated = 0;
    int n = mt_unwind(words, MT_MAX_FRAMES - 1, 1, &truncated);
    for (int i = 0; i < n; i++) words[i] = MT_FRAME_WORD(MT_FRAME_NATIVE, words[i]);
    if (truncated) {
        words[n++] = MT_FRAME_WORD(MT_FRAME_PSEUDO, MT_PSEUDO_TRUNCATED);
        *flags |= MT_EF_STACK_TRUNCATED;
    }
    return mt_trie_intern(r->trie, cache, words, n);
}
