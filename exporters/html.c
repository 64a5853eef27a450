/* `memtrace export --format html`: one self-contained HTML file to look at.
 *
 * The page is exporters/html/report.html with three markers replaced, each on its own line:
 *   / *@memtrace-css@* /   by report.css             (inside <style>)
 *   / *@memtrace-data@* /  by the data (html_data.c)  (inside <script type="application/json">)
 *   / *@memtrace-js@* /    by report.js              (inside <script>)
 * Nothing is fetched when the page is viewed: the template's Content-Security-Policy allows no
 * source but the page itself, so a copy opened from a CI artifact or file:// looks the same as
 * anywhere. No JavaScript library is used; report.js draws the views with canvas and the DOM.
 */
#include <string.h>

#include "html.h"
#include "util.h"

static const char *const markers[] = {"/*@memtrace-css@*/", "/*@memtrace-data@*/",
                                      "/*@memtrace-js@*/"};

const char *mt_html_trace_label(const mt_analysis *a, char *buf, size_t len)
{
    const char *file = strrchr(a->path, '/');
    file = file ? file + 1 : a->path;
    if (a->hostname[0])
        snprintf(buf, len, "%s[%u] on %s (%s)", a->comm[0] ? a->comm : "pid", a->pid, a->hostname,
                 file);
    else
        snprintf(buf, len, "%s[%u] (%s)", a->comm[0] ? a->comm : "pid", a->pid, file);
    return buf;
}

int mt_export_html(mt_out *o, mt_analysis *const *a, size_t n, const mt_html_options *opt,
                   char *err, size_t errlen)
{
    mt_html_options defaults = {0};
    if (!opt) opt = &defaults;
    const char *tpl = (const char *)mt_html_report_html;
    size_t left = mt_html_report_html_len;
    for (size_t m = 0; m < sizeof markers / sizeof *markers; m++) {
        const char *at = memmem(tpl, left, markers[m], strlen(markers[m]));
        if (!at) { /* the build embeds the template; a marker can only be missing if it was edited */
            snprintf(err, errlen, "the HTML template has no %s marker", markers[m]);
            return -1;
        }
        mt_out_write(o, tpl, (size_t)(at - tpl));
        if (m == 0) {
            mt_out_write(o, mt_html_report_css, mt_html_report_css_len);
        } else if (m == 1) {
            if (mt_html_data(o, a, n, opt, err, errlen) < 0) return -1;
        } else {
            mt_out_write(o, mt_html_report_js, mt_html_report_js_len);
        }
        at += strlen(markers[m]);
        left -= (size_t)(at - tpl);
        tpl = at;
    }
    mt_out_write(o, tpl, left);
    return 0;
}
