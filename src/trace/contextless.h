/* contextless.h — the device of a CUPTI activity record that names no context (contextless.c;
 * private to src/trace: the feed applies it to every event it decodes).
 *
 * CUPTI reports a context's static device memory (the __device__ variables of every module the
 * driver loads into it, ~200-650 KiB a context for PyTorch, NCCL and cuBLAS) with context id 0
 * and device id 0, whatever the device: seen on 2 x H200 (CUDA 13.0, driver 580) in a torchrun
 * rank on GPU 1, whose trace then said the rank had memory on GPU 0, and in a process that used
 * GPU 0 then GPU 1, whose second context's records came 2.8 s later, still as device 0. NVML
 * listed neither process on the other GPU. So the reader gives such a record a device of its own
 * choosing, the same for every consumer of the trace:
 *   - the trace has named one device so far (MT_REC_DEVICE, written when a context is made): that
 *     device, which is exact (MT_EF_DEVICE_INFERRED);
 *   - several, but the record's time stamp comes before every context of all but one device was
 *     made: that device, exact too (below);
 *   - else the device of the newest context made before the record's time, which is right for
 *     the records that come when a context is made and loads its modules, and a guess for a module
 *     loaded later into an older context (MT_EF_DEVICE_INFERRED | MT_EF_DEVICE_GUESSED);
 *   - none: the record's own device.
 * When a context was made: its DEVICE record has no time stamp, but every record written before
 * it in the file was stamped before it was made (the recorder's sink writes a drain's side
 * records, DEVICE among them, before its events, and a drain writes only events stamped before it
 * began: src/record/sink.c), so the latest stamp read before it is a lower bound. Activity
 * records come up to seconds late, in CUPTI's buffers: a torchrun rank that loaded a checkpoint
 * onto GPU 0 before torch.cuda.set_device(1) had its GPU 0 context's static memory written after
 * its GPU 1 context's DEVICE record, and the rule by file order alone put it on GPU 1.
 * The release of such an allocation gets the device its allocation got (a context's static memory
 * is released at exit, when every device may be known), remembered per address for up to
 * MT_CTXLESS_REMEMBERED addresses; past that, a release is placed like an allocation.
 */
#ifndef MT_TRACE_CONTEXTLESS_H
#define MT_TRACE_CONTEXTLESS_H

#include <stdint.h>

#include "memtrace/trace.h"
#include "u64map.h" /* src/util */

#define MT_CTXLESS_REMEMBERED (1u << 17)

#define MT_CTXLESS_CONTEXTS 64 /* contexts whose making is remembered; past that, by file order */

typedef struct mt_ctxless {
    uint64_t devices; /* ordinals 0..63 named by a DEVICE record so far */
    int many;         /* an ordinal past 63 was named: never "one device" */
    int32_t latest;   /* the ordinal of the latest DEVICE record, -1 none */
    uint64_t
        seen_ns;     /* the latest time stamp read so far (some of them: a lower bound is enough) */
    uint32_t n_made; /* contexts named so far (at most MT_CTXLESS_CONTEXTS are kept) */
    struct {
        int32_t ordinal;
        uint64_t after_ns; /* made after this time (seen_ns when its DEVICE record was read) */
    } made[MT_CTXLESS_CONTEXTS];
    mt_u64map placed; /* address -> a = device + 1, b = flags given (a = 0: released) */
} mt_ctxless;

void mt_ctxless_init(mt_ctxless *s);
void mt_ctxless_free(mt_ctxless *s);
void mt_ctxless_device(mt_ctxless *s, int32_t ordinal); /* a DEVICE record */
/* A time stamp read from the trace (an event's, a sample's, a note's), in file order. */
static inline void mt_ctxless_seen(mt_ctxless *s, uint64_t time_ns)
{
    if (time_ns > s->seen_ns) s->seen_ns = time_ns;
}

/* Does e need a device of the reader's choosing? (An activity record without a context that names
 * a device: host memory keeps -1.) */
static inline int mt_ctxless_wants(const mt_event *e)
{
    return (e->flags & MT_EF_ACTIVITY) && e->context == 0 && e->device >= 0;
}
void mt_ctxless_place(mt_ctxless *s, mt_event *e); /* for an e that mt_ctxless_wants */

#endif
