/* memtrace/export.h — what a person reads: text/JSON/Markdown reports, folded stacks for flame
 * graphs, speedscope files, Chrome Trace Event JSON for Perfetto, and the outputs of `check` and
 * `diff`, all built from analyses (memtrace/compact.h).
 * Every writer goes through mt_out, a buffered sink that is a FILE or a gzip stream. */
#ifndef MEMTRACE_EXPORT_H
#define MEMTRACE_EXPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "memtrace/compact.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Output sink ------------------------------------------------------------------------------- */

typedef struct mt_out mt_out;

typedef struct mt_out_options {
    int force;                 /* replace an existing regular file (never an input, never a link) */
    const char *const *inputs; /* files the output must not be (the traces being read) */
    size_t n_inputs;
} mt_out_options;

/* path "-" = stdout; a path ending in ".gz" is written gzip-compressed (zlib gz* API). The rules
 * (exporters/out_file.c): an existing file is replaced only with opt->force, never when it is one
 * of opt->inputs; a symbolic link is not written through unless it leads to a device, pipe or
 * terminal; a file is written under a temporary name and gets its own only at mt_out_close, so a
 * failure leaves no partial file. NULL with a one-line reason in err when refused or impossible. */
mt_out *mt_out_create(const char *path, const mt_out_options *opt, char *err, size_t errlen);
mt_out *mt_out_open(const char *path, char *err, size_t errlen); /* mt_out_create, no options */
mt_out *mt_out_from_file(FILE *f); /* not closed by mt_out_close */
void mt_out_write(mt_out *o, const void *p, size_t n);
void mt_out_puts(mt_out *o, const char *s);
void mt_out_printf(mt_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mt_out_json_string(mt_out *o, const char *s); /* quoted, escaped, invalid UTF-8 replaced */
void mt_out_u64(mt_out *o, uint64_t v); /* decimal, as %llu */
void mt_out_hex(mt_out *o, uint64_t v); /* 0x and lowercase hex, as 0x%llx */
/* Bytes written so far; the ones written since `since` (a tell), if they are all still in the
 * buffer (else NULL): an exporter can keep a piece it formatted to write it again. */
uint64_t mt_out_tell(const mt_out *o);
const char *mt_out_recent(const mt_out *o, uint64_t since, size_t *len);
/* Flushes, closes and (for a file) gives the output its name. Returns -1 with errno set to the
 * first error if any write failed (ENOSPC, EPIPE...): then a file output is not created. */
int mt_out_close(mt_out *o);
/* Closes without publishing (the exporter failed): a file output is not created. */
void mt_out_discard(mt_out *o);

/* "512 B", "1.50 KiB", "3.25 GiB" (binary units). Returns buf. */
const char *mt_format_bytes(uint64_t bytes, char *buf, size_t len);

/* What recording cost the program, from the trace's cost notes (mt_recording_cost): "about 4.05
 * ms of memtrace's own work on the program's threads, 0.28% of the 1.447207 s recorded (4576
 * tensor reports × 884 ns, 16 CUDA API callbacks × 113 ns; ...)" in buf, and "4.05 ms (0.28% of
 * the run)" in brief (may be NULL; "~" in front when the estimate is rough). From the running
 * totals of a killed process (mt_recording_cost.until_ns) the share is of the time they cover:
 * "... until 60.000 s, 0.31% of that time (the process left no notes at exit: ...)" and "4.05 ms
 * (0.31% of the first 60.000 s)". NULL when the trace has no cost notes. Used by `report`, the
 * HTML report and `record`'s summary. */
const char *mt_cost_describe(const mt_analysis *a, char *brief, size_t brief_len, char *buf,
                             size_t len);

/* ---- Reports ----------------------------------------------------------------------------------- */

typedef struct mt_report_options {
    size_t top; /* stacks shown per list (peak, leaks, failed); 0 = 10 */
    mt_frame_filter frames; /* --frames user|all|python|native; 0 = user for Python programs */
    mt_name_style names;    /* --long-names: MT_NAME_LONG */
    int full_stacks;        /* text: every frame (no chain elision, CUDA frames at the leaf kept) */
    int by_line;            /* the per-Python-line table (text: instead of the stack trees) */
    const char *by_line_file; /* by_line: attribute to the innermost frame in this file */
    int json_schema;        /* JSON: the trace's object starts with "schema" (it is the document) */
} mt_report_options;

/* Human report of one analysis (layout in docs/analysis.md). Returns 0, -1 on write error. */
int mt_report_text(mt_out *o, mt_analysis *a, const mt_report_options *opt);
/* JSON report: with n == 1 the object of that trace; with n > 1 {"schema", "traces": [object,
 * ...]}; the top-level object starts with "schema": MT_JSON_SCHEMA (docs/json.md).
 * Each object: {"trace", "pid", "command", "devices": [{"device", "peak_bytes", "peak_time_ns",
 * "api_peak_bytes", ...}], "host", "failed_requests", "leaks", "totals", "anomalies", "dropped",
 * "truncated", ...}; docs/analysis.md lists every field. */
int mt_report_json(mt_out *o, mt_analysis *const *a, size_t n, const mt_report_options *opt);
/* One trace's object alone (no newline): for a caller that streams several traces, one analysis
 * in memory at a time. */
int mt_report_json_trace(mt_out *o, mt_analysis *a, const mt_report_options *opt);

/* The rank table (several traces of one job, mt_rank_summary in memtrace/compact.h): a row per
 * trace (rank, host, pid, GPUs, peak, tensor peak, when on the wall clock, at exit, failed, the
 * top stack), the imbalance (largest, median, smallest peak) and the stacks that make the largest
 * rank larger than the median one. Text, and a JSON object {"rows", "imbalance"}. */
int mt_rank_table_text(mt_out *o, const mt_rank_summary *s, size_t n, const mt_report_options *opt);
int mt_rank_table_json(mt_out *o, const mt_rank_summary *s, size_t n, const mt_report_options *opt);
/* The same in Markdown (report --markdown over several traces): a "#### Ranks" heading, the
 * table, the imbalance line and the stacks that make the largest rank larger than the median. */
int mt_rank_table_markdown(mt_out *o, const mt_rank_summary *s, size_t n,
                           const mt_report_options *opt);
/* The lines the rank table has under its rows (none for a job that ended cleanly with each rank
 * on its own GPU): how the job ended, the ranks that raised torch.OutOfMemoryError in the order
 * they did, then those whose trace has no END (killed); then the memory ranks hold on GPUs other
 * than their own. Each line starts with indent. Returns how many lines. */
size_t mt_rank_notes_text(mt_out *o, const mt_rank_summary *s, size_t n, const char *indent);

/* ---- By category (record --tensors): the "by category at the peak" table ------------------------ */

typedef struct mt_cat_row {
    char name[48];
    unsigned category;     /* mt_category of a tensor row; 0 for a row outside the tensors */
    int outside;           /* allocator cache, other libraries, CUDA context & driver */
    uint64_t bytes;        /* at the peak */
    int has_textbook;      /* the textbook has this line: parameters, gradients, optimizer state,
                              activations, the context */
    uint64_t textbook;
    int64_t difference;    /* bytes - textbook (bytes when the textbook has no such line) */
    char why[1024];        /* the difference explained */
} mt_cat_row;

typedef struct mt_cat_table {
    int known;             /* the trace has categories (record --tensors) */
    const char *optimizer; /* "Adam or AdamW", "SGD (momentum)", ...; NULL: none seen */
    uint64_t state_in_w, w;
    uint64_t w_trained;    /* W_t: the parameters with a gradient after a backward pass, the
                              gradients' and the state's textbook (= w unless some had none) */
    mt_cat_row rows[MT_CAT_MAX + 4];
    size_t n;
    uint64_t tensors;      /* sum of the tensor rows (= tensors allocated at the peak) */
    uint64_t measured, textbook; /* sums of all rows; of the textbook column */
    int process_known;     /* measured = the process total nvidia-smi read (else a lower bound) */
    uint64_t process;
} mt_cat_table;

/* The table of device report d (category_table.c says how each line is made). */
int mt_category_table(const mt_analysis *a, const mt_device_report *d, mt_cat_table *t);

/* ---- Folded stacks and speedscope ------------------------------------------------------------ */

typedef enum mt_folded_metric {
    MT_METRIC_PEAK = 0,  /* bytes live at each device's peak: a device's lines sum to peak_bytes */
    MT_METRIC_ALLOC = 1, /* bytes ever allocated */
    MT_METRIC_LEAK = 2,  /* bytes live at the end of the trace and held by no allocator's cache
                            and no library (possible leaks) */
    MT_METRIC_END = 3,   /* bytes live at the end of the trace, whoever holds them */
    MT_METRICS_ = 4,
} mt_folded_metric;

/* Which device a flame graph shows: a CUDA ordinal (-1 = "cuda:?"), or one of these. */
#define MT_DEVICE_AUTO (-1000) /* folded: each trace's GPU with the largest peak (the host when
                                  the trace has no GPU); speedscope: every device */
#define MT_DEVICE_HOST (-1001) /* pinned/registered host memory */

typedef struct mt_folded_options {
    mt_folded_metric metric;
    int all_metrics;        /* speedscope: one profile per metric (metric is ignored) */
    int device;             /* MT_DEVICE_AUTO, MT_DEVICE_HOST or an ordinal */
    mt_frame_filter frames; /* 0 = user for Python programs, else all */
    mt_name_style names;
    int trace_frame;        /* start every line with the trace's frame ("rank R", "comm[pid]")
                               even for one trace: a caller streaming several sets it */
    int by_category;        /* peak metric of a trace with categories (record --tensors): each
                               line starts with its category ("parameters", ...; "not a tensor"
                               for the allocations outside the allocator's tensors) */
} mt_folded_options;

/* The device report of a that `device` selects (see MT_DEVICE_AUTO), or NULL when the trace has
 * no such device. */
const mt_device_report *mt_select_device(const mt_analysis *a, int device);
/* A metric's name ("peak", "alloc", "leak", "end") and what its numbers are, for titles. */
const char *mt_metric_name(mt_folded_metric m);
const char *mt_metric_title(mt_folded_metric m); /* "live at the peak", ... */

/* "cuda:0;main;train_step;cudaMalloc 1048576\n" per stack, root first: one device per trace (a
 * device's graph never adds another device's or the host's bytes). With n > 1 each line starts
 * with a "comm[pid]" frame. Lines with 0 bytes are left out. Every line is one flamegraph.pl
 * reads: no empty frame, no ';' or newline inside a frame, the count an integer. */
int mt_export_folded(mt_out *o, mt_analysis *const *a, size_t n, const mt_folded_options *opt);

/* speedscope's file format (https://www.speedscope.app/file-format-schema.json): one "sampled"
 * profile per trace, device and metric, weights in bytes, frames shared. */
int mt_export_speedscope(mt_out *o, mt_analysis *const *a, size_t n, const mt_folded_options *opt);

/* ---- Chrome Trace Event JSON ------------------------------------------------------------------- */

#define MT_CHROME_DEFAULT_MAX_SLICES 500000u /* ~200 MB of slices at ~400 bytes each */
/* Points per counter track of a device, the closing one included: (cap - 1) / 2 time buckets,
 * each with its highest and its last point (exporters/chrome.c). ~2 MB of JSON per track. */
#define MT_CHROME_MAX_COUNTER_POINTS 20001u

typedef struct mt_chrome_options {
    uint64_t min_bytes;  /* slices only for allocations of at least this many bytes */
    uint64_t top_allocs; /* slices only for the N largest allocations; 0 = default cap
                            (MT_CHROME_DEFAULT_MAX_SLICES, said in otherData when it applies) */
    void (*progress)(void *ctx, double fraction);
    void *progress_ctx;
    mt_frame_filter frames; /* frames kept in slice stacks (0 = user for Python programs) */
    mt_name_style names;
    int driver_slices;      /* slices for driver-internal allocations too (their bytes are in the
                               counters either way) */
    uint64_t max_counter_points; /* per counter track of a device; 0 = MT_CHROME_MAX_COUNTER_POINTS
                                    (at least 3: one bucket and the closing point) */
} mt_chrome_options;

/* {"traceEvents": [...], "otherData": {...}}: per process (the traced pid) its counters, one async
 * track per device and allocation kind ("cuda:0 async", split by stream when a kind uses several),
 * peaks and failed requests as instants; exporters/chrome.c draws the layout. Reads each trace
 * twice more (the analyses give peaks and durations). Returns 0, or -1 with a one-line reason in err. */
int mt_export_chrome(mt_out *o, mt_analysis *const *a, size_t n, const mt_chrome_options *opt,
                     char *err, size_t errlen);
/* The same, one analysis at a time (a job's 64 ranks need the memory of the largest one): begin
 * with the earliest start_realtime_ns of all the traces (their timelines are put on that clock),
 * add each, end writes otherData and frees the stream. */
typedef struct mt_chrome_stream mt_chrome_stream;
mt_chrome_stream *mt_chrome_begin(mt_out *o, const mt_chrome_options *opt,
                                  uint64_t base_realtime_ns);
int mt_chrome_add(mt_chrome_stream *s, mt_analysis *a, char *err, size_t errlen);
/* The same without the export's first read of the trace: the survey (streams per device and kind,
 * the sizes of the largest allocations) is made while mt_analyze reads it. Begin a survey, pass
 * mt_chrome_survey_event and it as mt_analyze_options.on_event and .event_ctx, then add the
 * analysis with it; add frees the survey (so does mt_chrome_survey_free, for one never added). */
typedef struct mt_chrome_survey mt_chrome_survey;
mt_chrome_survey *mt_chrome_survey_begin(const mt_chrome_stream *s);
void mt_chrome_survey_event(void *survey, const mt_event *e);
void mt_chrome_survey_free(mt_chrome_survey *sv);
int mt_chrome_add_surveyed(mt_chrome_stream *s, mt_analysis *a, mt_chrome_survey *sv, char *err,
                           size_t errlen);
int mt_chrome_end(mt_chrome_stream *s);
/* Frees a stream that will not be ended (a trace failed): nothing more is written. */
void mt_chrome_abandon(mt_chrome_stream *s);

/* ---- JSON schema, Markdown, check and diff ---------------------------------------------------- */

/* "schema" of every JSON document memtrace writes (report, check, diff): raised whenever a field is
 * removed, renamed or changes meaning; adding a field keeps it. docs/json.md lists the fields of
 * each schema and tests/py/check_json_schema.py holds the outputs to it. */
#define MT_JSON_SCHEMA 1

/* `report --markdown`: a short summary for GitHub ($GITHUB_STEP_SUMMARY, pull-request comments).
 * A table with a row per GPU of every trace (peak, allocated peak, reserved peak, live at exit,
 * held by the program at exit, failed requests), then per GPU the top stacks and Python lines at
 * the peak (opt->top each) and any failed requests. Built one analysis at a time, like the rank
 * table: begin with the number of traces; add each analysis (its rows are kept, small; its
 * sections are written to `sections` at once, none when NULL); end writes the heading, the table
 * and its note to o (NULL: only frees) and frees r. The caller puts the sections after them.
 * Each returns 0, -1 when out of memory. */
typedef struct mt_md_report mt_md_report;
mt_md_report *mt_md_report_begin(size_t n_traces, const mt_report_options *opt);
int mt_md_report_add(mt_md_report *r, mt_out *sections, mt_analysis *a);
int mt_md_report_end(mt_md_report *r, mt_out *o);
/* The same with the rank table of several traces (mt_rank_table_markdown: the same view as the
 * text and JSON reports) after the heading, before the table of GPUs. s NULL or n < 2: none. */
int mt_md_report_end_ranks(mt_md_report *r, mt_out *o, const mt_rank_summary *s, size_t n);

typedef enum mt_doc_format {
    MT_FORMAT_TEXT = 0,
    MT_FORMAT_JSON = 1,
    MT_FORMAT_MARKDOWN = 2,
} mt_doc_format;

typedef struct mt_check_options {
    mt_doc_format format;
    const mt_budgets *budgets;
    size_t top; /* stacks shown for each budget exceeded; 0 = 5 */
} mt_check_options;

/* `memtrace check`'s output: every verdict (which budget, on which trace and GPU, the value, the
 * limit, by how much it is exceeded or what is left), for each one exceeded the stacks that make
 * the value, then the overall verdict (text: last; JSON and Markdown: first). Traces come one at a
 * time (a job's ranks need the memory of the largest one): begin, add each trace's analysis and
 * verdicts (mt_check_budgets; both may be freed after), end writes what remains to o (with
 * finish; without, nothing more: a check that met bad input has no overall verdict) and frees
 * the stream. add and end return 0, -1 when out of memory or a temporary file failed. */
typedef struct mt_check_stream mt_check_stream;
mt_check_stream *mt_check_begin(mt_out *o, const mt_check_options *opt);
int mt_check_add(mt_check_stream *s, mt_analysis *a, const mt_verdict *v, size_t n);
int mt_check_end(mt_check_stream *s, int finish);

typedef struct mt_diff_options {
    mt_doc_format format;
    size_t top;      /* entries per list (grew, shrank, new, gone; lines); 0 = 10 */
    int gate;        /* --fail-on-increase was given */
    double fail_pct; /* its percentage */
} mt_diff_options;

/* `memtrace diff`'s output: per GPU the peak, allocated peak, reserved peak, live at exit, held by
 * the program at exit, failed requests and bytes allocated in both runs and their change; the
 * stacks and Python lines at the peak that grew and shrank most, new and gone; what the program
 * held at exit that changed; with gate, the verdict. Returns 0, -1 when out of memory. */
int mt_export_diff(mt_out *o, const mt_diff *d, const mt_diff_options *opt);

/* ---- HTML report ------------------------------------------------------------------------------- */

typedef struct mt_html_options {
    mt_frame_filter frames;  /* the stacks' first view (0 = user for Python programs); every stack
                                also carries all its frames, shown on demand */
    mt_name_style names;
    const char *source_root; /* Python files not where the trace says: the longest tail of the
                                recorded path found under this directory (NULL: none) */
    void (*progress)(void *ctx, int read, double fraction); /* mt_moments_compute's reads */
    void *progress_ctx;
} mt_html_options;

/* One self-contained HTML file (no network at view time: its script, style and data are inline;
 * exporters/html/ holds the template, exporters/html_data.c draws the data): per trace and
 * device the usage timeline by kind with the NVML line, peak and failed requests, what was live
 * at chosen moments (mt_moments), a flame graph of the peak, the by-line table with source text,
 * the reconciliation; with several traces the rank table (mt_rank_summary: the imbalance and
 * the stacks that make the largest rank larger than the median) and a switch. Re-reads each
 * trace twice. Returns 0, or -1 with a one-line reason in err. */
int mt_export_html(mt_out *o, mt_analysis *const *a, size_t n, const mt_html_options *opt,
                   char *err, size_t errlen);
/* The same, one analysis at a time (a job's ranks need the memory of the largest one): begin
 * writes the page up to its data, add writes one trace (and keeps its mt_rank_summary), end
 * writes the rank table's comparison, the script and the rest of the page when finish is set
 * (else nothing more: an error happened), and frees the stream. 0, or -1 with a reason in err. */
typedef struct mt_html_stream mt_html_stream;
mt_html_stream *mt_html_begin(mt_out *o, const mt_html_options *opt, char *err, size_t errlen);
int mt_html_add(mt_html_stream *s, mt_analysis *a, char *err, size_t errlen);
int mt_html_end(mt_html_stream *s, int finish, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
