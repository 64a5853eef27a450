/* The device the reader gives to CUPTI activity records that name no context (src/trace/
 * contextless.h): CUPTI says device 0 for a context's static memory whatever the device. Synthetic
 * traces for each rule, through runs of alike events (the run decoder) and events each of its own
 * (the record decoder); then the traces recorded on 2 x H200 that showed it. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memtrace/trace.h"
#include "testutil.h"

#define A ((uint64_t)0x7f8e6dc30000)
#define INF MT_EF_DEVICE_INFERRED
#define GUESS (MT_EF_DEVICE_INFERRED | MT_EF_DEVICE_GUESSED)

typedef struct {
    char path[256];
    mt_writer *w;
    uint64_t t;
} tw;

static void tw_open(tw *x)
{
    mt_test_tmpname(x->path, sizeof x->path, "ctxless.mtrace");
    int fd = open(x->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    mt_file_header h = {.version = MT_TRACE_VERSION, .pid = 7, .start_monotonic_ns = 1};
    x->w = mt_writer_open_fd(fd, &h, 0);
    cr_assert_not_null(x->w);
    x->t = 1000;
}

static void tw_device(tw *x, int32_t ordinal)
{
    mt_record r = {.type = MT_REC_DEVICE};
    r.u.device = (mt_device){.ordinal = ordinal, .name = "GPU", .uuid = ""};
    cr_assert_eq(mt_writer_put(x->w, &r), 0);
}

/* An event; `alone` changes its stream (a rare field) so that it cannot join a run. */
static void tw_event(tw *x, uint8_t op, uint8_t kind, int32_t device, uint32_t ctx, uint16_t flags,
                     uint64_t addr, int alone)
{
    mt_record r = {.type = MT_REC_EVENT};
    r.u.event = (mt_event){.time_ns = x->t += 10,
                           .address = addr,
                           .bytes = 555,
                           .aux = 6,
                           .context = ctx,
                           .device = device,
                           .flags = flags,
                           .op = op,
                           .kind = kind,
                           .stream = alone ? x->t : 0};
    cr_assert_eq(mt_writer_put(x->w, &r), 0);
}

/* n contextless driver allocations (or frees) at A + i * 256, as CUPTI gives them: device 0 */
static void tw_static(tw *x, uint8_t op, size_t first, size_t n, int alone)
{
    for (size_t i = first; i < first + n; i++)
        tw_event(x, op, MT_KIND_DRIVER, 0, 0, MT_EF_ACTIVITY, A + i * 256, alone && i % 2);
}

typedef struct {
    int32_t device;
    uint16_t flags;
} placed;

#define FILLER ((uint64_t)0x100000000)
#define IS_FILLER(a) ((a) >= FILLER && (a) < FILLER + 4096 * 512)

/* The events read back, in order: device and the reader's flags. First 4096 events of a context
 * of their own are written after, so that the run decoder, which stops near a lane's end, has
 * room for the runs before them (they are left out of what is read back). */
static size_t read_back(tw *x, placed *out, size_t cap)
{
    for (uint64_t i = 0; i < 4096; i++) {
        /* every lane gets bytes: the decoder takes a run only while each has room for it */
        mt_record r = {.type = MT_REC_EVENT};
        r.u.event = (mt_event){.time_ns = x->t += 1000 + i % 7 * 300,
                               .address = FILLER + i * 512,
                               .bytes = 512 * (1 + i % 5),
                               .stack = 1 + (uint32_t)(i % 9),
                               .correlation = (uint32_t)(i * 3),
                               .context = 1,
                               .device = 1,
                               .op = MT_OP_ALLOC,
                               .kind = MT_KIND_DEVICE};
        cr_assert_eq(mt_writer_put(x->w, &r), 0);
    }
    cr_assert_eq(mt_writer_close(x->w, 1), 0);
    char err[512];
    mt_reader *r = mt_reader_open(x->path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    size_t n = 0;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD)
        if (rec.type == MT_REC_EVENT && !IS_FILLER(rec.u.event.address) && n < cap)
            out[n++] = (placed){
                rec.u.event.device,
                (uint16_t)(rec.u.event.flags & (MT_EF_DEVICE_INFERRED | MT_EF_DEVICE_GUESSED))};
    mt_reader_close(r);
    unlink(x->path);
    return n;
}

static void expect_range(const placed *p, size_t from, size_t to, int32_t device, uint16_t flags)
{
    for (size_t i = from; i < to; i++)
        cr_expect(p[i].device == device && p[i].flags == flags,
                  "event %zu: device %d flags %#x, expected %d %#x", i, p[i].device, p[i].flags,
                  device, flags);
}

Test(contextless, the_only_device_so_far_is_exact)
{
    for (int alone = 0; alone < 2; alone++) {
        tw x;
        tw_open(&x);
        tw_device(&x, 1);
        tw_event(&x, MT_OP_ALLOC, MT_KIND_DEVICE, 1, 1, 0, 0x1000, 1); /* a cudaMalloc: its own */
        tw_static(&x, MT_OP_ALLOC, 0, 300, alone);
        tw_static(&x, MT_OP_FREE, 0, 300, alone);
        placed p[700];
        cr_assert_eq(read_back(&x, p, 700), 601);
        expect_range(p, 0, 1, 1, 0);
        expect_range(p, 1, 601, 1, INF);
    }
}

Test(contextless, before_any_device_the_records_own)
{
    tw x;
    tw_open(&x);
    tw_static(&x, MT_OP_ALLOC, 0, 10, 0);
    tw_device(&x, 2);
    tw_static(&x, MT_OP_ALLOC, 10, 10, 0);
    placed p[20];
    cr_assert_eq(read_back(&x, p, 20), 20);
    expect_range(p, 0, 10, 0, 0);
    expect_range(p, 10, 20, 2, INF);
}

/* cuda:0's context, then cuda:1's: the second batch is the newer context's (a guess), and each
 * release goes where its allocation went, even once both devices are known. */
Test(contextless, with_several_the_latest_context_and_releases_follow_their_allocation)
{
    for (int alone = 0; alone < 2; alone++) {
        tw x;
        tw_open(&x);
        tw_device(&x, 0);
        tw_static(&x, MT_OP_ALLOC, 0, 50, alone);
        tw_device(&x, 1);
        tw_static(&x, MT_OP_ALLOC, 50, 50, alone);
        tw_static(&x, MT_OP_FREE, 0, 100, alone);
        tw_static(&x, MT_OP_FREE, 200, 5, alone); /* never allocated: placed like one */
        tw_static(&x, MT_OP_ALLOC, 0, 5, alone);  /* an address used again, placed anew */
        placed p[300];
        cr_assert_eq(read_back(&x, p, 300), 210);
        expect_range(p, 0, 50, 0, INF);
        expect_range(p, 50, 100, 1, GUESS);
        expect_range(p, 100, 150, 0, INF);
        expect_range(p, 150, 200, 1, GUESS);
        expect_range(p, 200, 210, 1, GUESS);
    }
}

/* Activity records come late, in CUPTI's buffers: every stamp read before a DEVICE record is
 * earlier than its context, so records stamped before the second context's were made in the
 * first (exact, though written after the second's DEVICE record); those stamped after it go to the
 * newer one (a guess). */
Test(contextless, a_record_stamped_before_a_context_was_made_is_not_its)
{
    for (int alone = 0; alone < 2; alone++) {
        tw x;
        tw_open(&x);
        tw_device(&x, 0);
        tw_event(&x, MT_OP_ALLOC, MT_KIND_DEVICE, 0, 1, 0, 0x1000, 1); /* a cudaMalloc on cuda:0 */
        uint64_t early = x.t;
        x.t += 1000000; /* 1 ms later, still before cuda:1's context */
        tw_event(&x, MT_OP_ALLOC, MT_KIND_DEVICE, 0, 1, 0, 0x2000, 1);
        uint64_t bound = x.t;
        tw_device(&x, 1);
        x.t = early; /* cuda:0's static memory, stamped before, written now */
        tw_static(&x, MT_OP_ALLOC, 0, 50, alone);
        x.t = bound - 10; /* stamped at the bound (tw_event adds 10): still before cuda:1's... */
        tw_static(&x, MT_OP_ALLOC, 50, 1, alone);
        tw_static(&x, MT_OP_ALLOC, 51, 49, alone); /* ...and past it, maybe cuda:1's */
        tw_device(&x, 0); /* a third context, on cuda:0 again: after it, several are possible */
        tw_static(&x, MT_OP_ALLOC, 100, 5, alone);
        x.t = early; /* stamped before cuda:1's and the third context: cuda:0 still, exactly */
        tw_static(&x, MT_OP_ALLOC, 105, 5, alone);
        placed p[200];
        cr_assert_eq(read_back(&x, p, 200), 112);
        expect_range(p, 0, 2, 0, 0);
        expect_range(p, 2, 52, 0, INF);
        expect_range(p, 52, 53, 0, INF);
        expect_range(p, 53, 102, 1, GUESS);
        expect_range(p, 102, 107, 0, GUESS);
        expect_range(p, 107, 112, 0, INF);
    }
}

/* What CUPTI does name stays as it is: a context's own records, host memory, callbacks' events. */
Test(contextless, named_contexts_host_memory_and_callbacks_are_untouched)
{
    tw x;
    tw_open(&x);
    tw_device(&x, 1);
    tw_event(&x, MT_OP_ALLOC, MT_KIND_DRIVER, 0, 3, MT_EF_ACTIVITY, A, 1);      /* context 3 */
    tw_event(&x, MT_OP_ALLOC, MT_KIND_DRIVER, -1, 0, MT_EF_ACTIVITY, A + 8, 1); /* host */
    tw_event(&x, MT_OP_ALLOC, MT_KIND_DEVICE, 0, 0, 0, A + 16, 1);              /* a callback */
    tw_device(&x, -1); /* a context whose device the recorder could not tell: no device named */
    tw_static(&x, MT_OP_ALLOC, 10, 1, 1);
    placed p[4];
    cr_assert_eq(read_back(&x, p, 4), 4);
    expect_range(p, 0, 1, 0, 0);
    expect_range(p, 1, 2, -1, 0);
    expect_range(p, 2, 3, 0, 0);
    expect_range(p, 3, 4, 1, INF);
}

/* Counts the events of a GPU-recorded trace by device, and how many the reader placed. */
static void count_fixture(const char *name, uint64_t *on, uint64_t *inferred, uint64_t *guessed)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s", MT_TEST_DATA_DIR, name);
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    cr_assert_not_null(r, "%s", err);
    mt_record rec;
    while (mt_reader_next(r, &rec) == MT_READ_RECORD) {
        if (rec.type != MT_REC_EVENT || rec.u.event.device < 0 || rec.u.event.device > 1) continue;
        on[rec.u.event.device]++;
        if (rec.u.event.flags & MT_EF_DEVICE_INFERRED) inferred[rec.u.event.device]++;
        if (rec.u.event.flags & MT_EF_DEVICE_GUESSED) guessed[rec.u.event.device]++;
    }
    mt_reader_close(r);
}

/* samples/context_memory.py on 2 x H200: cuda:0, then cuda:1 2 s later; CUPTI gave all 576 static
 * records as device 0. Each context loads the same modules: 288 records each. */
Test(contextless, gpu_two_contexts_each_get_their_own_static_memory)
{
    uint64_t on[2] = {0}, inf[2] = {0}, guess[2] = {0};
    count_fixture("contexts_two_gpus.mtrace", on, inf, guess);
    cr_expect_eq(inf[0], 288);
    cr_expect_eq(guess[0], 0, "cuda:0's are from before cuda:1's context: exact");
    cr_expect_eq(inf[1], 288);
    cr_expect_eq(guess[1], 288, "cuda:1's came with the newer of two contexts");
}

/* The same program on cuda:1 only, and torchrun's rank 1 (tests/data/ddp_rank1.mtrace): every
 * event on cuda:1, none on cuda:0 (NVML listed neither process there). */
Test(contextless, gpu_a_process_on_gpu1_has_nothing_on_gpu0)
{
    static const char *const names[] = {"contexts_gpu1.mtrace", "ddp_rank1.mtrace"};
    static const uint64_t statics[] = {288, 1974};
    for (int i = 0; i < 2; i++) {
        uint64_t on[2] = {0}, inf[2] = {0}, guess[2] = {0};
        count_fixture(names[i], on, inf, guess);
        cr_expect_eq(on[0], 0, "%s: %llu events on cuda:0", names[i], (unsigned long long)on[0]);
        cr_expect_eq(inf[1], statics[i], "%s", names[i]);
        cr_expect_eq(guess[1], 0, "%s", names[i]);
    }
}

/* samples/ddp.py --stray 256 under torchrun on 2 x H200 (tests/data/ddp_stray_rank1.mtrace): rank 1
 * loaded a checkpoint onto cuda:0 before torch.cuda.set_device(1). The 51 static records of its
 * cuda:0 context were stamped then but came in CUPTI's buffer after its cuda:1 context's DEVICE
 * record: cuda:0, exactly. The rest came with cuda:1's context (the newer: a guess). */
Test(contextless, gpu_late_records_of_the_first_context_stay_on_its_gpu)
{
    uint64_t on[2] = {0}, inf[2] = {0}, guess[2] = {0};
    count_fixture("ddp_stray_rank1.mtrace", on, inf, guess);
    cr_expect_eq(inf[0], 51);
    cr_expect_eq(guess[0], 0);
    cr_expect_eq(inf[1], 1974);
    cr_expect_eq(guess[1], 1974);
}
