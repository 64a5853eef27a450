#include "fuzz_common.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memtrace/export.h"

int mt_fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t len)
{
    int fd = memfd_create("mt-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    for (size_t done = 0; done < size;) {
        ssize_t k = write(fd, data + done, size - done);
        if (k <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)k;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

void mt_fuzz_use_trace(const char *path)
{
    char err[512];
    /* strict read to the end, as `dump --strict` does */
    mt_reader *r = mt_reader_open(path, err, sizeof err);
    if (r) {
        mt_reader_set_strict(r, 1);
        mt_record rec;
        while (mt_reader_next(r, &rec) == MT_READ_RECORD) {
        }
        mt_reader_close(r);
    }
    mt_analysis *a = NULL;
    if (mt_analyze(path, NULL, &a, err, sizeof err) != 0) return;
    mt_out *o = mt_out_open("/dev/null", err, sizeof err);
    if (o) {
        mt_report_options ro = {.top = 5};
        mt_report_text(o, a, &ro);
        ro.by_line = 1;
        ro.frames = MT_FRAMES_PYTHON;
        mt_report_text(o, a, &ro);
        ro.by_line = 0;
        ro.frames = MT_FRAMES_USER;
        ro.names = MT_NAME_LONG;
        mt_report_json(o, &a, 1, &ro);
        mt_rank_summary rs;
        if (mt_rank_summarize(a, &rs) == 0) {
            mt_rank_table_text(o, &rs, 1, &ro);
            mt_rank_table_json(o, &rs, 1, &ro);
            mt_rank_summary_free(&rs);
        }
        for (int m = 0; m < MT_METRICS_; m++) {
            mt_folded_options fm = {.metric = (mt_folded_metric)m, .device = MT_DEVICE_AUTO};
            mt_export_folded(o, &a, 1, &fm);
        }
        mt_folded_options fo = {.all_metrics = 1, .device = MT_DEVICE_AUTO};
        mt_export_speedscope(o, &a, 1, &fo);
        mt_chrome_options co = {.top_allocs = 64, .driver_slices = 1};
        mt_export_chrome(o, &a, 1, &co, err, sizeof err);
        /* report --markdown */
        mt_md_report *md = mt_md_report_begin(1, &ro);
        if (md) {
            mt_md_report_add(md, o, a);
            mt_md_report_end(md, o);
        }
        /* check with every budget at 0 (all exceeded: the allocated peak's re-read too), JSON */
        mt_budgets b = {.device = MT_BUDGET_ALL_DEVICES};
        for (int k = 0; k < MT_BUDGETS_; k++) b.set[k] = 1;
        mt_verdict *v = NULL;
        size_t nv = 0;
        if (mt_check_budgets(a, &b, &v, &nv, err, sizeof err) == 0) {
            mt_check_options ko = {.format = MT_FORMAT_JSON, .budgets = &b};
            mt_check_stream *cs = mt_check_begin(o, &ko);
            if (cs) {
                mt_check_add(cs, a, v, nv);
                mt_check_end(cs, 1);
            }
            mt_verdicts_free(v, nv);
        }
        /* diff against itself, Markdown */
        mt_diff *d = NULL;
        if (mt_diff_analyses(a, a, &d) == 0) {
            mt_diff_options dopt = {.format = MT_FORMAT_MARKDOWN, .gate = 1, .fail_pct = 1};
            mt_export_diff(o, d, &dopt);
            mt_diff_free(d);
        }
        /* the HTML report: two more reads (moments), by-line source text */
        mt_html_options ho = {.frames = MT_FRAMES_AUTO};
        mt_export_html(o, &a, 1, &ho, err, sizeof err);
        mt_out_close(o);
    }
    mt_analysis_free(a);
    /* the CLI's Chrome export: its survey made while mt_analyze reads the trace; few counter
     * points, so that buckets end often */
    mt_out *o2 = mt_out_open("/dev/null", err, sizeof err);
    if (!o2) return;
    mt_chrome_options co = {.max_counter_points = 7, .top_allocs = 16};
    mt_chrome_stream *s = mt_chrome_begin(o2, &co, 0);
    mt_chrome_survey *sv = s ? mt_chrome_survey_begin(s) : NULL;
    mt_analyze_options ao = {.on_event = mt_chrome_survey_event, .event_ctx = sv};
    mt_analysis *b = NULL;
    if (sv && mt_analyze(path, &ao, &b, err, sizeof err) == 0) {
        if (mt_chrome_add_surveyed(s, b, sv, err, sizeof err) == 0) mt_chrome_end(s);
        else mt_chrome_abandon(s);
        mt_analysis_free(b);
    } else {
        mt_chrome_survey_free(sv);
        mt_chrome_abandon(s);
    }
    mt_out_close(o2);
}
