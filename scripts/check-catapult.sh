#!/usr/bin/env bash
# check-catapult.sh — memtrace's Chrome trace JSON in the REAL catapult trace viewer (the viewer of
# chrome://tracing), not only against the rules tests/py/check_chrome.py took from its sources.
#
#   scripts/check-catapult.sh CATAPULT_DIR [CASE...]
#
# A local check, like scripts/gpu-check.sh: it cannot run in CI, which has no catapult checkout
# (github.com/catapult-project/catapult; its tracing/, third_party/ and common/ are what is used,
# no network is needed). It also needs python3, node and Chromium (CHROMIUM, default
# /usr/bin/chromium). For each CASE it
#   1. exports the trace(s): memtrace export --format chrome (the build in $BUILD, default build),
#      to .json and to .json.gz
#   2. turns the JSON into one self-contained viewer page with catapult's tracing/bin/trace2html
#   3. loads the page in headless Chromium (scripts/catapult_view.mjs, over the DevTools protocol),
#      waits for the viewer's import, reads what its model holds, selects the largest allocation
#      as a click would (the analysis panel shows its args), takes a screenshot, and imports the
#      .json.gz in the page through the viewer's own importers, as its Load button reads a file
#   4. FAILS the case if the viewer reported anything: its "Import error" overlay, any import
#      warning in the model, a slice it marked with an error, an exception or a console error of
#      the page, a panel that does not show the selected allocation, a .json.gz that fails or
#      builds another model; if it built no process, thread, track or slice; or if it built fewer
#      or more processes, slices, counters, counter points or instants than the JSON holds (an
#      event the viewer dropped or split)
# and prints per case what the viewer built. Two console warnings of the viewer page itself are
# not failures, because they are the same for any trace, an empty one included: catapult runs on
# a web-components v0 polyfill in today's Chromium ("Trace Viewer is running with WebComponentsV0
# polyfill ... crbug.com/1036492") and its CSS uses the deprecated 'slider-vertical' appearance.
# They are printed once, as "viewer notes".
#
# A CASE is the arguments of one export, in one word: "gpt2_default", "--driver-slices gpt2_default",
# "ddp_rank0 ddp_rank1" (several traces in one export: a process per rank). A bare name stands for
# tests/data/NAME.mtrace. A CASE FILE.json is a Chrome trace file checked as it is (to see this
# check fail on a file the viewer refuses). Without CASEs: every fixture of tests/data, the DDP
# pair in one export and two --driver-slices exports.
#
# Writes under $OUT (default ./catapult-check-out), per case LABEL: LABEL.json and LABEL.json.gz,
# LABEL.html (trace2html's page), LABEL.viewer.json (what the viewer built: every track heading,
# every error), LABEL.png (1600x1100 screenshot, the selected allocation's args in the panel).
# Exit status: 0 when every case passed, 1 otherwise, 2 on a usage error.
set -uo pipefail
if [ $# -lt 1 ] || [ ! -f "$1/tracing/bin/trace2html" ]; then
    echo "usage: $0 CATAPULT_DIR [CASE...]   (CATAPULT_DIR/tracing/bin/trace2html must exist)" >&2
    exit 2
fi
CATAPULT=$(cd "$1" && pwd)
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
MT=$ROOT/$BUILD/src/cli/memtrace
OUT=${OUT:-$PWD/catapult-check-out}
PY=${PYTHON:-python3}
NODE=${NODE:-node}
[ -x "$MT" ] || { echo "no $MT: build first (cmake -S . -B $BUILD && cmake --build $BUILD)" >&2; exit 2; }
mkdir -p "$OUT"
if [ $# -eq 0 ]; then
    for t in "$ROOT"/tests/data/*.mtrace; do
        case $(basename "$t") in ddp_rank*) continue ;; esac
        set -- "$@" "$(basename "$t" .mtrace)"
    done
    set -- "$@" "ddp_rank0 ddp_rank1" "--driver-slices gpt2_default" "--driver-slices resnet18_tensors"
fi

FAILS=0
for c in "$@"; do
    args=()
    label=""
    for w in $c; do
        case $w in
            -*) label+="${w#--}." ; args+=("$w") ;;
            *.json) label+="$(basename "$w" .json)+" ; args+=("$w") ;;
            */* | *.mtrace) label+="$(basename "$w" .mtrace)+" ; args+=("$w") ;;
            *) label+="$w+" ; args+=("$ROOT/tests/data/$w.mtrace") ;;
        esac
    done
    label=${label%+}
    json=$OUT/$label.json html=$OUT/$label.html view=$OUT/$label.viewer.json png=$OUT/$label.png
    gz=$OUT/$label.json.gz gzopt=(--gz "$gz")
    case $c in *.json) json=$c gzopt=() ;; *) rm -f "$json" ;; esac
    rm -f "$html" "$view" "$png" "$gz"
    if [ "$json" = "$c" ]; then
        : # a Chrome trace file, checked as it is
    elif ! "$MT" export --format chrome --force -o "$json" "${args[@]}" 2> "$OUT/$label.export.err" ||
         ! "$MT" export --format chrome --force -o "$gz" "${args[@]}" 2>> "$OUT/$label.export.err"; then
        echo "FAIL $label: memtrace export failed: $(tail -n 3 "$OUT/$label.export.err")"
        FAILS=$((FAILS + 1)); continue
    fi
    if ! "$PY" "$CATAPULT/tracing/bin/trace2html" --quiet --title "memtrace: $label" \
            --output "$html" "$json" > "$OUT/$label.trace2html.err" 2>&1; then
        echo "FAIL $label: trace2html failed: $(tail -n 3 "$OUT/$label.trace2html.err")"
        FAILS=$((FAILS + 1)); continue
    fi
    if ! "$NODE" "$ROOT/scripts/catapult_view.mjs" "$html" "$png" --height 1100 --panel 440 \
            "${gzopt[@]}" > "$view" 2> "$OUT/$label.viewer.err"; then
        echo "FAIL $label: the page did not load: $(tail -n 3 "$OUT/$label.viewer.err")"
        FAILS=$((FAILS + 1)); continue
    fi
    # what the JSON holds against what the viewer built; prints the case's lines, exits 1 on failure
    "$PY" - "$label" "$json" "$view" "$OUT/notes.txt" <<'EOF'
import collections, json, re, sys
label, json_path, view_path, notes_path = sys.argv[1:]
NOISE = [re.compile(r"^console\.warning: Trace Viewer is running with WebComponentsV0 polyfill"),
         re.compile(r"^log warning \(deprecation\): The keyword 'slider-vertical'")]
v = json.load(open(view_path))
problems = []
try:
    ev = json.load(open(json_path))["traceEvents"]
except (ValueError, KeyError, TypeError) as e:
    problems.append("%s is no trace JSON (%s)" % (json_path, e))
    ev = []
want = collections.Counter()
pids, counters, points = set(), collections.Counter(), 0
for e in ev:
    ph = e["ph"]
    if ph != "M":
        pids.add(e["pid"])
    if ph == "b":
        want["slices"] += 1
        want["allocations"] += "size" in e.get("args", {})
    elif ph == "C":
        counters[(e["pid"], e["name"])] += 1
    elif ph == "i":
        want["instants"] += 1
t = v["totals"] or {}
errors = [x for x in v["errors"] if not any(r.search(x) for r in NOISE)]
with open(notes_path, "a") as f:
    for x in v["errors"]:
        if x not in errors:
            f.write(x + "\n")
problems += errors
for k in ("processes", "threads", "tracks", "slices"):
    if t and not t.get(k):
        problems.append("the viewer built no " + k)
expect = {"processes": len(pids), "slices": want["slices"], "counters": len(counters),
          "points": sum(counters.values()), "instants": want["instants"]}
for k, n in expect.items():
    if t and t.get(k) != n:
        problems.append("%s: the JSON has %d, the viewer built %s" % (k, n, t.get(k)))
# the .json.gz through the viewer's own gzip importer (its Load button): the same model
gzt = (v.get("gz") or {}).get("totals")
if t and v.get("gz") is not None:
    for k in ("processes", "threads", "slices", "counters", "series", "points", "instants"):
        if not gzt or gzt.get(k) != t.get(k):
            problems.append(".json.gz: %s %s in the viewer's gzip import, %s from the JSON"
                            % (k, gzt and gzt.get(k), t.get(k)))
# each counter's points, by name: one the viewer merged or cut shows here
got = {(p["pid"], c["name"]): c["points"] for p in v["processes"] for c in p["counters"]}
for key, n in counters.items():
    if t and got.get(key) != n:
        problems.append("counter %r of pid %d: %d points in the JSON, %s in the viewer"
                        % (key[1], key[0], n, got.get(key)))
sel = v.get("selected")
if t and want["allocations"] and not sel:
    problems.append("no allocation could be selected")
def n(k, one, many=None):
    return "%d %s" % (t[k], one if t[k] == 1 else many or one + "s")
if t:
    print("%s %s: %s, %s, %s, %s (%s), %s (%s, %s), %s; imported in %.1f s%s"
          % ("FAIL" if problems else "ok  ", label, n("processes", "process", "processes"),
             n("threads", "thread"), n("tracks", "track"), n("slices", "slice"),
             n("async_top", "top-level", "top-level"), n("counters", "counter"), n("series", "series", "series"),
             n("points", "point"), n("instants", "instant"), v["import_ms"] / 1000,
             "; .json.gz the same" if gzt and not any(".json.gz" in x for x in problems) else ""))
    for p in v["processes"]:
        groups = ["%s [%s]" % (th["name"], ", ".join(th["groups"])) for th in p["threads"]]
        print("       %s: %s; %d counters" % (p["name"], "; ".join(groups), len(p["counters"])))
    if sel:
        print("       selected: %s, %s on %s; screenshot %s"
              % (sel["title"], sel["size"], sel["track"], v["screenshot"]))
else:
    print("FAIL %s: the viewer built no model" % label)
for x in problems[:20]:
    print("       - " + x)
if len(problems) > 20:
    print("       - ... %d more in %s" % (len(problems) - 20, view_path))
sys.exit(1 if problems or not t else 0)
EOF
    [ $? -eq 0 ] || FAILS=$((FAILS + 1))
done
if [ -s "$OUT/notes.txt" ]; then
    echo "viewer notes (the page's own, the same for every trace; not failures):"
    sed 's/ file:.*//' "$OUT/notes.txt" | sort -u | sed 's/^/  /'
    rm -f "$OUT/notes.txt"
fi
echo "$(( $# - FAILS )) of $# cases passed; files under $OUT"
[ "$FAILS" -eq 0 ]
