/* memtrace dump: every record of a trace as text, one per line.
 *
 * For people (what exactly did the recorder see?) and for scripts (the GPU checks count events
 * with grep/awk). The format is stable: "<type> key=value key=value ...", strings quoted.
 * Exit status: 0 read to the end (a truncated file is read up to its last whole chunk, damaged
 * chunks are stepped over; both with a warning on stderr and a "# skipped" line where the records
 * are missing); 2 not a trace, unsupported version, damaged or truncated with --strict, or stdout
 * could not be written (one line naming the reason).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "memtrace/trace.h"

static void usage(FILE *out)
{
    fputs("usage: memtrace dump [--strict] TRACE\n\n"
          "Prints every record of TRACE as one line of text: events (alloc, free, failed, pool,\n"
          "ctx-destroy), stack-trie nodes, modules, threads, symbols, notes. Times are seconds\n"
          "since the recorder started. Damaged chunks are skipped, with a '# skipped' line where\n"
          "their records are missing and a warning on stderr. Exit status 2 if TRACE is not a\n"
          "readable trace, or with --strict if it is damaged or truncated.\n",
          out);
}

static void put_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', out);
        if (*s == '\n') {
            fputs("\\n", out);
            continue;
        }
        fputc(*s, out);
    }
    fputc('"', out);
}

static double rel_s(const mt_file_header *h, uint64_t t)
{
    return t >= h->start_monotonic_ns ? (double)(t - h->start_monotonic_ns) / 1e9
                                      : -(double)(h->start_monotonic_ns - t) / 1e9;
}

static void print_event(FILE *out, const mt_file_header *h, const mt_event *e)
{
    fprintf(out, "event t=%.9f op=%s kind=%s dev=%d tid=%" PRIu32 " ctx=%" PRIu32
                 " addr=0x%" PRIx64 " bytes=%" PRIu64,
            rel_s(h, e->time_ns), mt_op_name(e->op), mt_kind_name(e->kind), e->device, e->tid,
            e->context, e->address, e->bytes);
    if (e->stream) fprintf(out, " stream=0x%" PRIx64, e->stream);
    if (e->aux) fprintf(out, " aux=0x%" PRIx64, e->aux);
    if (e->api) fprintf(out, " api=%s", mt_api_name(e->api)[0] ? mt_api_name(e->api) : "?");
    if (e->result) fprintf(out, " result=%u", e->result);
    if (e->correlation) fprintf(out, " corr=%" PRIu32, e->correlation);
    fprintf(out, " stack=%" PRIu32, e->stack);
    if (e->flags & MT_EF_ACTIVITY) fputs(" activity", out);
    if (e->flags & MT_EF_STACK_TRUNCATED) fputs(" truncated-stack", out);
    if (e->flags & MT_EF_FROM_POOL) fputs(" from-pool", out);
    if (e->flags & MT_EF_SEGMENT) fputs(" segment", out);
    if (e->flags & MT_EF_TENSORS_TRACKED) fputs(" tensors-tracked", out);
    if (e->flags & MT_EF_CAPTURED) fputs(" captured", out);
    if (e->flags & MT_EF_RETAIN) fputs(" retain", out);
    if (e->flags & MT_EF_IMPORTED) fputs(" imported", out);
    if (e->flags & MT_EF_HOST_MEMORY) fputs(" host-memory", out);
    /* dev= is the reader's choice: CUPTI named no context (and device 0) */
    if (e->flags & MT_EF_DEVICE_GUESSED)
        fputs(" device-guessed", out);
    else if (e->flags & MT_EF_DEVICE_INFERRED)
        fputs(" device-inferred", out);
    fputc('\n', out);
}

static void print_record(FILE *out, const mt_file_header *h, const mt_record *r)
{
    switch (r->type) {
    case MT_REC_EVENT: print_event(out, h, &r->u.event); break;
    case MT_REC_STACK_NODE: {
        const mt_stack_node *n = &r->u.node;
        fprintf(out, "node id=%" PRIu32 " parent=%" PRIu32, n->id, n->parent);
        if (n->frame_kind == MT_FRAME_NATIVE)
            fprintf(out, " native ip=0x%" PRIx64 "\n", n->ip);
        else if (n->frame_kind == MT_FRAME_PYTHON)
            fprintf(out, " python code=%" PRIu64 " line=%" PRIu64 "\n", n->ip >> 32,
                    n->ip & 0xffffffffu);
        else
            fprintf(out, " pseudo %s\n", mt_pseudo_name(n->ip));
        break;
    }
    case MT_REC_PROCESS:
        fprintf(out, "process pid=%" PRIu32 " ppid=%" PRIu32 " comm=", r->u.process.pid,
                r->u.process.ppid);
        put_str(out, r->u.process.comm);
        fputs(" cmdline=", out);
        put_str(out, r->u.process.cmdline);
        fputs(" host=", out);
        put_str(out, r->u.process.hostname);
        fputc('\n', out);
        break;
    case MT_REC_MODULE: {
        const mt_module *m = &r->u.module;
        fprintf(out, "module id=%" PRIu32 " start=0x%" PRIx64 " end=0x%" PRIx64 " bias=0x%" PRIx64
                     " build-id=",
                m->id, m->start, m->end, m->bias);
        for (uint32_t i = 0; i < m->build_id_len; i++) fprintf(out, "%02x", m->build_id[i]);
        if (!m->build_id_len) fputc('-', out);
        fputs(" path=", out);
        put_str(out, m->path);
        fputc('\n', out);
        break;
    }
    case MT_REC_THREAD:
        fprintf(out, "thread tid=%" PRIu32 " name=", r->u.thread.tid);
        put_str(out, r->u.thread.name);
        fputc('\n', out);
        break;
    case MT_REC_NOTE:
        fprintf(out, "note t=%.9f level=%s text=", rel_s(h, r->u.note.time_ns),
                r->u.note.level == MT_NOTE_WARNING ? "warning" : "info");
        put_str(out, r->u.note.text);
        fputc('\n', out);
        break;
    case MT_REC_DROPPED: fprintf(out, "dropped count=%" PRIu64 "\n", r->u.dropped); break;
    case MT_REC_END:
        fprintf(out, "end t=%.9f events=%" PRIu64 " dropped=%" PRIu64 "\n",
                rel_s(h, r->u.end.time_ns), r->u.end.events, r->u.end.dropped);
        break;
    case MT_REC_SYMBOL: {
        const mt_symbol *s = &r->u.symbol;
        fprintf(out, "symbol ip=0x%" PRIx64 " module=%" PRIu32 " depth=%" PRIu32 " function=",
                s->ip, s->module, s->depth);
        put_str(out, s->function);
        fputs(" file=", out);
        put_str(out, s->file);
        fprintf(out, " line=%" PRIu32 "\n", s->line);
        break;
    }
    case MT_REC_PYCODE:
        fprintf(out, "pycode id=%" PRIu32 " firstline=%" PRIu32 " file=", r->u.pycode.id,
                r->u.pycode.firstlineno);
        put_str(out, r->u.pycode.filename);
        fputs(" qualname=", out);
        put_str(out, r->u.pycode.qualname);
        fputc('\n', out);
        break;
    case MT_REC_SAMPLE:
        fprintf(out, "sample t=%.9f dev=%d counter=%u value=%" PRIu64 "\n",
                rel_s(h, r->u.sample.time_ns), r->u.sample.device, r->u.sample.counter,
                r->u.sample.value);
        break;
    case MT_REC_DEVICE:
        fprintf(out, "device ordinal=%d total=%" PRIu64 " name=", r->u.device.ordinal,
                r->u.device.total_bytes);
        put_str(out, r->u.device.name);
        fputs(" uuid=", out);
        put_str(out, r->u.device.uuid);
        fputc('\n', out);
        break;
    default: fprintf(out, "record type=%d\n", (int)r->type);
    }
}

int mt_cmd_dump(int argc, char **argv)
{
    const char *path = NULL;
    int strict = 0;
    for (int i = 1; i < argc; i++) {
        if (mt_cli_is_help(argv[i])) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--strict") == 0) {
            strict = 1;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1]) return mt_cli_fail("dump: unknown option %s", argv[i]);
        if (path) return mt_cli_fail("dump: one trace at a time");
        path = argv[i];
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    char err[512];
    mt_reader *rd = mt_reader_open(path, err, sizeof err);
    if (!rd) return mt_cli_fail("%s", err);
    const mt_file_header *h = mt_reader_header(rd);
    printf("# memtrace trace version %u pid %" PRIu32 " start_monotonic_ns %" PRIu64
           " start_realtime_ns %" PRIu64 "\n",
           h->version, h->pid, h->start_monotonic_ns, h->start_realtime_ns);
    mt_reader_set_strict(rd, strict);
    mt_record rec;
    mt_read_status st;
    mt_read_damage seen = {0}, now;
    int werr = 0; /* errno of the first failed write to stdout */
    for (;;) {
        st = mt_reader_next(rd, &rec);
        mt_reader_damage(rd, &now);
        if (now.chunks != seen.chunks) /* the record below comes after a skipped region */
            printf("# skipped: %llu bytes of damaged chunks (%s)\n",
                   (unsigned long long)(now.bytes - seen.bytes),
                   now.chunks - seen.chunks == 1 && seen.chunks == 0 ? now.first : "damaged");
        seen = now;
        if (ferror(stdout)) werr = errno;
        if (st != MT_READ_RECORD || werr) break;
        print_record(stdout, h, &rec);
    }
    int status = 0;
    if (fflush(stdout) != 0 && !werr) werr = errno;
    if (seen.chunks)
        fprintf(stderr, "memtrace: dump: warning: %llu damaged chunk%s skipped (%llu bytes; the "
                        "first: %s)\n",
                (unsigned long long)seen.chunks, seen.chunks == 1 ? "" : "s",
                (unsigned long long)seen.bytes, seen.first);
    if (st == MT_READ_TRUNCATED && !strict) {
        fprintf(stderr, "memtrace: dump: warning: %s\n", mt_reader_error(rd));
    } else if (st != MT_READ_END && st != MT_READ_RECORD) {
        status = mt_cli_fail("dump: %s%s", mt_reader_error(rd), strict ? " (--strict)" : "");
    }
    mt_reader_close(rd);
    if (werr || ferror(stdout))
        return mt_cli_fail("dump: writing standard output failed: %s",
                           strerror(werr ? werr : EIO));
    return status;
}
