#!/usr/bin/env python3
"""Exports every trace in a directory as speedscope files and as folded stacks (one file per
device), imports them with speedscope's own importer (tests/js/speedscope_import.mjs, the npm
package's code) and checks what speedscope made of them against `memtrace report --json`:

  speedscope  one profile per device and metric with bytes as its unit, whose total is the
              report's number (peak_bytes, total_alloc_bytes, end_bytes, leak_bytes), and every
              frame a sample names;
  folded      every line as flamegraph.pl reads it (/^(.*)\\s+?(\\d+(?:\\.\\d*)?)$/, frames split
              at ';', no empty frame, no second count at the end of the stack), one device per
              file; speedscope's import totals the device's peak and has exactly the file's frames.

usage: check_speedscope.py MEMTRACE TRACE_DIR
Prints 'N passed, M failed' (one per trace).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
IMPORTER = os.path.join(HERE, "..", "js", "speedscope_import.mjs")
LINE = re.compile(r"^(.*)\s+?(\d+(?:\.\d*)?)$")  # flamegraph.pl's, also for the differential


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def speedscope(*files):
    return [json.loads(l) for l in run("node", IMPORTER, *files).splitlines() if l.strip()]


def check_folded_lines(text, root):
    frames = set()
    total = 0
    for line in text.splitlines():
        m = LINE.match(line)
        assert m, "flamegraph.pl would skip: %r" % line
        stack, count = m.group(1), m.group(2)
        assert not LINE.match(stack), "flamegraph.pl would read two counts: %r" % line
        assert count.isdigit(), line
        parts = stack.split(";")
        assert all(parts), "empty frame: %r" % line
        assert parts[0] == root, "a line of another device: %r" % line
        frames.update(parts)
        total += int(count)
    return frames, total


def check_trace(memtrace, path, tmp):
    report = json.loads(run(memtrace, "report", "--json", path))
    devices = report["devices"] + ([report["host"]] if report["host"] else [])
    out = os.path.join(tmp, os.path.basename(path) + ".speedscope.json")
    run(memtrace, "export", "--format", "speedscope", "-o", out, path)
    exported = json.load(open(out))
    (got,) = speedscope(out)
    names = {p["name"]: p for p in got["profiles"]}
    want = {"live at the peak": "peak_bytes", "allocated over the run": "total_alloc_bytes",
            "live at the end": "end_bytes", "not freed at the end (possible leaks)": "leak_bytes"}
    expected = 0
    for d in devices:
        for title, field in want.items():
            if not d[field]:
                continue
            expected += 1
            match = [p for n, p in names.items() if (" %s: %s, " % (d["root"], title)) in n]
            assert len(match) == 1, "%s %s: %s" % (d["root"], title, list(names))
            p = match[0]
            assert p["unit"] == "bytes", p["unit"]
            assert p["total"] == d[field], (d["root"], title, p["total"], d[field])
    assert len(got["profiles"]) == expected, (len(got["profiles"]), expected)
    used = {exported["shared"]["frames"][i]["name"]
            for p in exported["profiles"] for s in p["samples"] for i in s}
    assert {f for p in got["profiles"] for f in p["frames"]} == used, "frames lost on import"
    for d in devices:
        sel = "host" if d["root"] == "host" else str(d["device"])
        if d["root"] == "cuda:?":
            sel = "?"
        folded = os.path.join(tmp, "%s.%s.folded" % (os.path.basename(path), d["root"]))
        run(memtrace, "export", "--format", "folded", "--device", sel, "-o", folded, path)
        frames, total = check_folded_lines(open(folded).read(), d["root"])
        assert total == d["peak_bytes"], (d["root"], total, d["peak_bytes"])
        if not total:
            continue
        (imp,) = speedscope(folded)
        (p,) = imp["profiles"]
        assert p["total"] == d["peak_bytes"], (d["root"], p["total"], d["peak_bytes"])
        assert set(p["frames"]) == frames, "speedscope read other frames than the file has"


def main(memtrace, data_dir):
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(data_dir)):
            if not name.endswith(".mtrace"):
                continue
            try:
                check_trace(memtrace, os.path.join(data_dir, name), tmp)
                passed += 1
                print("ok   %s" % name)
            except (AssertionError, subprocess.CalledProcessError) as e:
                failed += 1
                print("FAIL %s: %r %s" % (name, e, getattr(e, "stderr", "") or ""))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
