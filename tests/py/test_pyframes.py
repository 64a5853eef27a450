"""Checks src/record/pyframes.c against the interpreter's own view of the stack.

Usage: python3 test_pyframes.py PATH/TO/libpyframes_probe.so

The probe library is called through ctypes, which RELEASES the GIL around the call (as PyTorch does
around a CUDA op): inside, the probe reads this thread's frames with mt_pyframes_read/describe, and
the result must equal traceback.extract_stack() and the sys._getframe() chain taken at the same
call site: files, names, line numbers, code object identities and first lines.
"""
import ctypes
import os
import sys
import threading
import traceback
import types

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyframes_helper  # noqa: E402  (the second module file)

LIB = ctypes.CDLL(sys.argv[1])
LIB.probe_init.argtypes = [ctypes.c_char_p, ctypes.c_int]
LIB.probe_stack.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
LIB.probe_describe_innermost.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                         ctypes.c_int]
LIB.probe_bench_ns.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                               ctypes.POINTER(ctypes.c_double)]
LIB.probe_bench_ns.restype = ctypes.c_double
LIB.probe_signature.argtypes = [ctypes.POINTER(ctypes.c_ulonglong)]
LIB.probe_signature.restype = ctypes.c_ulonglong
LIB.probe_line.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_long, ctypes.c_int,
                           ctypes.c_int]

HAS_QUALNAME = sys.version_info >= (3, 11)
FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print("FAIL:", msg)


def parse(raw):
    frames = []
    for row in raw.decode("utf-8").splitlines():
        code, filename, qualname, line, first, entry = row.split("\t")
        frames.append((int(code, 16), filename, qualname, int(line), int(first), int(entry)))
    return frames


def probe(max_frames=256):
    """Probe and ground truth taken on ONE line, so the innermost frame's line is the same."""
    buf = ctypes.create_string_buffer(1 << 20)
    n, truth, me = LIB.probe_stack(buf, len(buf), max_frames), traceback.extract_stack(), sys._getframe()
    if n < 0:
        fail("probe_stack returned %d" % n)
        return [], [], []
    got = parse(buf.value)
    if len(got) != n:
        fail("probe_stack said %d frames, wrote %d" % (n, len(got)))
    chain = []
    f = me
    while f is not None:
        chain.append(f)
        f = f.f_back
    return got, truth[::-1], chain  # all innermost first


def check(label):
    """Compares the probe with the truth at this call site; returns the depth seen."""
    got, truth, chain = probe()
    if len(got) != len(truth) or len(truth) != len(chain):
        fail("%s: %d frames read, extract_stack has %d, f_back chain %d\n  got %s\n  want %s" % (
            label, len(got), len(truth), len(chain), [g[2] for g in got], [t.name for t in truth]))
        return len(got)
    for i, (g, t, f) in enumerate(zip(got, truth, chain)):
        code, filename, qualname, line, first = g[:5]
        co = f.f_code
        want_qual = co.co_qualname if HAS_QUALNAME else co.co_name
        problems = []
        if filename != t.filename:
            problems.append("file %r != %r" % (filename, t.filename))
        if qualname.rsplit(".", 1)[-1] != t.name or qualname != want_qual:
            problems.append("name %r != %r / %r" % (qualname, t.name, want_qual))
        if line != t.lineno:
            problems.append("line %d != %s" % (line, t.lineno))
        if code != id(co):
            problems.append("code %#x != id %#x" % (code, id(co)))
        if first != co.co_firstlineno:
            problems.append("firstlineno %d != %d" % (first, co.co_firstlineno))
        if problems:
            fail("%s: frame %d (%s): %s" % (label, i, t.name, "; ".join(problems)))
    return len(got)


# ---- The call shapes -------------------------------------------------------------------------

class Outer:
    def method(self, label):
        inner = lambda: next(self.gen(label))  # noqa: E731  (a lambda frame on purpose)
        return inner()

    def gen(self, label):
        yield [pyframes_helper.descend(3, lambda: check(label)) for _ in range(1)][0]


def case_nested(label="nested"):
    return Outer().method(label)


def case_through_c(label="through-C"):
    # sorted() calls the key function from C: 3.12+ puts a C-stack shim frame in the chain.
    depth = []
    sorted([0], key=lambda _: depth.append(check(label)))
    return depth[0]


def case_multiline(label="multi-line"):
    return max(
        0,
        check(
            label
        ),
    )


def make_generated():
    """Code with calls far apart (line deltas beyond one table entry, lines > 2**16) and names
    of every str kind: latin-1 file name, UCS-2 and UCS-4 qualnames."""
    lines = ["def f\u00e9_1(label):", "    return check(label)"]
    lines += ["", "def f\u95a2_2(label):"] + ["    x = 1"] * 300 + ["    return f\u00e9_1(label)"]
    lines += ["", "def f\U00020000_3(label):", "    if label == 'never':"]
    lines += ["        x = 2"] * 70000 + ["    return f\u95a2_2(label)"]
    lines += ["", "class K\u00e9:", "    def m\u95a2(self, label):", "        return f\U00020000_3(label)"]
    ns = {"check": check}
    exec(compile("\n".join(lines) + "\n", "<generated-\u00e9>", "exec"), ns)
    return ns


GENERATED = make_generated()


def case_generated(label="generated"):
    return getattr(GENERATED["K\u00e9"](), "m\u95a2")(label)


def case_entries(label="entries"):
    """mt_pyframe.entry marks the oldest frame of each C-level run of the eval loop: what lets the
    recorder put each run in place of its _PyEval_EvalFrameDefault frame."""
    rows = []

    def leaf():
        rows.extend(probe()[0])

    def mid():
        leaf()  # Python -> Python: same run

    sorted([0], key=lambda _: mid())  # C -> Python: a new run starts at the lambda
    names = [r[2].rsplit(".", 1)[-1] for r in rows]
    entries = [r[5] for r in rows]
    if names[:5] != ["probe", "leaf", "mid", "<lambda>", "case_entries"]:
        fail("%s: unexpected frames %s" % (label, names[:5]))
        return len(rows)
    if sys.version_info < (3, 11):
        want = [1] * len(rows)  # 3.10: every frame is its own C-level eval call
    else:
        want = [0, 0, 0, 1]  # probe, leaf, mid run inside the lambda's run; sorted() started it
    if entries[:len(want)] != want or entries[-1] != 1:
        fail("%s: entry flags %s (frames %s), want prefix %s and the oldest 1" % (
            label, entries, names, want))
    return len(rows)


CASES = [case_nested, case_through_c, case_multiline, case_generated, case_entries]


def run_cases(prefix):
    depths = []
    for case in CASES:
        for rep in range(2):  # the second time the line cache answers
            depths.append(case("%s%s#%d" % (prefix, case.__name__, rep)))
    return depths


# ---- Other checks ----------------------------------------------------------------------------

def test_thread():
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("d", run_cases("thread:")))
    t.start()
    t.join()
    if "d" not in result:
        fail("thread: cases did not run")


def test_truncation():
    buf = ctypes.create_string_buffer(1 << 16)
    n = LIB.probe_stack(buf, len(buf), 3)
    if n != 3:
        fail("max=3 returned %d frames" % n)
    elif parse(buf.value)[0][2] != "test_truncation":
        fail("max=3: innermost frame is %r" % parse(buf.value)[0][2])


def describe_small(fbuf, qbuf):
    return LIB.probe_describe_innermost(fbuf, len(fbuf), qbuf, len(qbuf))


def utf8_truncation_body():
    """Runs as a function named f\u00e9\u95a2\U00020000x (all three non-ASCII kinds)."""
    whole = sys._getframe().f_code
    for size in range(1, 16):
        fbuf, qbuf = ctypes.create_string_buffer(size), ctypes.create_string_buffer(size)
        rc = LIB.probe_describe_innermost(fbuf, size, qbuf, size)
        if rc != 0:
            fail("describe with %d-byte buffers returned %d" % (size, rc))
            continue
        for got, full in ((fbuf.value, whole.co_filename),
                          (qbuf.value, whole.co_qualname if HAS_QUALNAME else whole.co_name)):
            text = got.decode("utf-8")  # raises if a character was cut in half
            whole_bytes = full.encode("utf-8")
            # The longest prefix of whole characters that fits in size - 1 bytes.
            want = ""
            for ch in full:
                if len((want + ch).encode("utf-8")) > size - 1:
                    break
                want += ch
            if text != want:
                fail("truncation to %d bytes gave %r, want %r (of %r, %d bytes)" % (
                    size, text, want, full, len(whole_bytes)))


def test_utf8_truncation():
    """Small buffers: the copy stops on a character boundary and stays valid UTF-8."""
    name = "f\u00e9\u95a2\U00020000x"
    # Re-create the function around utf8_truncation_body's code with the odd name and file, so
    # the innermost frame (the one described) has them.
    body = utf8_truncation_body.__code__.replace(co_name=name, co_filename="<gen-\u00e9\u95a2>",
                                                 **({"co_qualname": name} if HAS_QUALNAME else {}))
    type(utf8_truncation_body)(body, globals())()


def test_pthread():
    n = LIB.probe_stack_in_pthread()
    if n != 0:
        fail("a thread unknown to Python saw %d frames" % n)


def test_misuse():
    bad = LIB.probe_misuse()
    if bad:
        fail("misuse checks failed, bits %#x" % bad)


def all_code(obj, seen):
    stack = [obj]
    while stack:
        co = stack.pop()
        if id(co) in seen:
            continue
        seen.add(id(co))
        yield co
        stack.extend(c for c in co.co_consts if hasattr(c, "co_lines"))


def test_line_tables():
    """The decoders against code.co_lines() for every instruction of many code objects."""
    import argparse, json.decoder, threading as th  # noqa: E401  (just big, varied code)
    fmt = 0 if sys.version_info < (3, 11) else 1
    roots = [case_nested.__code__, Outer.gen.__code__, make_generated.__code__]
    roots += [GENERATED[k].__code__ for k in GENERATED if callable(GENERATED[k]) and
              hasattr(GENERATED[k], "__code__")]
    roots += [getattr(GENERATED["K\u00e9"], "m\u95a2").__code__]
    for mod in (argparse, json.decoder, th, traceback, sys.modules[__name__]):
        roots += [v.__code__ for v in vars(mod).values() if hasattr(v, "__code__")]
        roots += [m.__code__ for c in vars(mod).values() if isinstance(c, type)
                  for m in vars(c).values() if hasattr(m, "__code__")]
    # an object can answer any attribute (3.15's traceback._ShutdownTheme has a "__code__")
    roots = [r for r in roots if isinstance(r, types.CodeType)]
    checked, seen = 0, set()
    for root in roots:
        for co in all_code(root, seen):
            tab = co.co_linetable
            # Each lookup scans the table from its start: in the 70000-line function check one
            # range in 997 (and the last), or this test is quadratic.
            ranges = list(co.co_lines())
            if len(ranges) > 5000:
                ranges = ranges[::997] + ranges[-1:]
            for start, end, line in ranges:
                for off in range(start, end, 2):
                    got = LIB.probe_line(fmt, tab, len(tab), co.co_firstlineno, off // 2)
                    want = -1 if line is None else line
                    checked += 1
                    if got != want:
                        fail("%s offset %d: line %d, co_lines says %d" % (co.co_qualname if
                             HAS_QUALNAME else co.co_name, off, got, want))
                        return
    if checked < 10000:
        fail("only %d instructions checked" % checked)
    print("line tables: %d instructions in %d code objects agree with co_lines()" %
          (checked, len(seen)))


def sig_leaf():
    key = ctypes.c_ulonglong()
    sig = LIB.probe_signature(ctypes.byref(key))  # one call site: one key, whoever calls
    return sig, key.value


def sig_other_line():
    key = ctypes.c_ulonglong()
    sig = LIB.probe_signature(ctypes.byref(key))  # another call site: another key
    return sig, key.value


def sig_caller_a():
    return sig_leaf()


def sig_caller_b():
    return sig_leaf()


def test_signature():
    """The signature the recorder keys its stack memo by: equal for an equal stack, different
    when any frame's position differs; the key names the innermost frame alone."""
    runs = [sig_caller_a() for _ in range(3)]  # one line, the same stack each time
    if len(set(runs)) != 1 or not runs[0][0] or not runs[0][1]:
        fail("signature: the same stack gave %s" % runs)
    (sa, ka), (sb, kb), (so, ko) = runs[0], sig_caller_b(), sig_other_line()
    if ka != kb:
        fail("signature: the same innermost line gave two keys (%#x, %#x)" % (ka, kb))
    if sa == sb:
        fail("signature: another caller of the same line gave the same signature")
    if ko == ka or so == sa:
        fail("signature: another innermost line gave the same key or signature "
             "(keys %#x %#x, signatures %#x %#x)" % (ko, ka, so, sa))
    t = []
    th = threading.Thread(target=lambda: t.append(sig_caller_a()))
    th.start()
    th.join()
    if t[0][1] != ka or t[0][0] == sa:
        fail("signature: another thread's stack (same innermost line, other outer frames) "
             "gave key %#x / signature %#x against %#x / %#x" % (t[0][1], t[0][0], ka, sa))


def bench():
    depth, cold = ctypes.c_int(), ctypes.c_double()
    ns = pyframes_helper.descend(16, lambda: LIB.probe_bench_ns(200000, ctypes.byref(depth),
                                                                ctypes.byref(cold)))
    print("bench: %d-deep Python stack: %.0f ns per mt_pyframes_read warm, %.0f ns cold" %
          (depth.value, ns, cold.value))


def main():
    why = ctypes.create_string_buffer(256)
    refused = LIB.probe_init(why, len(why)) != 0
    if sys.version_info < (3, 10):  # frames laid out otherwise: must be refused, never misread
        want = "Python %d.%d layout unknown" % sys.version_info[:2]
        if refused and why.value.decode().startswith(want):
            print("Python %s: refused, as it must be (%s)" % (sys.version.split()[0],
                                                             why.value.decode()))
            return 0
        print("FAIL: Python %s: %s" % (sys.version.split()[0], why.value.decode() if refused
                                       else "read, though its layout is not known"))
        return 1
    if refused:
        print("FAIL: mt_pyframes_new refused Python %s: %s" % (sys.version.split()[0],
                                                                 why.value.decode()))
        return 1
    depths = run_cases("main:")
    if min(depths) < 5:
        fail("stacks too shallow to mean anything: %s" % depths)
    test_thread()
    test_truncation()
    test_utf8_truncation()
    test_pthread()
    test_misuse()
    test_line_tables()
    test_signature()
    bench()
    print("Python %s: %s (stack depths %s)" % (sys.version.split()[0],
          "FAILED %d" % len(FAILURES) if FAILURES else "all checks passed", depths))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
