/* Internals of the HTML report shared by html.c (the document) and html_data.c (its data). */
#ifndef MT_EXPORT_HTML_H
#define MT_EXPORT_HTML_H

#include <stddef.h>

#include "memtrace/export.h"

/* The template files of exporters/html/, embedded by exporters/html/embed.cmake. */
extern const unsigned char mt_html_report_html[], mt_html_report_css[], mt_html_report_js[];
extern const size_t mt_html_report_html_len, mt_html_report_css_len, mt_html_report_js_len;

/* The report's data is one JSON object, safe inside a <script> element (no '<', '>' or '&'
 * outside \u escapes), written in pieces as the traces come (layout in html_data.c):
 *   {"generator": ..., "traces": [ mt_html_data_trace, ... ], "ranks": mt_html_data_ranks } */
void mt_html_data_begin(mt_out *o);
/* One trace's object; rank: its row of the rank table (mt_rank_summarize). 0, or -1 with a
 * reason in err. */
int mt_html_data_trace(mt_out *o, mt_analysis *a, const mt_rank_summary *rank,
                       const mt_html_options *opt, char *err, size_t errlen);
/* Closes the traces and writes the comparison of the ranks (null for one trace). -1 on OOM. */
int mt_html_data_end(mt_out *o, const mt_rank_summary *ranks, size_t n);

#endif
