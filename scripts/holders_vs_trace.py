"""The report of samples/holders.py against what CuPy or JAX itself says (scripts/gpu-check.sh).

    holders_vs_trace.py REPORT_JSON STATS_JSON

Prints "ok", or what differs on one line:
  cupy: CuPy's pool is a holder at exit ("allocator cache") with exactly
        cupy.get_default_memory_pool().total_bytes(), and nothing is called a leak;
  jax:  at the peak the allocator's reservation is XLA's BFC allocator's, exactly
        jax.devices()[0].memory_stats()["pool_bytes"], and nothing is called a leak.
"""
import json
import sys


def main():
    rep, stats = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    d = [x for x in rep["devices"] if x["device"] == 0][0]
    problems = []
    if d["leak_bytes"]:
        problems.append("%d B called a leak" % d["leak_bytes"])
    if stats["library"] == "cupy":
        held = [h for h in d["end_holders"] if h["holder"] == "CuPy memory pool"]
        if not held or held[0]["kind"] != "allocator cache":
            problems.append("CuPy's pool not a holder at exit: %s" % d["end_holders"])
        elif held[0]["bytes"] != stats["pool_total_bytes"]:
            problems.append("CuPy's pool holds %d B, CuPy says %d B"
                            % (held[0]["bytes"], stats["pool_total_bytes"]))
    else:
        b = d["breakdown"]["at_peak"]
        if b.get("other_cache_owner") != "XLA BFC allocator":
            problems.append("the reservation's owner is %s" % b.get("other_cache_owner"))
        if b["caching_allocator_bytes"] != stats["pool_bytes"]:
            problems.append("XLA reservation %d B, JAX says pool_bytes %d B"
                            % (b["caching_allocator_bytes"], stats["pool_bytes"]))
    print("ok" if not problems else "; ".join(problems))


if __name__ == "__main__":
    main()
