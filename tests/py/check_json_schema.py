#!/usr/bin/env python3
"""Holds memtrace's JSON outputs to docs/json.md and to the released schemas (tests/json/).

Runs `report --json` (one trace, several, --by-line, a truncated trace), `check --json` and
`diff --json` over the GPU-recorded fixtures and the synthetic traces of make_ci_traces, and fails
when
  * an output's "schema" is not the page's current schema number, or an object has a key twice;
  * an output has a field the page does not list (for that command);
  * a field the page lists as always present is missing from an object that has its parent;
  * a field the page lists is never seen (the page lists nothing that is not written, and this
    corpus covers every field);
  * a field of the released schema of that number (tests/json/schema-N.txt, never edited once
    released) is no longer listed, or an always-present one became optional: a field disappeared
    without the number changing.

usage: check_json_schema.py MEMTRACE MAKE_CI_TRACES DATA_DIR DOCS_JSON_MD FROZEN_DIR
       check_json_schema.py --write-frozen DOCS_JSON_MD    (prints schema-N.txt for the page)
"""
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

DOCS = {"report": "## `report --json`", "check": "## `check --json`", "diff": "## `diff --json`"}


def expand(spec):
    """'a.{b,c}.d' -> ['a.b.d', 'a.c.d'] (any number of groups)."""
    parts = re.split(r"(\{[^}]*\})", spec)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def parse_docs(path):
    """{doc: {path: optional}} from the tables of docs/json.md, and the current schema number."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r"Current schema: \*\*(\d+)\*\*", text)
    assert m, "docs/json.md must say 'Current schema: **N**'"
    schema = int(m.group(1))
    fields, doc = {}, None
    for line in text.splitlines():
        for name, heading in DOCS.items():
            if line.startswith(heading):
                doc = name
        if line.startswith("Multi-trace wrapper"):
            doc = "report-wrapper"
        if line.startswith("## ") and not any(line.startswith(h) for h in DOCS.values()):
            doc = None
        if not doc or not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        for spec in re.findall(r"`([^`]+)`", cell):
            optional = spec.endswith("?")
            for p in expand(spec.rstrip("?")):
                fields.setdefault(doc, {})[p] = optional
    for doc, paths in fields.items():
        for p in paths:
            parent = parent_of(p)
            assert parent is None or parent in paths or parent.rstrip("[]") in paths, \
                "%s: %s is listed but its parent %s is not" % (doc, p, parent)
    return schema, fields


def parent_of(p):
    """'a[].b' -> 'a[]', 'a.b' -> 'a', 'a' -> None."""
    i = p.rfind(".")
    return p[:i] if i >= 0 else None


class Seen:
    """Paths written per command, and every object instance per path (its keys)."""

    def __init__(self, maps):
        self.maps = maps  # paths whose objects are maps (keys are data)
        self.paths = {}
        self.instances = {}

    def walk(self, doc, v, path, count_instances=True):
        if isinstance(v, dict):
            if path in self.maps:
                for x in v.values():
                    self.paths.setdefault(doc, set()).add(path + ".*")
                    self.walk(doc, x, path + ".*", count_instances)
                return
            if count_instances:
                self.instances.setdefault(doc, {}).setdefault(path, []).append(set(v))
            for k, x in v.items():
                q = path + "." + k if path else k
                if doc == "report" and q == "host" and x is not None:
                    # pinned host memory: a device object without the GPU-only fields
                    self.paths.setdefault(doc, set()).add("host")
                    self.walk(doc, x, "devices[]", count_instances=False)
                    continue
                self.paths.setdefault(doc, set()).add(q)
                self.walk(doc, x, q, count_instances)
        elif isinstance(v, list):
            for x in v:
                self.walk(doc, x, path + "[]", count_instances)


def no_duplicates(pairs):
    """object_pairs_hook: a key twice in one object is an error (json.loads keeps the last)."""
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    assert not dup, "duplicate keys %s in one object" % dup
    return dict(pairs)


def run(memtrace, *args, cwd=None, ok=(0,)):
    r = subprocess.run([memtrace, *args], capture_output=True, text=True, cwd=cwd)
    assert r.returncode in ok, "%s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr)
    return json.loads(r.stdout, object_pairs_hook=no_duplicates)


def corpus(memtrace, make_traces, data, tmp):
    """(doc, output) for every output the check looks at."""
    syn = os.path.join(tmp, "traces")
    subprocess.run([make_traces, syn], check=True)
    # tensors.mtrace names a relative Python file: give it one, so by_line[].source is written
    os.makedirs(os.path.join(tmp, "proj"))
    with open(os.path.join(tmp, "proj", "train.py"), "w") as f:
        f.write("".join("line_%d = %d\n" % (i, i) for i in range(1, 70)))
    trunc = os.path.join(tmp, "truncated.mtrace")
    shutil.copy(os.path.join(data, "cifar_tensors.mtrace"), trunc)
    os.truncate(trunc, os.path.getsize(trunc) - 3000)
    fixtures = sorted(os.path.join(data, f) for f in os.listdir(data) if f.endswith(".mtrace"))
    synthetic = sorted(os.path.join(syn, f) for f in os.listdir(syn) if f.endswith(".mtrace"))
    t = lambda name: os.path.join(syn, name)
    d = lambda name: os.path.join(data, name)
    out = []
    for path in fixtures + synthetic + [trunc]:
        out.append(("report", run(memtrace, "report", "--json", path)))
        out.append(("report", run(memtrace, "report", "--json", "--by-line", path, cwd=tmp)))
    out.append(("report-wrapper", run(memtrace, "report", "--json", t("budget.mtrace"),
                                      d("cifar_tensors.mtrace"))))
    # a job one rank's torch.OutOfMemoryError ended: the other rank killed, no END
    out.append(("report-wrapper", run(memtrace, "report", "--json", d("ddp_oom_rank0.mtrace"),
                                      d("ddp_oom_rank1.mtrace"))))
    # a job whose ranks loaded a checkpoint onto GPU 0 before set_device: rank 1 on rank 0's GPU
    out.append(("report-wrapper", run(memtrace, "report", "--json", d("ddp_stray_rank0.mtrace"),
                                      d("ddp_stray_rank1.mtrace"))))
    every = ["--max-peak", "1", "--max-live-at-exit", "0", "--max-failed", "0"]
    out.append(("check", run(memtrace, "check", "--json", *every, "--max-allocated-peak", "1",
                             t("tensors.mtrace"), d("cifar_tensors.mtrace"), ok=(1,))))
    out.append(("check", run(memtrace, "check", "--json", *every, t("budget.mtrace"),
                             t("rank0.mtrace"), ok=(1,))))
    out.append(("check", run(memtrace, "check", "--json", "--device", "0", "--max-peak", "1G",
                             "--max-failed", "5", t("budget.mtrace"))))
    # memory on another rank's GPU: held (no other GPU) and exceeded (a context on GPU 0)
    out.append(("check", run(memtrace, "check", "--json", "--max-other-gpus", "100MiB",
                             d("ddp_stray_rank0.mtrace"), d("ddp_stray_rank1.mtrace"), ok=(1,))))
    pairs = [(t("moved_base.mtrace"), t("moved_new.mtrace")),
             (t("budget.mtrace"), t("names.mtrace")),      # leaks that changed
             (t("rank0.mtrace"), t("rank1.mtrace")),       # two ranks: own GPUs paired
             (d("ddp_rank0.mtrace"), d("ddp_rank1.mtrace")),
             (d("ddp_stray_rank0.mtrace"), d("ddp_stray_rank1.mtrace")),  # rank 1 on GPU 0 too
             (d("cifar_default.mtrace"), d("cifar_tensors.mtrace")),  # modes differ
             (d("cifar_tensors.mtrace"), d("cifar_tensors_b512.mtrace")),
             (d("cifar_tensors_b512.mtrace"), d("cifar_tensors.mtrace"))]
    # by ordinal on ranks: a GPU in one run only
    out.append(("diff", run(memtrace, "diff", "--json", "--devices", "ordinal", t("rank0.mtrace"),
                            t("rank1.mtrace"))))
    for base, new in pairs:
        out.append(("diff", run(memtrace, "diff", "--json", base, new, cwd=tmp)))
        out.append(("diff", run(memtrace, "diff", "--json", "--fail-on-increase", "5", base, new,
                                ok=(0, 1))))
    return out


def main():
    if sys.argv[1] == "--write-frozen":
        schema, fields = parse_docs(sys.argv[2])
        print("# the fields of JSON schema %d as released (docs/json.md); never edit: a field that "
              "goes needs a new schema number" % schema)
        for doc in sorted(fields):
            for p in sorted(fields[doc]):
                print("%s %s%s" % (doc, p, "?" if fields[doc][p] else ""))
        return 0
    memtrace, make_traces, data, docs, frozen_dir = map(os.path.abspath, sys.argv[1:6])
    schema, fields = parse_docs(docs)
    errors = []
    # 1. the released schema of this number: nothing gone, nothing made optional
    frozen = os.path.join(frozen_dir, "schema-%d.txt" % schema)
    if not os.path.exists(frozen):
        errors.append("%s is missing: every schema number has its released field list "
                      "(check_json_schema.py --write-frozen docs/json.md > %s)" % (frozen, frozen))
    else:
        for line in open(frozen):
            if not line.strip() or line.startswith("#"):
                continue
            doc, p = line.split()
            opt = p.endswith("?")
            p = p.rstrip("?")
            if p not in fields.get(doc, {}):
                errors.append("%s: %s of schema %d is no longer listed in docs/json.md: removing "
                              "a field needs a new schema number" % (doc, p, schema))
            elif not opt and fields[doc][p]:
                errors.append("%s: %s was always present in schema %d and is now optional: that "
                              "needs a new schema number" % (doc, p, schema))
    maps = {p[:-2] for doc in fields.values() for p in doc if p.endswith(".*")}
    seen = Seen(maps)
    with tempfile.TemporaryDirectory() as tmp:
        outputs = corpus(memtrace, make_traces, data, tmp)
    for doc, v in outputs:
        if v.get("schema") != schema:
            errors.append("%s: \"schema\": %r, docs/json.md says %d" % (doc, v.get("schema"), schema))
        if doc == "report-wrapper":
            seen.walk("report-wrapper", {k: (None if k == "traces" else x) for k, x in v.items()}, "")
            seen.paths.setdefault("report-wrapper", set()).add("traces")
            for t in v["traces"]:
                if "schema" in t:
                    errors.append("report: a trace inside {\"traces\"} has its own \"schema\"")
                seen.walk("report", dict(t, schema=schema), "")
        else:
            seen.walk(doc, v, "")
    for doc in sorted(fields):
        listed, written = fields[doc], seen.paths.get(doc, set())
        for p in sorted(written - set(listed)):
            errors.append("%s: writes %s, which docs/json.md does not list" % (doc, p))
        for p in sorted(set(listed) - written):
            errors.append("%s: docs/json.md lists %s, which no output of the corpus has" % (doc, p))
        for p, optional in sorted(listed.items()):
            if optional or p.endswith(".*"):
                continue
            parent = parent_of(p) or ""
            key = p[len(parent) + 1:] if parent else p
            for keys in seen.instances.get(doc, {}).get(parent, []):
                if key not in keys:
                    errors.append("%s: %s is listed as always present but an object at %s lacks "
                                  "it (mark it optional, or write it)" % (doc, p, parent or "the top"))
                    break
    for e in errors:
        print("FAIL:", e)
    n = sum(len(f) for f in fields.values())
    print("%d fields in %d outputs checked against schema %d: %s" %
          (n, len(outputs), schema, "%d problems" % len(errors) if errors else "ok"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
