"""python_frames_check.py — the Python frames of a recording of samples/cuda_ctypes.py, exactly.

    memtrace export --format folded --frames python TRACE > peak.folded
    python3 scripts/python_frames_check.py peak.folded samples/cuda_ctypes.py

The sample marks its lines ("# at: NAME"); each stack live at its peak must be in the folded
export with every frame's function and line and the exact bytes, and no other stack may name the
sample. Prints one PASS or FAIL line per stack; exit status 1 on any FAIL. (gpu-check.sh, section
"pythons", runs it for each interpreter.)
"""
import re
import sys

folded, sample = sys.argv[1], sys.argv[2]
marks = {}
with open(sample) as f:
    for number, text in enumerate(f, 1):
        m = re.search(r"# at: (\S+)", text)
        if m:
            marks[m.group(1)] = number

MIB = 1 << 20
# (outer, frames, bytes): frames outermost first, each (function, mark); outer names the file of
# the frames above them on another thread (threading.py's, whose lines differ between versions)
EXPECTED = {
    "layers": (None, [("<module>", "module"), ("main", "main-build"), ("build", "build"),
                      ("Layer.__init__", "init"), ("alloc", "alloc")], 10 * MIB),
    "buffers": (None, [("<module>", "module"), ("main", "main-buffers"), ("buffers", "buffers"),
                       ("alloc", "alloc")], 3 * MIB),
    "scratch": (None, [("<module>", "module"), ("main", "main-scratch"), ("scratch", "scratch"),
                       ("alloc", "alloc")], 32 * MIB),
    "thread": ("threading.py", [("worker", "worker"), ("alloc", "alloc")], 5 * MIB),
}
NAME = sample.rsplit("/", 1)[-1]

stacks = []
with open(folded) as f:
    for row in f:
        row = row.rstrip("\n")
        if not row:
            continue
        path, _, size = row.rpartition(" ")
        stacks.append((path.split(";")[1:], int(size)))  # [0] is the device


def frame_is(fr, fn, mark):
    return fr.startswith(fn + " (") and fr.endswith("%s:%d)" % (NAME, marks[mark]))


def matches(frames, outer, want):
    k = len(frames) - len(want)  # the frames above the sample's: one or more from outer, or none
    if k < 0 or (k == 0) != (outer is None):
        return False
    return (all(re.search(r"\b%s:\d+\)$" % re.escape(outer), fr) for fr in frames[:k]) and
            all(frame_is(fr, fn, m) for fr, (fn, m) in zip(frames[k:], want)))


failures = 0
used = set()
for label, (outer, want, size) in EXPECTED.items():
    found = [i for i, (frames, _) in enumerate(stacks) if matches(frames, outer, want)]
    got = sum(stacks[i][1] for i in found)
    used.update(found)
    if got == size:
        print("PASS %s: %d bytes from %s" % (label, got, ";".join(stacks[found[0]][0])))
    else:
        failures += 1
        print("FAIL %s: expected %d bytes from %s, got %d" %
              (label, size, " -> ".join(([outer] if outer else []) +
                                        ["%s:%d" % (fn, marks[m]) for fn, m in want]), got))
for i, (frames, size) in enumerate(stacks):
    if i not in used and any(NAME in fr for fr in frames):
        failures += 1
        print("FAIL unexpected stack: %s %d" % (";".join(frames), size))
sys.exit(1 if failures else 0)
