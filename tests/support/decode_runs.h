/* decode_runs.h — mt_decode_events (runs of plain events read without a bound check per field)
 * against mt_decode_record (every field checked), on one chunk's raw payload: the records, the
 * lanes' positions, the codec's state and where decoding fails must all be the same whichever way
 * a run of events is read. Header-only, shared by tests/test_trace_decode_runs.c and the payload
 * fuzzer (tests/fuzz), which calls it on every input. */
#ifndef MT_TEST_DECODE_RUNS_H
#define MT_TEST_DECODE_RUNS_H

#include <stdio.h>
#include <string.h>

#include "trace/encode.h"
#include "trace/record_eq.h"

/* The chunk payload raw[0..n) of format `version`, read record by record (A) and with runs of at
 * most max_run events wherever mt_decode_events_as(variant) takes them (B). 0 when both agree to
 * the end (or to the same failure), else -1 with why. *events: the events B took in runs (may be
 * NULL). */
static inline int mt_check_decode_runs_as(const uint8_t *raw, size_t n, unsigned version,
                                          size_t max_run, int variant, size_t *events, char *why,
                                          size_t len)
{
    static mt_codec ca, cb; /* 32 KiB each */
    static mt_record run[256];
    mt_cursor a[MT_LANES], b[MT_LANES];
    if (events) *events = 0;
    if (max_run > 256) max_run = 256;
    if (mt_lanes_split(raw, n, a, version) != 0) return 0; /* not a payload: nothing to compare */
    memcpy(b, a, sizeof a);
    mt_codec_reset(&ca, version);
    mt_codec_reset(&cb, version);
    for (size_t rec = 0;; rec++) {
        if (a[MT_LANE_MAIN].p >= a[MT_LANE_MAIN].end) break;
        size_t k = mt_decode_events_as(&cb, b, run, max_run, variant);
        if (events) *events += k;
        for (size_t i = 0; i < k; i++, rec++) {
            mt_record ra;
            if (mt_decode_record(&ca, a, &ra) != 0) {
                snprintf(why, len, "record %zu: a run decoded an event the checked decoder rejects",
                         rec);
                return -1;
            }
            if (!mt_record_eq(&ra, &run[i])) {
                snprintf(why, len, "record %zu (%zu of a run of %zu) differs", rec, i, k);
                return -1;
            }
        }
        if (memcmp(a, b, sizeof a) != 0 || memcmp(&ca, &cb, sizeof ca) != 0) {
            snprintf(why, len, "after record %zu: lanes or codec differ", rec);
            return -1;
        }
        if (a[MT_LANE_MAIN].p >= a[MT_LANE_MAIN].end) break;
        /* what the run left: both read it checked, from the same place and state */
        mt_record ra, rb;
        int sa = mt_decode_record(&ca, a, &ra), sb = mt_decode_record(&cb, b, &rb);
        if (sa != sb || (sa == 0 && !mt_record_eq(&ra, &rb))) {
            snprintf(why, len, "record %zu differs after a run", rec);
            return -1;
        }
        if (sa != 0) break; /* the same failure: the feed drops the rest of the chunk */
    }
    return 0;
}

/* Both varint decoders of the runs where this CPU has the second (mt_decode_variant), else the
 * first: 0 when each agrees with the checked decoder. */
static inline int mt_check_decode_runs(const uint8_t *raw, size_t n, unsigned version,
                                       size_t max_run, size_t *events, char *why, size_t len)
{
    if (mt_check_decode_runs_as(raw, n, version, max_run, MT_DECODE_PLAIN, events, why, len) != 0)
        return -1;
    if (mt_decode_variant() != MT_DECODE_PEXT) return 0;
    size_t pext_events;
    if (mt_check_decode_runs_as(raw, n, version, max_run, MT_DECODE_PEXT, &pext_events, why,
                                len) != 0)
        return -1;
    if (events && pext_events != *events) {
        snprintf(why, len, "PEXT's runs took %zu events, the plain decoder's %zu", pext_events,
                 *events);
        return -1;
    }
    return 0;
}

#endif
