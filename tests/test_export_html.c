/* The HTML report (exporters/html.c, html_data.c): one self-contained page whatever the trace's
 * names hold, source text found under --source-root, and the CLI's rules for --format html. What
 * the page shows is checked in a browser (tests/js/html_check.mjs) and its data against the JSON
 * report (tests/py/check_html_data.py). */
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test_compact_fixture.h"

#define A ((uint64_t)0x7f0000000000)
#define MEMTRACE MT_TEST_BIN_DIR "/src/cli/memtrace"
#define PY(code, line) MT_PY_IP(code, line)
#define EVIL "</script><script>alert(1)</script><!-- & >"

static int html_fn(mt_out *o, mt_analysis *a, void *ctx)
{
    char err[256];
    return mt_export_html(o, &a, 1, (const mt_html_options *)ctx, err, sizeof err);
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0, len = strlen(needle);
    for (const char *p = hay; (p = strcasestr(p, needle)); p += len) n++;
    return n;
}

static void pycode(fx *f, uint32_t id, const char *file, const char *qual)
{
    mt_record r = {.type = MT_REC_PYCODE};
    r.u.pycode = (mt_pycode){.id = id, .firstlineno = 1, .filename = file, .qualname = qual};
    fx_put(f, &r);
}

/* A program whose names would break a page that did not escape them: a native function named
 * EVIL, a Python file and function named after it, invalid UTF-8, a command line with quotes. */
static void evil_trace(fx *f)
{
    fx_open(f, "evil.mtrace");
    fx_process(f, "py\"<b>", "python3 -c \"print('</script>')\"");
    fx_module(f, 1, "/opt/lib/libevil.so", 0x500000, 0x510000);
    pycode(f, 1, "/nonexistent/gpu-box/proj/</script>.py", EVIL);
    pycode(f, 2, "/nonexistent/gpu-box/proj/model.py", "Model.forward");
    fx_node(f, 1, 0, PY(1, 3), MT_FRAME_PYTHON);
    fx_node(f, 2, 1, PY(2, 2), MT_FRAME_PYTHON);
    fx_node(f, 3, 2, 0x500100, MT_FRAME_NATIVE);
    fx_node(f, 4, 1, 0x500200, MT_FRAME_NATIVE);
    fx_symbol(f, 0x500100, 0, EVIL, "", 0);
    fx_symbol(f, 0x500200, 0, "bad\xff\xfeutf8\xc3", "", 0);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A, 1 << 20, 1, 3);
    fx_ev(f, MT_OP_ALLOC, MT_KIND_DEVICE, 0, A + (8 << 20), 2 << 20, 2, 4);
    fx_ev(f, MT_OP_FAILED, MT_KIND_DEVICE, 0, 0, 1ull << 40, 3, 3);
    fx_end(f, 5, 3, 0);
    fx_close(f);
}

Test(export_html, one_page_whatever_the_names_hold)
{
    fx f;
    evil_trace(&f);
    mt_analysis *a = fx_analyze(f.path);
    mt_html_options o = {0};
    char *html = fx_capture(a, html_fn, &o, "evil.html");
    cr_assert(strncmp(html, "<!doctype html>", 15) == 0);
    cr_expect(strstr(html, "Content-Security-Policy\" content=\"default-src 'none';"),
              "the page may fetch nothing");
    cr_expect(!strstr(html, "@memtrace-"), "a template marker is left");
    /* the data script and the code script close once each: no name closed one early */
    cr_expect_eq(count(html, "</script"), 2, "%zu", count(html, "</script"));
    cr_expect_eq(count(html, "<script"), 2);
    const char *data = strstr(html, "id=\"memtrace-data\">");
    cr_assert(data);
    const char *data_end = strstr(data, "</script>");
    cr_assert(data_end);
    /* inside the data, no '<' at all (no "<!--" either) and '&', '>' escaped too */
    for (const char *p = data + strlen("id=\"memtrace-data\">"); p < data_end; p++)
        cr_assert(*p != '<' && *p != '>' && *p != '&', "raw '%c' in the data at %td", *p, p - html);
    cr_expect(strstr(data, "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)"), "the name escaped");
    cr_expect(strstr(data, "bad\\ufffd\\ufffdutf8\\ufffd"), "invalid UTF-8 replaced");
    cr_expect(strstr(data, "\"peak\":3145728,"));
    /* the data is JSON, and the names come back as they were */
    char path[512], cmd[1024];
    mt_test_tmpname(path, sizeof path, "evil-data.json");
    cr_assert_eq(mt_test_spit(path, data + strlen("id=\"memtrace-data\">"),
                              (size_t)(data_end - data) - strlen("id=\"memtrace-data\">")), 0);
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); t=d[\"traces\"][0]; "
             "sys.exit(0 if any(\"%s\" in n for n in t[\"names\"]) and t[\"comm\"]==\"py\\\"<b>\" "
             "and t[\"failed\"][0][\"bytes\"]==1<<40 else 1)' %s",
             "</script><script>alert(1)</script><!-- & >", path);
    int st = system(cmd);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the data does not parse back: %s", cmd);
    free(html);
    mt_analysis_free(a);
}

Test(export_html, source_text_under_the_source_root)
{
    fx f;
    evil_trace(&f);
    mt_analysis *a = fx_analyze(f.path);
    /* model.py as it is on this machine: under ROOT/proj/, not at the recorded path */
    char root[512], dir[600], file[700];
    mt_test_tmpname(root, sizeof root, "srcroot");
    cr_assert_eq(mkdir(root, 0755), 0);
    snprintf(dir, sizeof dir, "%s/proj", root);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(file, sizeof file, "%s/model.py", dir);
    const char *src = "class Model:\n    x = torch.empty(1 << 20, device='cuda')  # <here> & there\n";
    cr_assert_eq(mt_test_spit(file, src, strlen(src)), 0);
    mt_html_options without = {0}, with = {.source_root = root};
    char *h1 = fx_capture(a, html_fn, &without, "nosrc.html");
    char *h2 = fx_capture(a, html_fn, &with, "src.html");
    cr_expect(!strstr(h1, "\"source\":"), "no source without the root");
    cr_expect(strstr(h2, "\"source\":\"x = torch.empty(1 \\u003c\\u003c 20, device='cuda')  # "
                         "\\u003chere\\u003e \\u0026 there\""),
              "model.py:2 found under ROOT/proj, stripped, escaped");
    cr_expect_eq(count(h2, "\"source\":"), 1, "the file named </script>.py is nowhere");
    free(h1);
    free(h2);
    mt_analysis_free(a);
}

Test(export_html, several_traces_and_their_labels)
{
    fx f1, f2;
    evil_trace(&f1);
    fx_open(&f2, "plain.mtrace");
    fx_ev(&f2, MT_OP_ALLOC, MT_KIND_DEVICE, 1, A, 4096, 1, 0);
    fx_close(&f2);
    mt_analysis *a[2] = {fx_analyze(f1.path), fx_analyze(f2.path)};
    mt_out *o;
    char path[512], err[256];
    mt_test_tmpname(path, sizeof path, "two.html");
    cr_assert((o = mt_out_open(path, err, sizeof err)));
    cr_assert_eq(mt_export_html(o, a, 2, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mt_out_close(o), 0);
    size_t n;
    char *html = (char *)mt_test_slurp(path, &n);
    html = realloc(html, n + 1);
    html[n] = 0;
    /* labels as every output names a trace among several (mt_trace_label) */
    cr_expect(strstr(html, "\"label\":\"process[4242]\""), "no command, no host: process[pid]");
    cr_expect(strstr(html, "\"label\":\"py\\\"\\u003cb\\u003e[4242] on testhost\""));
    cr_expect(strstr(html, "\"ranks\":{\"max\":0,\"median\":1,\"min\":1,"),
              "the largest peak, the median, the smallest: %s", strstr(html, "\"ranks\":"));
    cr_expect(strstr(html, "\"root\":\"cuda:1\""));
    free(html);
    mt_analysis_free(a[0]);
    mt_analysis_free(a[1]);
}

static int status_of(const char *cmd)
{
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s", cmd);
    return WEXITSTATUS(st);
}

Test(export_html, cli)
{
    fx f;
    evil_trace(&f);
    char out[512], cmd[2048];
    mt_test_tmpname(out, sizeof out, "cli.html");
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format html -o %s %s", out, f.path);
    cr_expect_eq(status_of(cmd), 0);
    struct stat sb;
    cr_expect(stat(out, &sb) == 0 && sb.st_size > 10000);
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format html --metric peak -o %s %s 2>/dev/null", out, f.path);
    cr_expect_eq(status_of(cmd), 2, "--metric means nothing to the html report");
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format html --device 0 -o %s %s 2>/dev/null", out, f.path);
    cr_expect_eq(status_of(cmd), 2, "--device neither: every device is in it");
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format chrome --source-root / -o %s %s 2>/dev/null", out, f.path);
    cr_expect_eq(status_of(cmd), 2, "--source-root is the html report's");
    snprintf(cmd, sizeof cmd, MEMTRACE " export --format html -o %s /nonexistent.mtrace 2>/dev/null", out);
    cr_expect_eq(status_of(cmd), 2);
    snprintf(cmd, sizeof cmd, MEMTRACE " export --help | grep -q 'html  *one self-contained page'");
    cr_expect_eq(status_of(cmd), 0, "--help names the format");
}
