/* record_eq.h — field-by-field equality of two mt_records, as the format promises to keep them:
 * strings by content (NULL equals ""), build ids by bytes, struct padding ignored. Header-only; for
 * the trace tests and anything else that checks a round trip.
 */
#ifndef MT_TRACE_RECORD_EQ_H
#define MT_TRACE_RECORD_EQ_H

#include <string.h>

#include "memtrace/trace.h"

static inline int mt_str_eq(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static inline int mt_event_eq(const mt_event *a, const mt_event *b)
{
    return a->time_ns == b->time_ns && a->address == b->address && a->bytes == b->bytes &&
           a->stream == b->stream && a->aux == b->aux && a->tid == b->tid &&
           a->context == b->context && a->stack == b->stack && a->correlation == b->correlation &&
           a->device == b->device && a->api == b->api && a->result == b->result &&
           a->flags == b->flags && a->op == b->op && a->kind == b->kind;
}

static inline int mt_record_eq(const mt_record *a, const mt_record *b)
{
    if (a->type != b->type) return 0;
    switch (a->type) {
    case MT_REC_EVENT:
        return mt_event_eq(&a->u.event, &b->u.event);
    case MT_REC_STACK_NODE:
        return a->u.node.id == b->u.node.id && a->u.node.parent == b->u.node.parent &&
               a->u.node.ip == b->u.node.ip && a->u.node.frame_kind == b->u.node.frame_kind;
    case MT_REC_PROCESS:
        return a->u.process.pid == b->u.process.pid && a->u.process.ppid == b->u.process.ppid &&
               mt_str_eq(a->u.process.comm, b->u.process.comm) &&
               mt_str_eq(a->u.process.cmdline, b->u.process.cmdline) &&
               mt_str_eq(a->u.process.hostname, b->u.process.hostname);
    case MT_REC_MODULE: {
        const mt_module *x = &a->u.module, *y = &b->u.module;
        uint32_t lx = x->build_id ? x->build_id_len : 0, ly = y->build_id ? y->build_id_len : 0;
        return x->id == y->id && x->bias == y->bias && x->start == y->start && x->end == y->end &&
               mt_str_eq(x->path, y->path) && lx == ly &&
               (lx == 0 || memcmp(x->build_id, y->build_id, lx) == 0);
    }
    case MT_REC_THREAD:
        return a->u.thread.tid == b->u.thread.tid && mt_str_eq(a->u.thread.name, b->u.thread.name);
    case MT_REC_NOTE:
        return a->u.note.time_ns == b->u.note.time_ns && a->u.note.level == b->u.note.level &&
               mt_str_eq(a->u.note.text, b->u.note.text);
    case MT_REC_DROPPED:
        return a->u.dropped == b->u.dropped;
    case MT_REC_END:
        return a->u.end.time_ns == b->u.end.time_ns && a->u.end.events == b->u.end.events &&
               a->u.end.dropped == b->u.end.dropped;
    case MT_REC_SYMBOL:
        return a->u.symbol.ip == b->u.symbol.ip && a->u.symbol.module == b->u.symbol.module &&
               a->u.symbol.line == b->u.symbol.line && a->u.symbol.depth == b->u.symbol.depth &&
               mt_str_eq(a->u.symbol.function, b->u.symbol.function) &&
               mt_str_eq(a->u.symbol.file, b->u.symbol.file);
    case MT_REC_PYCODE:
        return a->u.pycode.id == b->u.pycode.id &&
               a->u.pycode.firstlineno == b->u.pycode.firstlineno &&
               mt_str_eq(a->u.pycode.filename, b->u.pycode.filename) &&
               mt_str_eq(a->u.pycode.qualname, b->u.pycode.qualname);
    case MT_REC_SAMPLE:
        return a->u.sample.time_ns == b->u.sample.time_ns &&
               a->u.sample.device == b->u.sample.device &&
               a->u.sample.counter == b->u.sample.counter && a->u.sample.value == b->u.sample.value;
    case MT_REC_DEVICE:
        return a->u.device.ordinal == b->u.device.ordinal &&
               a->u.device.total_bytes == b->u.device.total_bytes &&
               mt_str_eq(a->u.device.name, b->u.device.name) &&
               mt_str_eq(a->u.device.uuid, b->u.device.uuid);
    default:
        return 0;
    }
}

#endif
