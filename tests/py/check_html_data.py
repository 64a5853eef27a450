#!/usr/bin/env python3
"""Exports every trace in a directory (and a synthetic one of 300 000 events) as an HTML report,
takes the data out of the page as a browser would (the text of <script id="memtrace-data">) and
checks it against `memtrace report --json` and against itself:

  page       one <script type="application/json">, no other element a browser would fetch, the
             Content-Security-Policy that forbids fetching, no template marker left;
  devices    peak, API peak, live at the end, the reconciliation's numbers and the "by category"
             table (record --tensors) equal the report's;
  timeline   points in time order, series adding up to the total at every point, the highest
             point equal to the peak (downsampled or not) and the peak's own point kept;
  moments    each adds up (its stacks plus the rest) to its total, one is the peak, the peak's
             list adds up to the peak, the end's to what is live at the end;
  tables     every stack names path nodes that exist; every node's parent comes before it;
  by line    the report's lines, in its order.

A truncated copy of the largest fixture and several traces in one page are checked too.

usage: check_html_data.py MEMTRACE SYNTH_TRACE TRACE_DIR
Prints 'N passed, M failed' (one per trace).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

DATA = re.compile(r'<script type="application/json" id="memtrace-data">\n(.*?)\n</script>', re.S)


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def page_data(html):
    assert html.startswith("<!doctype html>"), html[:40]
    assert "default-src 'none'" in html, "no Content-Security-Policy"
    assert "@memtrace-" not in html, "a template marker is left"
    assert html.count('type="application/json"') == 1
    assert len(re.findall(r"</script", html, re.I)) == 2, "a </script> inside the data or the code"
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=", html), "something a browser would fetch"
    m = DATA.search(html)
    assert m, "no data"
    assert "<" not in m.group(1), "a raw '<' in the data"
    return json.loads(m.group(1))


def check_stacks(t, flat, rest, total, what):
    assert len(flat) % 3 == 0, what
    n = len(t["stacks"])
    s = rest[0]
    for i in range(0, len(flat), 3):
        assert 0 <= flat[i] < n, (what, flat[i])
        s += flat[i + 1]
        if i:
            assert flat[i - 2] >= flat[i + 1], (what, "not largest first")
    assert s == total, (what, s, total)


def check_trace(t, rep):
    nodes = t["nodes"]
    for k in range(0, len(nodes), 2):
        assert -1 <= nodes[k] < k // 2, ("node parent after the node", k // 2, nodes[k])
        assert 0 <= nodes[k + 1] < len(t["names"])
    for view, full, first in t["stacks"]:
        assert -1 <= view < len(nodes) // 2 and -1 <= full < len(nodes) // 2
        assert 0 <= first < len(t["names"])
    want = rep["devices"] + ([rep["host"]] if rep["host"] else [])
    assert [d["root"] for d in t["devices"]] == [d["root"] for d in want]
    assert t["events"] == rep["events"] and t["duration_ns"] == rep["duration_ns"]
    assert (t["truncated"] is not None) == rep["truncated"]
    assert t["activity_records"] == rep["activity_records"], (t["file"], "activity records")
    assert t["activity_stopped_ns"] == rep.get("activity_stopped_ns", 0), (t["file"], "stopped")
    for d, r in zip(t["devices"], want):
        w = "%s %s" % (t["file"], d["root"])
        for mine, theirs in (("peak", "peak_bytes"), ("api_peak", "api_peak_bytes"),
                             ("peak_time_ns", "peak_time_ns"), ("end_bytes", "end_bytes"),
                             ("alloc_count", "total_alloc_count"), ("failed_count", "failed_count")):
            assert d[mine] == r[theirs], (w, mine, d[mine], r[theirs])
        assert d["imported_peak"] == r.get("imported_peak_bytes", 0), (w, "imported")
        tl = d["timeline"]
        n = len(tl["t"])
        # a GPU known from NVML's samples alone (a context, nothing allocated) has no point
        assert (n or (not d["alloc_count"] and not d["peak"])) and len(tl["e"]) == n and len(tl["total"]) == n, w
        assert len(tl["v"]) == len(d["series"])
        for i in range(n):
            if i:
                assert (tl["t"][i - 1], tl["e"][i - 1]) < (tl["t"][i], tl["e"][i]), (w, "order", i)
            assert sum(v[i] for v in tl["v"]) == tl["total"][i], (w, "series", i)
        assert max(tl["total"], default=0) == d["peak"], (w, "highest point", tl["total"], d["peak"])
        if d["peak"]:
            assert d["peak_event"] in tl["e"], (w, "the peak's point is missing")
        assert tl["downsampled"] == (rep["events"] > 16384), w
        if tl["downsampled"]:
            assert n <= 2 * 4096, w
        else:
            assert n == tl["changes"], w
        peaks = [m for m in d["moments"] if m["peak"]]
        assert len(peaks) == (1 if d["peak"] else 0), w
        assert len(d["moments"]) <= 257, w
        for m in d["moments"]:
            assert m["from"] <= m["t"] < m["to"], w
            check_stacks(t, m["s"], m["rest"], m["total"], w + " moment")
            if m["peak"]:
                assert m["total"] == d["peak"] and m["e"] == d["peak_event"], w
        check_stacks(t, d["peak_stacks"], d["peak_rest"], d["peak"], w + " peak")
        check_stacks(t, d["end_stacks"], d["end_rest"], d["end_bytes"], w + " end")
        if not d["is_host"]:
            for when in ("at_peak", "at_end"):
                b, rb = d["breakdown"][when], r["breakdown"][when]
                assert (b is None) == (rb is None), (w, when, b, rb)
                if b is None:  # no peak to break down (a GPU with nothing allocated)
                    continue
                assert b["reserved_bytes"] == rb["allocator_reserved_bytes"], (w, when)
                assert b["other_bytes"] == rb["other_libraries_bytes"], (w, when)
                assert b.get("process_bytes", "unknown") == rb["process_bytes"], (w, when)
            # the "by category at the peak" table: report --json's rows, in its order
            c, rc = d["categories"], r["categories_at_peak"]
            assert (c is None) == (rc is None), (w, "categories", c, rc)
            if c is not None:
                assert [c[k] for k in ("optimizer", "w", "w_trained", "tensors", "total", "textbook",
                                       "process_known")] == \
                    [rc[k] for k in ("optimizer", "w_bytes", "w_trained_bytes", "tensors_bytes",
                                     "total_bytes", "textbook_bytes", "process_known")], (w, "categories")
                assert c["rows"] == [[x["name"], x["outside"], x["bytes"], x["textbook_bytes"],
                                      x["difference_bytes"], x["why"]] for x in rc["rows"]], (w, "rows")
        lines = r.get("by_line") or []
        got = d.get("by_line") or []
        assert len(got) == min(len(lines), 2000), (w, len(got), len(lines))
        for a, b in zip(got, lines):
            assert (a["file"], a["line"], a["peak_bytes"], a["alloc_bytes"]) == \
                (b["file"], b["line"], b["peak_bytes"], b["alloc_bytes"]), (w, a, b)
    # the header's recording cost: the report's figure, the brief one first, the sentence second
    rc, hc = rep["recording_cost"], t.get("recording_cost")
    assert (hc is None) == (rc is None), (t["file"], hc, rc)
    if rc:
        assert len(hc) == 2 and hc[1].startswith("about "), hc
        # of the run; of the first N s when the figure is a killed process's running totals
        span = r"the run" if rc["until_ns"] is None else r"the first [0-9.]+ s"
        m = re.fullmatch(r"~?([0-9.]+) (ns|µs|ms|s) \(([0-9.]+)% of " + span + r"\)", hc[0])
        assert m, (hc, rc["until_ns"])
        ns = float(m.group(1)) * {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}[m.group(2)]
        assert abs(ns - rc["ns"]) <= 0.006 * rc["ns"], (hc, rc)  # 3 digits shown
        assert m.group(3) == "%.2f" % (100 * rc["share_of_duration"]), (hc, rc)
    fails = rep["failed_requests"]
    assert len(t["failed"]) == len(fails)
    for f, r in zip(t["failed"], fails):
        assert f["bytes"] == r["bytes"] and f["in_use"] == r["in_use_bytes"]
        # the backward() call of a request of autograd's workers: the same frame and time
        bc = r["backward_call"]
        assert (f["backward"] is None) == (bc is None), (f["backward"], bc)
        if bc:
            assert f["backward_t"] == bc["time_ns"], (f["backward_t"], bc)
            assert t["names"][t["stacks"][f["backward"]][2]] == bc["frame"], (f["backward"], bc)
        check_stacks(t, f["live"], f["live_rest"], f["in_use"], "failed")


def check(memtrace, paths, tmp, source_root):
    out = os.path.join(tmp, "r.html")
    run(memtrace, "export", "--format", "html", "--force", "-o", out, "--source-root", source_root, *paths)
    with open(out, encoding="utf-8") as f:
        data = page_data(f.read())
    whole = json.loads(run(memtrace, "report", "--json", "--by-line", *paths))
    reps = whole["traces"] if "traces" in whole else [whole]
    assert len(data["traces"]) == len(paths)
    for t, rep in zip(data["traces"], reps):
        check_trace(t, rep)
    # the rank table: the report's rows and imbalance (several traces)
    table = whole.get("rank_table")
    assert (data["ranks"] is None) == (len(paths) < 2), data["ranks"]
    if table:
        for t, row in zip(data["traces"], table["rows"]):
            r = t["rank"]
            for mine, theirs in (("peak", "peak_bytes"), ("tensor_peak", "tensors_peak_bytes"),
                                 ("live_at_exit", "live_at_exit_bytes"), ("failed", "failed_requests"),
                                 ("top_bytes", "top_stack_bytes")):
                assert r[mine] == row[theirs], (t["file"], mine, r[mine], row[theirs])
            assert r["rank"] == row["rank"] and t["label"] == row["label"]
        im = table["imbalance"]
        assert [data["ranks"][k] for k in ("max", "median", "min")] == [im[k] for k in ("max", "median", "min")]
        got = [s["delta"] for s in data["ranks"]["stacks"]]
        assert got[: len(im["stacks"])] == [s["delta_bytes"] for s in im["stacks"]], (got, im["stacks"])
        # how the job ended: the report's rank errors in time order, and the ranks with no END
        ends = data["ranks"]["endings"]
        ooms = sorted((row["out_of_memory"]["time_unix_ns"], row["rank"]) for row in table["rows"]
                      if row["out_of_memory"])
        said = [e for e in ends if "OutOfMemoryError: rank" in e or e.startswith("then rank")]
        assert [int(e.split("rank ")[1].split()[0]) for e in said] == [r for _, r in ooms[:8]], (ends, ooms)
        killed = [row["rank"] for row in table["rows"] if not row["ended_cleanly"]]
        no_end = [e for e in ends if e.startswith("no END record")]
        assert bool(no_end) == bool(killed), (ends, killed)
        for r in killed:
            assert "rank %d" % r in no_end[0], (no_end, r)
        # memory on another rank's GPU: a line per entry of the report's other_gpus, in its order
        other = data["ranks"]["other_gpus"]
        said = [e for e in other if " holds memory on cuda:" in e]
        want = ["rank %d holds memory on cuda:%d, " % (table["rows"][o["row"]]["rank"], o["device"])
                for o in table["other_gpus"]][:8]
        assert [e[: len(w)] for e, w in zip(said, want)] == want and len(said) == len(want), (other, want)


def main():
    memtrace, synth, data_dir = sys.argv[1:4]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        big = os.path.join(tmp, "synthetic.mtrace")
        run(synth, big, "300000")
        traces = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir) if f.endswith(".mtrace"))
        # a trace cut inside a chunk (a killed process): every read stops at the same place
        cut = os.path.join(tmp, "cut.mtrace")
        largest = max(traces, key=os.path.getsize)
        with open(largest, "rb") as f, open(cut, "wb") as g:
            g.write(f.read()[: os.path.getsize(largest) * 2 // 3])
        ddp = [p for p in traces if "ddp_rank" in p]
        oom_job = [p for p in traces if "ddp_oom_rank" in p]  # rank 1's error ended the job
        cases = [[p] for p in traces] + [[big], [cut], traces[:3]] + ([ddp] if len(ddp) > 1 else [])
        cases += [oom_job] if len(oom_job) > 1 else []
        stray = [p for p in traces if "ddp_stray_rank" in p]  # rank 1 on rank 0's GPU too
        cases += [stray] if len(stray) > 1 else []
        for paths in cases:
            try:
                check(memtrace, paths, tmp, data_dir)
                passed += 1
            except (AssertionError, subprocess.CalledProcessError, ValueError, KeyError) as e:
                failed += 1
                print("FAIL %s: %r" % (" ".join(map(os.path.basename, paths)), e))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or passed < 5 else 0


if __name__ == "__main__":
    sys.exit(main())
