/* The memtrace program: one file per subcommand (cmd_*.c), dispatched by main.c. */
#ifndef MT_CLI_H
#define MT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "memtrace/compact.h" /* mt_frame_filter */

/* Each returns the process exit status: 0 ok, 2 bad arguments or bad input files, record: the
 * traced command's status. argv[0] is the subcommand's name. */
int mt_cmd_record(int argc, char **argv);
int mt_cmd_dump(int argc, char **argv);
int mt_cmd_report(int argc, char **argv);
int mt_cmd_export(int argc, char **argv);
int mt_cmd_symbolize(int argc, char **argv);
/* check: 0 every budget holds, 1 one is exceeded, 2 bad input. diff: 0, 1 with --fail-on-increase
 * exceeded, 2 bad input. */
int mt_cmd_check(int argc, char **argv);
int mt_cmd_diff(int argc, char **argv);

/* "memtrace: <msg>\n" on stderr; returns 2 so callers can `return mt_cli_fail(...)`. */
int mt_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* PYTORCH_CUDA_ALLOC_CONF for `record --tensors`: user's options with backend:cudaMallocAsync. */
void mt_tensor_mode_conf(const char *user, char *out, size_t len);
/* True when argv[i] is -h or --help. */
int mt_cli_is_help(const char *arg);


/* ---- args.c: arguments and steps shared by check and diff ---- */
#include <stdint.h>
struct mt_analysis;
struct mt_out;
/* SIZE ("2GiB", "1500MB", "1.5G", plain bytes): see args.c. 0, or -1 when malformed. */
int mt_cli_parse_size(const char *s, uint64_t *out);
/* PCT ("10", "2.5%"). 0, or -1 when malformed. */
int mt_cli_parse_percent(const char *s, double *out);
/* A whole number (digits only). 0, or -1 when malformed. */
int mt_cli_parse_uint(const char *s, uint64_t *out);
/* A GPU: N or cuda:N. 0, or -1 when malformed. */
int mt_cli_parse_gpu(const char *s, int *out);
/* Two GPUs, A:B (diff --devices). 0, or -1 when malformed. */
int mt_cli_parse_gpu_pair(const char *s, int *a, int *b);
/* A count or byte size (export, report): digits with an optional k/m/g/t suffix (binary). */
int mt_cli_parse_count(const char *s, uint64_t *out);
/* --frames: user | all | python | native (an mt_frame_filter). -1 if something else. */
int mt_cli_parse_frames(const char *s, mt_frame_filter *out);
/* "memtrace: TRACE: pass N: P%" on stderr (a progress callback of mt_analyze). */
void mt_cli_progress(void *ctx, int pass, double fraction);
/* How a command wants its traces analysed. */
typedef struct mt_cli_analysis_options {
    const char *category_rules; /* --categories FILE */
    int strict;                 /* --strict: a damaged or truncated trace is an error */
    int base_dir;               /* Python files under the current directory named relative to it */
    int warn_incomplete;        /* say on stderr how the trace is incomplete */
    void (*on_event)(void *ctx, const struct mt_event *e); /* mt_analyze_options.on_event */
    void *event_ctx;
} mt_cli_analysis_options;
/* Analyses one trace (progress on a terminal's stderr). opt NULL: base_dir and warnings. 0, or 2
 * after saying why on stderr. The one place every command's analysis goes through. */
int mt_cli_analyze(const char *cmd, const char *path, const mt_cli_analysis_options *opt,
                   struct mt_analysis **out);
/* Closes an output on standard output; 0, or 2 after saying why (EPIPE, ENOSPC) on stderr. */
int mt_cli_close_stdout(const char *cmd, struct mt_out *o);

/* traces.c: the traces named by args (files, or directories: every *.mtrace in them), ordered by
 * rank (trace header) then by name. *out (n_out paths) is freed with mt_cli_free_traces.
 * 0, or 2 after printing why. */
int mt_cli_collect_traces(char **args, int n, char ***out, int *n_out);
void mt_cli_free_traces(char **paths, int n);
/* 1 when the trace at path has a rank (then *rank is it), 0 otherwise. */
int mt_cli_trace_rank(const char *path, int32_t *rank);
struct mt_analysis;
/* One "memtrace: warning: ..." line on stderr per way the trace is incomplete (damaged chunks
 * stepped over, truncated), for outputs that cannot say it themselves (folded, a file). */
void mt_cli_warn_incomplete(const char *cmd, const struct mt_analysis *a);
/* "OUT" for messages: the file name, or "standard output" for "-". */
const char *mt_cli_out_name(const char *path);

#endif
