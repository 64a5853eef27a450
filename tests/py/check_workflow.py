#!/usr/bin/env python3
"""Checks samples/ci/github-actions.yml, which CI cannot run (it needs a GPU runner), as far as a
machine without GitHub can:

  * it parses as YAML (the npm `yaml` package, strict, duplicate keys fatal:
    tests/js/workflow_parse.mjs);
  * its shape: push to main and pull requests, read permission on actions, one job on a
    self-hosted runner labelled gpu (and the file says it needs a GPU), every step either `uses`
    or `run`, the actions pinned to a major version and given only inputs that version has (from
    their action.yml), the artifact downloaded under the name it is uploaded with;
  * every `${{ steps.X... }}` names an earlier step's id, every `env.X` and `$X` a variable the
    workflow sets or GitHub sets;
  * every `run:` script is valid bash (`bash -n`, expressions replaced by a word);
  * every `memtrace` command in it exists and takes each option it is given (its --help), the
    budgets are sizes `memtrace check` reads, and the steps the workflow promises are there:
    record --tensors, the Chrome and folded exports with flamegraph.pl, report --markdown into
    $GITHUB_STEP_SUMMARY, check, diff --fail-on-increase, upload and download of the artifact.

usage: check_workflow.py MEMTRACE MAKE_CI_TRACES WORKFLOW.yml
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PARSE = os.path.join(HERE, "..", "js", "workflow_parse.mjs")
# Inputs of the actions at the pinned major version (their action.yml at tag v4).
ACTIONS = {
    "actions/checkout@v4": None,  # used without inputs
    "actions/upload-artifact@v4": {"name", "path", "if-no-files-found", "retention-days",
                                   "compression-level", "overwrite", "include-hidden-files"},
    "actions/download-artifact@v4": {"name", "artifact-ids", "path", "pattern", "merge-multiple",
                                     "github-token", "repository", "run-id"},
}
GITHUB_VARS = re.compile(r"^(GITHUB_\w+|RUNNER_\w+|CI|HOME|PATH)$")


def main():
    memtrace, make_traces, wf = map(os.path.abspath, sys.argv[1:4])
    text = open(wf).read()
    out = subprocess.run(["node", PARSE, wf], check=True, capture_output=True, text=True).stdout
    parsed = json.loads(out)
    problems = []
    if "errors" in parsed:
        print("FAIL: YAML:", parsed["errors"])
        return 1
    doc = parsed["doc"]
    on = doc.get("on", {})
    if "main" not in (on.get("push") or {}).get("branches", []) or "pull_request" not in on:
        problems.append("must run on pushes to main and on pull requests: %r" % on)
    if (doc.get("permissions") or {}).get("actions") != "read":
        problems.append("needs permissions: actions: read (the base branch's artifact)")
    jobs = doc.get("jobs", {})
    if len(jobs) != 1:
        problems.append("one job expected")
    job = next(iter(jobs.values()))
    labels = job.get("runs-on")
    labels = labels if isinstance(labels, list) else [labels]
    if "self-hosted" not in labels or "gpu" not in labels:
        problems.append("runs-on must name a self-hosted GPU runner: %r" % labels)
    header = text.split("\nname:")[0]
    if "GPU" not in header or "self-hosted" not in header:
        problems.append("the leading comment must say the workflow needs a GPU runner")
    env = set(doc.get("env", {})) | set(job.get("env", {}))
    ids, scripts, uploaded, downloaded = set(), [], None, None
    for i, st in enumerate(job.get("steps", [])):
        where = "step %d (%s)" % (i + 1, st.get("name", st.get("uses")))
        if ("uses" in st) == ("run" in st):
            problems.append("%s: exactly one of uses/run" % where)
        step_env = env | set(st.get("env", {}))
        exprs = re.findall(r"\$\{\{(.*?)\}\}", json.dumps(st))
        if isinstance(st.get("if"), str) and "${{" not in st["if"]:
            exprs.append(st["if"])
        for e in exprs:
            for ref in re.findall(r"steps\.([\w-]+)\.", e):
                if ref not in ids:
                    problems.append("%s: steps.%s is not an earlier step's id" % (where, ref))
            for ref in re.findall(r"\benv\.(\w+)", e):
                if ref not in step_env:
                    problems.append("%s: env.%s is not set" % (where, ref))
        if "uses" in st:
            if st["uses"] not in ACTIONS:
                problems.append("%s: %s is not one of the pinned actions %s" %
                                (where, st["uses"], sorted(ACTIONS)))
            else:
                allowed = ACTIONS[st["uses"]] or set()
                for k in st.get("with", {}):
                    if k not in allowed:
                        problems.append("%s: %s has no input %r" % (where, st["uses"], k))
            if "upload-artifact" in st["uses"]:
                uploaded = st.get("with", {})
            if "download-artifact" in st["uses"]:
                downloaded = st.get("with", {})
        else:
            script = re.sub(r"\$\{\{.*?\}\}", "x", st["run"])
            scripts.append((where, script))
            r = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
            if r.returncode:
                problems.append("%s: bash -n: %s" % (where, r.stderr.strip()))
            assigned = set(re.findall(r"\b([A-Za-z_]\w*)=", script)) | \
                set(re.findall(r"mapfile -t (\w+)", script)) | set(re.findall(r"for (\w+) in", script))
            for v in set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", script)):
                if v not in step_env and v not in assigned and not GITHUB_VARS.match(v):
                    problems.append("%s: $%s is never set" % (where, v))
        if "id" in st:
            ids.add(st["id"])
    if not uploaded or not downloaded or uploaded.get("name") != downloaded.get("name"):
        problems.append("the artifact must be downloaded under the name it was uploaded with")
    elif "run-id" not in downloaded or "github-token" not in downloaded:
        problems.append("the base branch's artifact comes from another run: run-id and github-token")
    if uploaded and not str(uploaded.get("path", "")).startswith("memtrace-out"):
        problems.append("the artifact must hold memtrace-out/ (traces and exports)")
    # memtrace commands and their options
    all_text = "\n".join(s for _, s in scripts)
    joined = re.sub(r"\\\n\s*", " ", all_text)
    helps = {}
    for where, script in scripts:
        for line in re.sub(r"\\\n\s*", " ", script).splitlines():
            for m in re.finditer(r"\bmemtrace (\w+)([^|;>&]*)", line):
                sub, rest = m.group(1), m.group(2)
                if sub not in helps:
                    r = subprocess.run([memtrace, sub, "--help"], capture_output=True, text=True)
                    helps[sub] = r.stdout if r.returncode == 0 else None
                if helps[sub] is None:
                    problems.append("%s: memtrace %s is not a command" % (where, sub))
                    continue
                for opt in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", rest.split(" -- ")[0]):
                    if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(opt), helps[sub]):
                        problems.append("%s: memtrace %s has no option %s" % (where, sub, opt))
    promised = {
        "record --tensors": r"memtrace record --tensors",
        "the Chrome export": r"memtrace export --format chrome",
        "the flame graph": r"memtrace export --format folded[^\n]*\|\s*perl [^\n]*flamegraph\.pl",
        "the Markdown summary in the job summary": r"memtrace-out/summary\.md >> \"\$GITHUB_STEP_SUMMARY\"",
        "report --markdown": r"memtrace report --markdown",
        "the budget check": r"memtrace check --max-peak",
        "the diff gate": r"memtrace diff --fail-on-increase",
    }
    for what, pattern in promised.items():
        if not re.search(pattern, joined):
            problems.append("no %s (%s)" % (what, pattern))
    # the budgets are sizes memtrace reads
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([make_traces, tmp], check=True)
        for var, opt in (("MAX_PEAK", "--max-peak"), ("MAX_ALLOCATED_PEAK", "--max-allocated-peak")):
            size = str(doc.get("env", {}).get(var, ""))
            r = subprocess.run([memtrace, "check", opt, size, os.path.join(tmp, "tensors.mtrace")],
                               capture_output=True, text=True)
            if r.returncode not in (0, 1):
                problems.append("%s=%s: %s" % (var, size, r.stderr.strip()))
        r = subprocess.run([memtrace, "diff", "--fail-on-increase", str(doc.get("env", {}).get(
            "FAIL_ON_INCREASE", "")), os.path.join(tmp, "rank0.mtrace"),
            os.path.join(tmp, "rank0.mtrace")], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append("FAIL_ON_INCREASE: %s" % r.stderr.strip())
    for p in problems:
        print("FAIL:", p)
    print("%d steps, %d scripts, %d memtrace commands checked: %s" %
          (len(job.get("steps", [])), len(scripts), len(helps), "ok" if not problems else
           "%d problems" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
