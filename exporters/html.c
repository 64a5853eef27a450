/* `memtrace export --format html`: one self-contained HTML file to look at.
 *
 * The page is exporters/html/report.html with three markers replaced, each on its own line:
 *   / *@memtrace-css@* /   by report.css             (inside <style>)
 *   / *@memtrace-data@* /  by the data (html_data.c)  (inside <script type="application/json">)
 *   / *@memtrace-js@* /    by report.js              (inside <script>)
 * Nothing is fetched when the page is viewed: the template's Content-Security-Policy allows no
 * source but the page itself, so a copy opened from a CI artifact or file:// looks the same as
 * anywhere. No JavaScript library is used; report.js draws the views with canvas and the DOM.
 *
 * Traces are written as they come (mt_html_add), one analysis in memory at a time; what the rank
 * table compares across them is their mt_rank_summary, kept until the end.
 */
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "html.h"
#include "util.h"

static const char *const markers[] = {"/*@memtrace-css@*/", "/*@memtrace-data@*/",
                                      "/*@memtrace-js@*/"};

struct mt_html_stream {
    mt_out *o;
    mt_html_options opt;
    const char *tpl; /* the template after the data marker */
    size_t left;
    mt_rank_summary *ranks;
    size_t n, cap;
};

/* Writes the template up to marker m from *tpl on, and steps over the marker. -1: no marker
 * (the build embeds the template; one can only be missing if it was edited). */
static int up_to(mt_out *o, const char **tpl, size_t *left, size_t m, char *err, size_t errlen)
{
    const char *at = memmem(*tpl, *left, markers[m], strlen(markers[m]));
    if (!at) {
        snprintf(err, errlen, "the HTML template has no %s marker", markers[m]);
        return -1;
    }
    mt_out_write(o, *tpl, (size_t)(at - *tpl));
    at += strlen(markers[m]);
    *left -= (size_t)(at - *tpl);
    *tpl = at;
    return 0;
}

mt_html_stream *mt_html_begin(mt_out *o, const mt_html_options *opt, char *err, size_t errlen)
{
    mt_html_stream *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->o = o;
    if (opt) s->opt = *opt;
    s->tpl = (const char *)mt_html_report_html;
    s->left = mt_html_report_html_len;
    if (up_to(o, &s->tpl, &s->left, 0, err, errlen) < 0) {
        free(s);
        return NULL;
    }
    mt_out_write(o, mt_html_report_css, mt_html_report_css_len);
    if (up_to(o, &s->tpl, &s->left, 1, err, errlen) < 0) {
        free(s);
        return NULL;
    }
    mt_html_data_begin(o);
    return s;
}

int mt_html_add(mt_html_stream *s, mt_analysis *a, char *err, size_t errlen)
{
    if (MT_GROW(s->ranks, s->cap, s->n + 1) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    mt_rank_summary *r = &s->ranks[s->n];
    if (mt_rank_summarize(a, r) < 0) {
        mt_rank_summary_free(r);
        snprintf(err, errlen, "%s: out of memory", a->path);
        return -1;
    }
    s->n++;
    if (s->n > 1) mt_out_puts(s->o, ",\n");
    return mt_html_data_trace(s->o, a, r, &s->opt, err, errlen);
}

int mt_html_end(mt_html_stream *s, int finish, char *err, size_t errlen)
{
    int rc = 0;
    if (finish) {
        if (mt_html_data_end(s->o, s->ranks, s->n) < 0) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        } else if (up_to(s->o, &s->tpl, &s->left, 2, err, errlen) < 0) {
            rc = -1;
        } else {
            mt_out_write(s->o, mt_html_report_js, mt_html_report_js_len);
            mt_out_write(s->o, s->tpl, s->left);
        }
    }
    for (size_t i = 0; i < s->n; i++) mt_rank_summary_free(&s->ranks[i]);
    free(s->ranks);
    free(s);
    return rc;
}

int mt_export_html(mt_out *o, mt_analysis *const *a, size_t n, const mt_html_options *opt,
                   char *err, size_t errlen)
{
    mt_html_stream *s = mt_html_begin(o, opt, err, errlen);
    if (!s) return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) rc = mt_html_add(s, a[i], err, errlen);
    if (mt_html_end(s, rc == 0, err, errlen) < 0) rc = -1;
    return rc;
}
