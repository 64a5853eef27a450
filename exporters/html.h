/* Internals of the HTML report shared by html.c (the document) and html_data.c (its data). */
#ifndef MT_EXPORT_HTML_H
#define MT_EXPORT_HTML_H

#include <stddef.h>

#include "memtrace/export.h"

/* The template files of exporters/html/, embedded by exporters/html/embed.cmake. */
extern const unsigned char mt_html_report_html[], mt_html_report_css[], mt_html_report_js[];
extern const size_t mt_html_report_html_len, mt_html_report_css_len, mt_html_report_js_len;

/* The report's data: one JSON object, safe inside a <script> element (no '<', '>' or '&' outside
 * \u escapes). Layout in html_data.c. Returns 0, or -1 with a reason in err. */
int mt_html_data(mt_out *o, mt_analysis *const *a, size_t n, const mt_html_options *opt, char *err,
                 size_t errlen);

/* How a trace is named in the report (its tabs, the table of traces, the title):
 * "comm[pid] on host (file name)". The one place that will add the rank. */
const char *mt_html_trace_label(const mt_analysis *a, char *buf, size_t len);

#endif
