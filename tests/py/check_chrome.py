#!/usr/bin/env python3
"""Checks a `memtrace export --format chrome` file against what its two viewers accept.

Perfetto's JSON importer (src/trace_processor/importers/json/json_trace_tokenizer.cc and
json_trace_parser.cc) and the catapult trace viewer (tracing/extras/importer/
trace_event_importer.html) drop or misplace events that break these rules; each check below
names the rule it enforces. Prints one line: slices counters instants min_bytes max_bytes
slices_kept tracks, where tracks is the number of distinct slice tracks.

usage: check_chrome.py FILE[.gz]
"""
import gzip
import json
import re
import sys

U32 = 2**32 - 1


def fail(msg, e=None):
    raise SystemExit("check_chrome: %s%s" % (msg, (": %s" % json.dumps(e)[:300]) if e else ""))


def no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        fail("an object repeats a key (the viewers keep one of them)", dict(pairs))
    return dict(pairs)


def stack_group(e):
    """The counter points of one device at one moment ("cuda:0 in use", "cuda:0 by kind", ...)."""
    return (e["pid"], e["name"].split(" ", 1)[0], e["ts"])


def stacks_add_up(latest, group):
    """catapult draws a counter's keys stacked, the track's height their sum (model/counter.html
    totals, ui/tracks/counter_track.html): once a device's points at one moment are read, its
    "by kind" must add up to its "in use" (address space is not bytes in use) and its
    "by category" to its "tensors allocated"."""
    pid, dev, _ = group
    for parts, whole in (("by kind", "in use"), ("by category", "tensors allocated")):
        p = latest.get((pid, dev + " " + parts))
        w = latest.get((pid, dev + " " + whole))
        if p is not None and w is not None and sum(p.values()) != w["bytes"]:
            fail("%s %s adds up to %d, %s is %d at %s (catapult stacks a counter's keys)"
                 % (dev, parts, sum(p.values()), whole, w["bytes"], group[2]), p)


def main(path):
    raw = (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")).read()
    text = raw.decode("utf-8")  # the tokenizer reads bytes; JSON must be valid UTF-8
    # tokenizer: the first non-blank character is '{' (a dictionary with "traceEvents")
    if text.lstrip()[:1] != "{":
        fail("the file must start with '{'")
    # json.loads rejects raw control characters in strings, as the tokenizer does (iscntrl)
    d = json.loads(text, object_pairs_hook=no_duplicate_keys)
    if not isinstance(d.get("traceEvents"), list):
        fail("traceEvents is not an array")
    # Perfetto counts displayTimeUnit as an import stat and some of its builds misread it
    if "displayTimeUnit" in d:
        fail("displayTimeUnit is present")
    if "systemTraceEvents" in d:
        fail("systemTraceEvents is present")
    ev = d["traceEvents"]
    counts = {}
    named_pids = set()
    open_ = {}      # (pid, cat, id) -> stack of [name, ts]
    counter_keys = {}
    counter_last = {}  # (pid, name) -> last ts
    pid_end = {}    # pid -> largest ts
    sizes = []
    tracks = set()
    latest = {}     # (pid, counter name) -> args of its latest point
    group = None    # (pid, device, ts) of the counter points being read
    for order, e in enumerate(ev):
        if group and (e.get("ph") != "C" or stack_group(e) != group):
            stacks_add_up(latest, group)
            group = None
        if not isinstance(e, dict):
            fail("an event is not an object", e)
        ph = e.get("ph")
        # tokenizer: "ph" is a string; its first character is the phase
        if not isinstance(ph, str) or not ph:
            fail("ph missing", e)
        counts[ph] = counts.get(ph, 0) + 1
        # tokenizer: pid/tid integers are coerced to uint32, anything else becomes 0
        for k in ("pid", "tid"):
            if not isinstance(e.get(k), int) or isinstance(e.get(k), bool) or not 0 <= e[k] <= U32:
                fail("%s is not an unsigned 32-bit integer" % k, e)
        if e["pid"] == 0:
            fail("pid 0: an empty process in the viewers", e)
        # tokenizer: every event but metadata needs a numeric ts (else json_tokenizer_failure)
        if ph != "M":
            ts = e.get("ts")
            if not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0:
                fail("ts is not a non-negative number", e)
            pid_end[e["pid"]] = max(pid_end.get(e["pid"], 0), ts)
        name = e.get("name")
        if "id" in e and "id2" in e:
            fail("both id and id2 (catapult throws)", e)
        if ph == "M":
            # parser: only these four names are read; *_name needs a non-empty args.name
            if name not in ("process_name", "thread_name", "process_sort_index",
                            "thread_sort_index"):
                fail("unknown metadata", e)
            if name.endswith("_name") and not (isinstance(e.get("args"), dict) and
                                               isinstance(e["args"].get("name"), str) and
                                               e["args"]["name"]):
                fail("metadata without a name", e)
            if name == "process_name":
                if re.search(r"\(pid \d+\)", e["args"]["name"]):
                    fail("process name repeats the pid (the viewers add it)", e)
                named_pids.add(e["pid"])
        elif ph == "C":
            # parser: args must be non-empty, every value a number (catapult: numbers only)
            a = e.get("args")
            if not isinstance(a, dict) or not a:
                fail("counter without args", e)
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in a.values()):
                fail("counter value is not a number", e)
            # catapult fixes a counter's series at its first event
            key = (e["pid"], name)
            if counter_keys.setdefault(key, sorted(a)) != sorted(a):
                fail("counter keys change between events", e)
            # catapult draws a track in the order of its points: a point before the last one
            # would draw the series backwards
            if e["ts"] < counter_last.get(key, 0):
                fail("counter time steps back", e)
            counter_last[key] = e["ts"]
            latest[key] = a
            group = stack_group(e)
        elif ph in ("b", "e"):
            # parser: needs pid and an async cookie; id2.local scopes it to the process
            id2 = e.get("id2")
            if not (isinstance(id2, dict) and isinstance(id2.get("local"), str) and id2["local"]):
                fail("async event without id2.local", e)
            # catapult: nestable async events need cat and name
            if not isinstance(e.get("cat"), str) or not e["cat"]:
                fail("async event without cat", e)
            if not isinstance(name, str) or not name:
                fail("async event without a name", e)
            key = (e["pid"], e["cat"], id2["local"])
            st = open_.setdefault(key, [])
            if ph == "b":
                if not st:
                    tracks.add((e["pid"], name))  # both viewers: a track per top-level name
                    if re.search(r"\d+(\.\d+)? (B|KiB|MiB|GiB|TiB)\b", name):
                        fail("a size in a track name: one track per size", e)
                st.append([name, e["ts"]])
                if "args" in e and "bytes" in e["args"] and len(st) == 2:
                    a = e["args"]
                    if not isinstance(a.get("stack"), list) or not isinstance(a.get("kind"), str):
                        fail("slice args without stack or kind", e)
                    sizes.append(a["bytes"])
            else:
                # parser: End matches the open slice by name and cat; catapult by name
                if not st or st[-1][0] != name:
                    fail("e does not close the innermost open b of its id", e)
                if e["ts"] < st[-1][1]:
                    fail("slice ends before it begins", e)
                st.pop()
        elif ph == "i":
            # parser: scope g, p or t (t needs a tid)
            if e.get("s") not in ("g", "p", "t"):
                fail("instant scope", e)
        else:
            fail("unexpected phase " + ph, e)
    if group:
        stacks_add_up(latest, group)
    if any(st for st in open_.values()):
        fail("unterminated slices")
    for pid in pid_end:
        if pid not in named_pids:
            fail("process %d has no name" % pid)
    for (pid, name), last in counter_last.items():
        if last != pid_end[pid]:
            fail("counter %r stops at %s before the trace end %s" % (name, last, pid_end[pid]))
    print(counts.get("b", 0) // 2, counts.get("C", 0), counts.get("i", 0), min(sizes or [0]),
          max(sizes or [0]), d["otherData"]["slices_kept"], len(tracks))


if __name__ == "__main__":
    main(sys.argv[1])
