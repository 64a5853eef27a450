#!/usr/bin/env python3
"""Renders memtrace's Markdown summaries (report, check and diff --markdown) with markdown-it
(npm, pinned in tests/js/package.json; tests/js/markdown_render.mjs) and checks the HTML:

  * every table of the source became a table (as many <table> as separator rows), with as many
    cells in every row as headers, and the headers each command promises;
  * nothing from a trace turned into markup: only the tags memtrace writes appear (no <em> from
    "_name_" or "*args*", no <locals> from "Module.to.<locals>.convert", no link), and each of
    the synthetic trace's awkward names ("split|join", "tick`tock", ...) is in a <code> as written;
  * the numbers in the tables are the JSON outputs' numbers, formatted as memtrace formats bytes.

usage: check_markdown.py MEMTRACE MAKE_CI_TRACES DATA_DIR [HTML_OUT_DIR]
With HTML_OUT_DIR, also writes each rendering as a page (to look at in a browser).
"""
import html
import html.parser
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RENDER = os.path.join(HERE, "..", "js", "markdown_render.mjs")
ALLOWED = {"p", "h3", "h4", "table", "thead", "tbody", "tr", "th", "td", "code", "strong", "sub",
           "details", "summary", "blockquote"}
AWKWARD = ["Model.to.<locals>.convert", "split|join", "tick`tock", "_private_helper_",
           "*args_star*", "mod_x.py", "ns::Flags::operator|"]


def fmt_bytes(n):
    """mt_format_bytes."""
    if n < 1024:
        return "%d B" % n
    v, units = n / 1024.0, ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    u = 0
    while v >= 1024.0 and u + 1 < len(units):
        v /= 1024.0
        u += 1
    return "%.2f %s" % (v, units[u])


class Page(html.parser.HTMLParser):
    """Tables (header texts, rows of cell texts), headings, code texts and tags of an HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.tables, self.headings, self.codes = set(), [], [], []
        self.cell = self.code = self.heading = None
        self.row = None

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag == "table":
            self.tables.append({"head": [], "rows": []})
        elif tag == "tr":
            self.row = []
        elif tag in ("th", "td"):
            self.cell = ""
        elif tag == "code":
            self.code = ""
        elif tag in ("h3", "h4"):
            self.heading = ""

    def handle_endtag(self, tag):
        if tag in ("th", "td"):
            self.row.append(self.cell.replace("\xa0", " ").strip())  # numbers keep their units
            self.cell = None
        elif tag == "tr":
            t = self.tables[-1]
            if not t["head"]:
                t["head"] = self.row
            else:
                t["rows"].append(self.row)
        elif tag == "code":
            self.codes.append(self.code)
            self.code = None
        elif tag in ("h3", "h4"):
            self.headings.append(self.heading.strip())
            self.heading = None

    def handle_data(self, data):
        for name in ("cell", "code", "heading"):
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name) + data)


def run(memtrace, *args, ok=(0,)):
    r = subprocess.run([memtrace, *args], capture_output=True, text=True)
    assert r.returncode in ok, "%s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr)
    return r.stdout


def main():
    memtrace, make_traces, data = map(os.path.abspath, sys.argv[1:4])
    html_out = sys.argv[4] if len(sys.argv) > 4 else None
    tmpdir = tempfile.TemporaryDirectory()  # removed when main returns
    tmp = tmpdir.name
    syn = os.path.join(tmp, "traces")
    subprocess.run([make_traces, syn], check=True)
    t = lambda n: os.path.join(syn, n)
    d = lambda n: os.path.join(data, n)
    # (name, kind, markdown args, exit codes, JSON args for the numbers)
    cases = [
        ("report-tensors", "report", ["report", "--markdown", d("cifar_tensors_b512.mtrace")], (0,)),
        ("report-default", "report", ["report", "--markdown", d("cifar_default.mtrace")], (0,)),
        ("report-failed", "report", ["report", "--markdown", d("alloc_patterns.mtrace")], (0,)),
        ("report-names", "report", ["report", "--markdown", t("names.mtrace")], (0,)),
        ("report-ranks", "report", ["report", "--markdown", t("rank0.mtrace"), t("rank1.mtrace"),
                                    t("budget.mtrace")], (0,)),
        ("check-exceeded", "check", ["check", "--markdown", "--max-peak", "3MiB",
                                     "--max-live-at-exit", "0", "--max-failed", "0",
                                     t("budget.mtrace"), t("names.mtrace")], (1,)),
        ("check-tensors", "check", ["check", "--markdown", "--max-allocated-peak", "200MiB",
                                    d("cifar_tensors_b512.mtrace")], (1,)),
        ("check-holds", "check", ["check", "--markdown", "--max-peak", "1GiB",
                                  d("cifar_tensors.mtrace")], (0,)),
        ("diff-fixtures", "diff", ["diff", "--markdown", "--fail-on-increase", "10",
                                   d("cifar_tensors.mtrace"), d("cifar_tensors_b512.mtrace")], (1,)),
        ("diff-moved", "diff", ["diff", "--markdown", t("moved_base.mtrace"),
                                t("moved_new.mtrace")], (0,)),
        ("diff-names", "diff", ["diff", "--markdown", t("budget.mtrace"), t("names.mtrace")], (0,)),
        ("diff-ranks", "diff", ["diff", "--markdown", d("ddp_rank0.mtrace"),
                                d("ddp_rank1.mtrace")], (0,)),
    ]
    heads = {
        "report": [["GPU", "peak", "allocated peak", "reserved peak", "live at exit",
                    "held by the program at exit", "failed requests"],
                   ["trace", "GPU", "peak", "allocated peak", "reserved peak", "live at exit",
                    "held by the program at exit", "failed requests"],
                   ["share", "bytes", "stack"], ["at the peak", "allocated in all", "line"],
                   ["when", "where", "requested", "result", "in use then", "requested by"],
                   ["rank", "host", "pid", "GPUs", "peak", "peak at", "at exit", "failed",
                    "top stack at the peak"],
                   ["rank", "host", "pid", "GPUs", "peak", "tensors", "peak at", "at exit",
                    "failed", "top stack at the peak"],
                   ["difference", "largest rank", "median rank", "stack"],
                   ["category", "at the peak", "textbook", "difference"]],
        "check": [["trace", "GPU", "budget", "limit", "value", "verdict"], ["share", "bytes", "stack"]],
        "diff": [["GPU", "", "base", "new", "change"], ["change", "base", "new", "stack"],
                 ["change", "base", "new", "line"]],
    }
    titles = {"report": "memtrace: GPU memory of", "check": "memtrace check:", "diff": "memtrace diff"}
    files = []
    for name, kind, args, ok in cases:
        path = os.path.join(tmp, name + ".md")
        with open(path, "w") as f:
            f.write(run(memtrace, *args, ok=ok))
        files.append(path)
    rendered = [json.loads(l) for l in subprocess.run(["node", RENDER, *files], check=True,
                                                      capture_output=True, text=True).stdout.splitlines()]
    failures = 0
    for (name, kind, args, ok), r in zip(cases, rendered):
        src = open(r["file"]).read()
        page = Page()
        page.feed(r["html"])
        problems = []
        separators = sum(1 for l in src.splitlines() if l.startswith("|--") or l.startswith("|:-"))
        if len(page.tables) != separators:
            problems.append("%d tables in the source, %d rendered" % (separators, len(page.tables)))
        for tb in page.tables:
            if tb["head"] not in heads[kind]:
                problems.append("unexpected table header %r" % tb["head"])
            for row in tb["rows"]:
                if len(row) != len(tb["head"]):
                    problems.append("a row of %d cells under %d headers: %r" %
                                    (len(row), len(tb["head"]), row))
        if not page.headings or not page.headings[0].startswith(titles[kind]):
            problems.append("first heading %r" % (page.headings[:1],))
        stray = page.tags - ALLOWED
        if stray:
            problems.append("markup that memtrace did not write: %s" % sorted(stray))
        if name == "report-names":
            cmd = "python3 'we|ird dir/mod_x.py' --flag=`x` <in"
            if cmd not in page.codes:
                problems.append("the command line is not in a <code> as written: %r" % page.codes[:1])
        if "names" in name:
            for a in AWKWARD:
                if not any(a in c for c in page.codes):
                    problems.append("%r is not in a <code> as written" % a)
        # the numbers
        if name == "report-tensors":
            rep = json.loads(run(memtrace, "report", "--json", args[-1]))
            dev = rep["devices"][0]
            row = page.tables[0]["rows"][0]
            want = [fmt_bytes(dev["peak_bytes"]), fmt_bytes(dev["tensors_peak_bytes"]),
                    fmt_bytes(dev["segments_peak_bytes"]), fmt_bytes(dev["end_bytes"]),
                    fmt_bytes(dev["leak_bytes"]), str(dev["failed_count"])]
            if row[1:] != want:
                problems.append("GPU row %r, the JSON report says %r" % (row[1:], want))
            # the "by category" table: the JSON's rows, then the two sums
            cats = dev["categories_at_peak"]
            signed = lambda v: "0" if v == 0 else ("+" if v > 0 else "-") + fmt_bytes(abs(v))
            want = [[("+ " if i else "") + c["name"], fmt_bytes(c["bytes"]),
                     "—" if c["textbook_bytes"] is None else fmt_bytes(c["textbook_bytes"]),
                     signed(c["difference_bytes"])] for i, c in enumerate(cats["rows"])]
            k = next(i for i, c in enumerate(cats["rows"]) if c["outside"])
            want.insert(k, ["= tensors", fmt_bytes(cats["tensors_bytes"]), "", ""])
            want.append(["= process total", fmt_bytes(cats["total_bytes"]), fmt_bytes(cats["textbook_bytes"]),
                         signed(cats["total_bytes"] - cats["textbook_bytes"])])
            got = [tb["rows"] for tb in page.tables if tb["head"][0] == "category"]
            if got != [want]:
                problems.append("category rows %r, the JSON report says %r" % (got, want))
        if name == "report-default" and page.tables[0]["rows"][0][2] != "—":
            problems.append("allocated peak without tensors must be unknown (—)")
        if name == "diff-ranks":
            # two ranks: their own GPUs first, the stray context after
            dj = json.loads(run(memtrace, "diff", "--json", *args[-2:]))
            first = dj["devices"][0]
            row = page.tables[0]["rows"][0]
            if row[0] != first["title"] or row[2:4] != [fmt_bytes(first["peak"]["base"]),
                                                        fmt_bytes(first["peak"]["new"])]:
                problems.append("first GPU row %r, the JSON diff says %r %r" %
                                (row, first["title"], first["peak"]))
        if name == "diff-fixtures":
            dj = json.loads(run(memtrace, "diff", "--json", *args[-2:]))
            peak = dj["devices"][0]["peak"]
            row = page.tables[0]["rows"][0]
            if row[2:4] != [fmt_bytes(peak["base"]), fmt_bytes(peak["new"])]:
                problems.append("peak row %r, the JSON diff says %r" % (row, peak))
            if not row[4].startswith("+" + fmt_bytes(peak["change"])):
                problems.append("peak change %r, the JSON diff says %r" % (row[4], peak["change"]))
        if name.startswith("check"):
            cj = json.loads(run(memtrace, "check", "--json", *args[2:], ok=ok))
            rows = page.tables[0]["rows"]
            if len(rows) != len(cj["checks"]):
                problems.append("%d verdict rows, %d checks" % (len(rows), len(cj["checks"])))
            for row, c in zip(rows, cj["checks"]):
                if c["budget"] != "failed requests" and row[4] != fmt_bytes(c["value"]) and \
                        not row[4].startswith(fmt_bytes(c["value"]) + " ("):
                    problems.append("value %r, the JSON check says %d" % (row[4], c["value"]))
                if ("exceeded" in row[5]) != c["exceeded"]:
                    problems.append("verdict %r, the JSON check says exceeded=%s" % (row[5], c["exceeded"]))
        if name == "report-ranks" and "details" not in page.tags:
            problems.append("more than two GPUs: their tables fold into <details>")
        if name == "report-ranks":
            # the rank table carries the text and JSON reports' numbers
            rt = json.loads(run(memtrace, "report", "--json", *args[2:]))["rank_table"]
            ranks = [tb for tb in page.tables if tb["head"][0] == "rank"]
            if len(ranks) != 1 or len(ranks[0]["rows"]) != len(rt["rows"]):
                problems.append("one rank table with a row per trace: %r" % ranks)
            else:
                for row, r in zip(ranks[0]["rows"], rt["rows"]):
                    if row[2] != str(r["pid"]) or row[4] != fmt_bytes(r["peak_bytes"]):
                        problems.append("rank row %r, the JSON report says pid %d peak %d" %
                                        (row, r["pid"], r["peak_bytes"]))
            if "Imbalance" not in src:
                problems.append("no imbalance line")
        if html_out:
            os.makedirs(html_out, exist_ok=True)
            with open(os.path.join(html_out, name + ".html"), "w") as f:
                f.write("<!doctype html><meta charset=utf-8><title>%s</title><style>body{font:14px "
                        "-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1012px;margin:"
                        "24px auto}table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid "
                        "#d0d7de;padding:4px 10px}code{background:#eff1f3;border-radius:4px;padding:"
                        "1px 4px;font-size:85%%}blockquote{color:#59636e;border-left:4px solid "
                        "#d0d7de;margin:0;padding:0 12px}</style>%s" % (html.escape(name), r["html"]))
        print("%-16s %s" % (name, "ok" if not problems else "FAILED"))
        for p in problems:
            print("    ", p)
        failures += bool(problems)
    print("%d passed, %d failed" % (len(cases) - failures, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
