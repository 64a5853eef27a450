"""The in-process A/B's schedule and figure (samples/cifar.py: ab_plan, ab_fields), on synthetic
phase times: no GPU and no torch needed (a stand-in module is put in its place).

alternate (off, on, off, on, ...) cancels a steady drift but counts anything that falls on every
other phase as the recorder's cost; random (each pair in a random order, the medians of the two
orders averaged) cancels both. Exit status 0 when every case gives what it must.
"""
import os
import sys
import types

sys.dont_write_bytecode = True
for name in ("torch", "torch.nn", "torch.nn.functional"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["torch"].nn = sys.modules["torch.nn"]
sys.modules["torch.nn"].Module = object
sys.modules["torch.nn"].functional = sys.modules["torch.nn.functional"]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "samples"))
import cifar  # noqa: E402

FAILURES = []


def figure(order, seed, cost, drift, every_other, phases=60):
    """ab_overhead_pct for phases whose step time is 10 ms x (1 + cost when on) x (1 + drift per
    phase) x (1 + every_other on odd phases)."""
    plan = cifar.ab_plan(order, seed)
    times = [(plan(k), 10.0 * ((1 + cost) if plan(k) else 1.0) * (1 + drift * k) *
              ((1 + every_other) if k % 2 else 1.0)) for k in range(phases)]
    return cifar.ab_fields(times, order)


def expect(what, got, want, tol):
    if abs(got - want) > tol:
        FAILURES.append("%s: %.3f%%, expected %.3f%% +- %.3f" % (what, got, want, tol))
        print("FAIL", FAILURES[-1])


for seed in range(20):
    plan = cifar.ab_plan("random", seed)
    seq = [plan(k) for k in range(40)]
    if any(seq[2 * j] == seq[2 * j + 1] for j in range(20)):
        FAILURES.append("random: a pair without one on- and one off-phase (seed %d)" % seed)
    if all(seq[2 * j] for j in range(20)) or not any(seq[2 * j] for j in range(20)):
        FAILURES.append("random: every pair in the same order (seed %d)" % seed)
    f = figure("random", seed, 0.05, 0.001, 0.03)
    expect("random, 5%% cost, drift, 3%% on every other phase (seed %d)" % seed,
           f["ab_overhead_pct"], 5.0, 0.1)
    expect("random, no cost, drift (seed %d)" % seed,
           figure("random", seed, 0.0, 0.003, 0.0)["ab_overhead_pct"], 0.0, 0.05)
    if f["ab_pairs"] != 30 or f["ab_order"] != "random":
        FAILURES.append("random: %s" % f)
alt = figure("alternate", None, 0.05, 0.001, 0.03)
expect("alternate counts what falls on every other phase", alt["ab_overhead_pct"], 8.15, 0.05)
expect("alternate, no cost, drift", figure("alternate", None, 0.0, 0.003, 0.0)["ab_overhead_pct"],
       0.0, 0.01)
if alt["ab_pairs"] != 30:
    FAILURES.append("alternate: %d pairs, expected 30" % alt["ab_pairs"])
if cifar.ab_fields([(False, 10.0)], "random") != {}:
    FAILURES.append("one phase alone must give no figure")
print("A/B order: %s" % ("FAILED %d" % len(FAILURES) if FAILURES else "all checks passed"))
sys.exit(1 if FAILURES else 0)
