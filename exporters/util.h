/* Helpers shared by the exporters (not part of the public API). */
#ifndef MT_EXPORT_UTIL_H
#define MT_EXPORT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "memtrace/compact.h"
#include "memtrace/export.h"

/* A growable array of frame names and their MT_FF_* flags. */
typedef struct mt_namebuf {
    const char **v;
    uint8_t *flags;
    size_t n, cap;
} mt_namebuf;

/* Frames of one stack stat, root first (without the device root): the stack's frames that
 * `filter` keeps, or the single "[driver internal]" pseudo frame for driver allocations; unless
 * cuda_leaf, without the CUDA stack's own frames at the leaf end (libcuda*, libcupti*...).
 * Returns the count, -1 on OOM. */
long mt_stat_frames(mt_frames *f, const mt_stack_stat *s, mt_name_style style,
                    mt_frame_filter filter, int cuda_leaf, mt_namebuf *b);
/* What a->failed[i] was and what came of it, in words for the reports ("" when "request failed"
 * says it all): a torch.OutOfMemoryError with PyTorch's counters then, or a request of its
 * allocator's that it went on after or raised for (failed_ties.c in the analysis ties them). */
const char *mt_failed_outcome_text(const mt_analysis *a, size_t i, char *buf, size_t len);
/* The same as a word (JSON's and the HTML report's `outcome`): "raised" for a
 * torch.OutOfMemoryError and for a refusal it followed, "recovered", or "" when nothing tells. */
const char *mt_failed_outcome_name(const mt_failed_request *f);
/* The categories of the tensors live at failed request f (by_category), those with bytes, largest
 * first (ties by number): written to cats[MT_CAT_MAX], their count returned (0: not known); *total:
 * their sum. */
size_t mt_failed_categories(const mt_analysis *a, const mt_failed_request *f, unsigned *cats,
                            uint64_t *total);
/* The line `line` (1-based) of a text file without its newline and leading blanks, in buf; NULL
 * when the file or the line cannot be read. Keeps the last file open between calls (src_cache).
 * The path comes from the trace: only a regular file is read (never a FIFO or a device), at most
 * 16 MiB of it, and at most 256 MiB for all the loads of one cache. */
typedef struct mt_src_cache {
    char *path;
    char **lines;
    size_t n_lines;
    int missing;
    uint64_t loaded;   /* bytes read so far, all files */
    uint64_t since_ns; /* the recording's start on the wall clock (mt_src_cache_init); 0: unknown */
    int changed;       /* the file of the last line read was modified after since_ns */
} mt_src_cache;
/* A cache for the lines of analysis a's trace: it notes files modified after the recording
 * began. */
void mt_src_cache_init(mt_src_cache *c, const mt_analysis *a);
const char *mt_source_line(mt_src_cache *c, const char *path, uint32_t line, char *buf,
                           size_t len);
/* 1 when the file of the line mt_source_line just returned was modified (its mtime) after the
 * recording began: the text is the file's today and may not be the line that ran. A trace keeps
 * no copy or hash of its sources, so this is what can be told; a file checked out again after the
 * recording counts as modified, whatever its content. */
static inline int mt_source_changed(const mt_src_cache *c) { return c->changed; }
/* What the text and Markdown tables say under the lines they marked (after a count of lines). */
#define MT_SOURCE_CHANGED_WHY \
    "from files modified after the recording began: today's text, maybe not the line that ran"
void mt_src_cache_free(mt_src_cache *c);
void mt_namebuf_free(mt_namebuf *b);
/* The stack list of a metric (folded.c). */
const mt_stack_list *mt_metric_list(const mt_device_report *d, mt_folded_metric m);

/* "+1.234567 s" (time since trace start). */
/* "+18.38 MiB", "-2.00 MiB", "0": a difference as the "by category" tables print it */
const char *mt_format_signed(int64_t v, char *buf, size_t len);
const char *mt_format_rel(uint64_t ns, char *buf, size_t len);
/* Where the trace lacks driver-internal allocations and CUDA arrays (CUPTI's activity records
 * were off, refused or stopped: mt_analysis.activity), the sentence that says its peaks leave them
 * out, into buf (no final stop); NULL when it has them. For the warnings of check, diff and the
 * Markdown report. */
const char *mt_activity_missing(const mt_analysis *a, char *buf, size_t len);
/* "2024-05-01 12:34:56.789012 UTC" for trace-relative ns. */
const char *mt_format_abs(const mt_analysis *a, uint64_t rel_ns, char *buf, size_t len);

/* Writes everything f holds (a temporary file of parts written earlier) to o. 0, -1 on error. */
int mt_copy_file(mt_out *o, FILE *f);
/* mt_out_json_string with '<', '>' and '&' as \u escapes too: safe inside an HTML <script>. */
void mt_out_json_string_html(mt_out *o, const char *s);

/* ---- one-line stacks (util.c) ---- */
#define MT_CHAIN_MAX 6 /* frames a one-line stack shows */
/* Indices (root first) of the frames a one-line stack shows, at most MT_CHAIN_MAX; *cut = 1 when
 * frames the rule keeps were left out for room (the outermost ones). Returns the count. */
size_t mt_chain_pick(const char *const *names, const uint8_t *flags, size_t n, size_t *idx,
                     int *cut);
/* Those frames joined by " › " ("… › " first when cut), in buf. Returns buf. */
const char *mt_chain_text(const char *const *names, const uint8_t *flags, size_t n, char *buf,
                          size_t len);

/* ---- the rank table (ranks.c) ---- */
#define MT_RANK_ENDING_LINES 10
#define MT_RANK_ENDING_LEN 512
/* How a job of several traces ended, when a rank raised torch.OutOfMemoryError or a trace has
 * no END: plain sentences, one per line[] (the text, Markdown and HTML rank tables). How many. */
size_t mt_rank_ending_lines(const mt_rank_summary *s, size_t n, char line[][MT_RANK_ENDING_LEN]);
#define MT_RANK_FOREIGN_LINES 10
/* The ranks whose traces lack driver-internal allocations and CUDA arrays (CUPTI's activity records
 * off, refused or stopped: mt_rank_summary.activity), in one sentence into line: 1, or 0 when
 * every rank's trace has them. */
size_t mt_rank_activity_line(const mt_rank_summary *s, size_t n, char *line);
/* Memory that ranks hold on GPUs other than their own (mt_rank_foreign_gpus): a line per rank and
 * GPU, at most 8, then "... and N more", then a line per GPU that several ranks hold memory on
 * (at most one). How many; -1 out of memory. */
long mt_rank_foreign_lines(const mt_rank_summary *s, size_t n, char line[][MT_RANK_ENDING_LEN]);

/* ---- Markdown (markdown.c) ---- */
/* s as a code span that is safe inside a GFM table cell. */
void mt_md_code(mt_out *o, const char *s);
/* s as a code span outside tables (headings, paragraphs). */
void mt_md_code_span(mt_out *o, const char *s);
/* s ("341.71 MiB", "+2.00 KiB") with no-break spaces, so a narrow table column does not split a
 * number from its unit. Returns buf. */
const char *mt_md_nbsp(const char *s, char *buf, size_t len);
/* s inside an HTML element (<summary>): <, >, & escaped. */
void mt_md_html(mt_out *o, const char *s);
/* s as plain text, markup characters escaped, safe inside a table cell. */
void mt_md_text(mt_out *o, const char *s);
/* A one-line stack: code spans joined by " › ". */
void mt_md_chain(mt_out *o, const char *const *names, const uint8_t *flags, size_t n);
#endif
