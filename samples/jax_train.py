"""A JAX training loop: an MLP (4096 -> 8192 -> 8192 -> 1000) trained by plain SGD written out,
jax.jit, random data. Run with XLA_PYTHON_CLIENT_ALLOCATOR=platform, XLA allocates every array
with the driver (no preallocated BFC region), so memtrace sees each one with the Python line that
made it; without, it sees only XLA's reservation.

    XLA_PYTHON_CLIENT_ALLOCATOR=platform python jax_train.py [--steps N]

stdout is the same in every run. $SAMPLE_STATS gets param_bytes and param_arrays (the weights
and biases init() made, still live when step() first compiles) and live_bytes at the end.
"""
import argparse
import json
import os

import jax
import jax.numpy as jnp


def init(key, sizes):
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append((jax.random.normal(k, (a, b), jnp.float32) * 0.01, jnp.zeros((b,), jnp.float32)))
    return params


def loss(params, x, y):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    logits = x @ w + b
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, logits.shape[-1]), -1))


@jax.jit
def step(params, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)], value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    key = jax.random.PRNGKey(0)
    params = init(key, [4096, 8192, 8192, 1000])
    stats = {"param_bytes": sum(w.nbytes + b.nbytes for w, b in params),
             "param_arrays": 2 * len(params)}
    x = jax.random.normal(key, (1024, 4096), jnp.float32)
    y = jax.random.randint(key, (1024,), 0, 1000)
    for _ in range(args.steps):
        params, value = step(params, x, y)
    value.block_until_ready()
    print(f"jax_train: loss={float(value):.4f}")
    stats["live_bytes"] = sum(a.nbytes for a in jax.live_arrays())
    path = os.environ.get("SAMPLE_STATS")
    if path:
        with open(path, "w") as f:
            json.dump(stats, f)


if __name__ == "__main__":
    main()
