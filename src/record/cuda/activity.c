/* CUPTI activity records: what the callbacks cannot see.
 *
 * MEMORY2 records describe every allocation the driver makes, including the ones no public API call
 * asked for (module loads, lazily loaded kernels' static data, internal buffers). A record whose
 * correlation id belongs to a memory API call we already recorded is a duplicate and only adds the
 * nothing; any other is a driver-internal allocation, recorded as MT_KIND_DRIVER under the
 * "[driver internal]" pseudo frame, never dropped; but a CUDA array's record (memory kind ARRAY:
 * cuArrayCreate and the like, which no callback can size) is the array's event, MT_KIND_ARRAY,
 * with the stack its creating call's callback noted. (Pool sizes come from the driver itself, see
 * pool_poll.c, not from these records.)
 *
 * The activity API is process-global: torch.profiler (Kineto) registers its own buffer callbacks
 * and ours stop being called. The core record does not depend on activity, so the trace stays
 * correct for everything the callbacks see. Through memtrace's preload the registration is seen
 * (cupti_mux.c): memtrace stops its MEMORY2 records and flushes its own buffers first (so the
 * other client never gets a buffer or a record it did not ask for), then lets it have the API for
 * good, and the trace notes when. (Taking the API back when that client seems done once lost
 * torch.profiler's records: it flushes after it unsubscribes.) Without the preload the writer
 * tick notices the silence and notes once that enrichment stopped.
 */
#include <stdlib.h>
#include <string.h>

#include "recorder.h"

#define BUFFER_BYTES (1u << 20)
#define ACTIVITY_SILENCE_NS (3000000000ull) /* memory calls with no records this long = stolen */

void mt_corr_insert(mt_corr_set *s, uint32_t id)
{
    atomic_store_explicit(&s->ids[id & (MT_CORR_SLOTS - 1)], id, memory_order_relaxed);
}

/* Not removed on a match: one API call may have several records (CUPTI reports the mappings of
 * two cuMemMap calls under the second call's id, and releases a dying context's allocations under
 * the last id it handed out), and records of different contexts arrive in different buffers, in
 * no particular order. The slot is simply overwritten by a later id. */
int mt_corr_has(mt_corr_set *s, uint32_t id)
{
    return id != 0 &&
           atomic_load_explicit(&s->ids[id & (MT_CORR_SLOTS - 1)], memory_order_relaxed) == id;
}

/* A seqlock per slot: the id is cleared while the slot is written and published after it, and a
 * reader takes the slot only if it saw the same id before and after reading it. */
void mt_array_note(mt_recorder *r, uint32_t corr, uint32_t stack, uint32_t tid, uint16_t flags)
{
    unsigned i = corr & (MT_ARRAY_SLOTS - 1);
    atomic_store_explicit(&r->activity.arrays.corr[i], 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&r->activity.arrays.who[i], stack | (uint64_t)tid << 32,
                          memory_order_relaxed);
    atomic_store_explicit(&r->activity.arrays.flags[i], flags, memory_order_relaxed);
    atomic_store_explicit(&r->activity.arrays.corr[i], corr, memory_order_release);
}

/* The stack, thread and flags noted for the call with this id: 0 when none is (the slot was taken
 * again, or the call was made before the recorder knew it). */
static int array_creator(mt_recorder *r, uint32_t corr, mt_event *ev)
{
    unsigned i = corr & (MT_ARRAY_SLOTS - 1);
    if (!corr || atomic_load_explicit(&r->activity.arrays.corr[i], memory_order_acquire) != corr)
        return 0;
    uint64_t who = atomic_load_explicit(&r->activity.arrays.who[i], memory_order_relaxed);
    uint16_t flags = atomic_load_explicit(&r->activity.arrays.flags[i], memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&r->activity.arrays.corr[i], memory_order_relaxed) != corr) return 0;
    ev->stack = (uint32_t)who, ev->tid = (uint32_t)(who >> 32), ev->flags |= flags;
    return 1;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void on_memory(mt_recorder *r, const CUpti_ActivityMemory4 *m)
{
    atomic_fetch_add_explicit(&r->activity.records, 1, memory_order_relaxed);
    int is_alloc = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
    if (mt_corr_has(&r->activity.corr, m->correlationId)) return; /* the callbacks have it */
    /* Pool allocations are the hooks' while they record (no correlation id to match them by). */
    if (atomic_load_explicit(&r->hooks.active, memory_order_relaxed) &&
        m->memoryPoolConfig.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID)
        return;
    if (m->memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION &&
        m->memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE)
        return;
    /* An allocation without a virtual address: physical pages the driver takes for the device's
     * graph memory pool when a graph with memory nodes first runs (seen on an H100: three 32 MiB
     * records under the cuGraphLaunch that made the pool 96 MiB). No release can ever be paired
     * with address 0, and the pages are already in the graph pool's reservation that pool_poll.c
     * reads from the driver; counting them here too would count them twice. They are counted
     * and said in a note at the end, and the graph pool of that device is polled from now on. */
    if (is_alloc && m->address == 0) {
        atomic_fetch_add_explicit(&r->activity.unaddressed, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&r->activity.unaddressed_bytes, m->bytes, memory_order_relaxed);
        if (m->deviceId < 64) atomic_fetch_or(&r->graph_devices, 1ull << m->deviceId);
        return;
    }
    if (!is_alloc && m->address == 0) return; /* its allocation was not recorded either */
    int host = m->memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED ||
               m->memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
    mt_event ev = {0};
    ev.time_ns = m->timestamp;
    ev.op = is_alloc ? MT_OP_ALLOC : MT_OP_FREE;
    ev.kind = MT_KIND_DRIVER;
    ev.aux = (uint64_t)m->memoryKind;
    ev.address = m->address;
    ev.bytes = m->bytes;
    ev.device = host ? -1 : (int32_t)m->deviceId;
    ev.context = m->contextId;
    ev.stream = m->streamId;
    ev.correlation = m->correlationId;
    ev.flags = MT_EF_ACTIVITY;
    ev.stack = is_alloc ? r->driver_internal_stack : 0;
    /* A CUDA array is the program's (cuArrayCreate and the like; texture and surface memory): the
     * record has the driver's size, its creating call's callback left the stack */
    if (m->memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_ARRAY) {
        ev.kind = MT_KIND_ARRAY, ev.stack = 0;
        if (is_alloc && !array_creator(r, m->correlationId, &ev)) {
            atomic_fetch_add_explicit(&r->activity.arrays.unnamed, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&r->activity.arrays.unnamed_bytes, m->bytes,
                                      memory_order_relaxed);
        }
    }
    mt_sink_event(r->sink, &ev);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    mt_recorder *r = &mt_rec;
    CUpti_Activity *rec = NULL;
    /* In flight like a callback (at_exit waits for it before it frees the sink). r->sink, not
     * r->enabled: at exit the last flush runs after callbacks are switched off. */
    atomic_fetch_add(&r->inflight, 1);
    while (r->sink && r->cupti.ActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_MEMORY2)
            on_memory(r, (const CUpti_ActivityMemory4 *)rec);
    }
    atomic_fetch_sub(&r->inflight, 1);
    free(buffer);
}

#define ACTIVITY_FLUSH_MS 500 /* driver-internal allocations reach the trace within half a second */

int mt_activity_start(mt_recorder *r)
{
    if (r->cupti.ActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS)
        return -1;
    if (r->cupti.ActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2) != CUPTI_SUCCESS) return -1;
    /* CUPTI's own worker delivers full and partial buffers at least this often. */
    if (r->cupti.ActivityFlushPeriod) r->cupti.ActivityFlushPeriod(ACTIVITY_FLUSH_MS);
    r->activity.on = 1;
    return 0;
}

void mt_activity_yield(mt_recorder *r)
{
    /* Before the other client's buffers replace ours: no more MEMORY2 records into its buffers
     * (it did not ask for them), and ours still in flight delivered to us, not to it. */
    r->cupti.ActivityDisable(CUPTI_ACTIVITY_KIND_MEMORY2);
    r->cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void mt_activity_taken(mt_recorder *r)
{
    if (atomic_exchange(&r->activity.stopped, 1)) return;
    mt_trace_note(MT_NOTE_WARNING,
                  "%s: %s registered its own CUPTI activity buffers (the activity API is one per "
                  "process); driver-internal allocations from here to the end are not in the "
                  "trace, everything the API callbacks and hooks see still is",
                  MT_ACTIVITY_NOTE_STOPPED,
                  r->mux.guest_name[0] ? r->mux.guest_name : "another CUPTI client");
}

void mt_activity_flush(mt_recorder *r)
{
    r->cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

/* Before a failed request is stamped and written: the records CUPTI still holds (arrays released,
 * driver allocations made or released before it) are delivered and written first, so that what
 * the analysis, reading in file order, has in use at the failure is what was (on an H200, the
 * refusals of samples/array_kinds.c read 30.69 MiB in use, its arrays' releases still in a
 * buffer, where nothing was). At most one flush per FAILURE_FLUSH_GAP_NS, so that a program that
 * probes with failing requests in a loop does not pay for a flush each time. */
#define FAILURE_FLUSH_GAP_NS 10000000ull /* 10 ms */
void mt_activity_flush_before_failure(mt_recorder *r)
{
    if (!mt_activity_ours(r)) return;
    uint64_t now = mt_now_ns();
    uint64_t last = atomic_load_explicit(&r->activity.failure_flush_ns, memory_order_relaxed);
    if (now - last < FAILURE_FLUSH_GAP_NS ||
        !atomic_compare_exchange_strong(&r->activity.failure_flush_ns, &last, now))
        return;
    r->cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

/* Every tick, right before the writer's drain: a forced flush, so that the records of whatever
 * was made or released since the last one are in the sink when the drain sorts what it writes by
 * time. Records of operations stamped before the drain's cut are then written in their place
 * among the callbacks' events; before (a flush only when memory calls had brought no record),
 * the records of CUDA arrays and of driver allocations made by kernel launches waited in a buffer
 * that was not full, up to the end of the run (on an H200, the 3000 arrays of
 * samples/array_kinds.c were written after the failed requests the program made after them). */
void mt_activity_tick(mt_recorder *r)
{
    if (!mt_activity_ours(r)) return;
    uint64_t calls = atomic_load(&r->activity.memory_api_calls);
    uint64_t now = mt_now_ns();
    r->cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    uint64_t recs = atomic_load(&r->activity.records); /* those the flush delivered included */
    if (recs != r->activity.last_records || calls == r->activity.last_memory_api_calls) {
        r->activity.quiet_since_ns = 0; /* records flow, or nothing to wait for */
        r->activity.last_records = recs;
        r->activity.last_memory_api_calls = calls;
        return;
    }
    /* Memory calls happened but no record came, even after the flush: another client may have
     * taken the activity API. */
    if (!r->activity.quiet_since_ns) {
        r->activity.quiet_since_ns = now;
        return;
    }
    if (now - r->activity.quiet_since_ns < ACTIVITY_SILENCE_NS) return;
    atomic_store(&r->activity.stopped, 1);
    mt_trace_note(MT_NOTE_WARNING,
                  "%s: no CUPTI activity records for %.1f s while memory API calls continued "
                  "(another tool, e.g. torch.profiler, took the activity API). Driver-internal "
                  "allocations after this point are not in the trace; everything the API "
                  "callbacks see still is.",
                  MT_ACTIVITY_NOTE_STOPPED, (double)(now - r->activity.quiet_since_ns) / 1e9);
}
