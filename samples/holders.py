"""Memory a library's own cache holds at exit, without PyTorch: CuPy's memory pool and XLA's
(JAX's) preallocated BFC allocator. Neither is a leak, and the report must say who holds it.

    python holders.py cupy|jax

cupy: arrays of 64, 32 and 16 MiB are made and two of them dropped; CuPy keeps their blocks in its
pool (cupy.get_default_memory_pool()) until exit. jax: XLA preallocates a fraction of the GPU
(XLA_PYTHON_CLIENT_MEM_FRACTION, set here to 0.05 unless given) and serves arrays from it. stdout is
the same in every run; what the library itself says it holds goes to $SAMPLE_STATS as JSON
(scripts/holders_vs_trace.py compares it with the report).
"""
import json
import os
import sys


def cupy_case():
    import cupy as cp
    keep = cp.ones(64 * 2**20 // 4, dtype=cp.float32)
    a = cp.ones(32 * 2**20 // 4, dtype=cp.float32)
    b = cp.ones(16 * 2**20 // 4, dtype=cp.float32)
    total = float(keep[:8].sum() + a[:8].sum() + b[:8].sum())
    del a, b
    cp.cuda.runtime.deviceSynchronize()
    pool = cp.get_default_memory_pool()
    print(f"cupy: sum={total:.0f}")
    return {"pool_total_bytes": pool.total_bytes(), "pool_used_bytes": pool.used_bytes(),
            "pinned_pool_free_blocks": cp.get_default_pinned_memory_pool().n_free_blocks()}


def jax_case():
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.05")
    import jax
    import jax.numpy as jnp
    x = jnp.ones((4096, 4096), dtype=jnp.float32)
    y = (x @ x).block_until_ready()
    print(f"jax: y[0,0]={float(y[0, 0]):.0f}")
    stats = jax.devices()[0].memory_stats() or {}
    return {k: v for k, v in stats.items() if isinstance(v, int)}


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "cupy"
    stats = cupy_case() if which == "cupy" else jax_case()
    path = os.environ.get("SAMPLE_STATS")
    if path:
        with open(path, "w") as f:
            json.dump({"library": which, **stats}, f)


if __name__ == "__main__":
    main()
