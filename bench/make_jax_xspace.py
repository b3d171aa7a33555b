"""Record a real JAX profile (XSpace) of a jitted MLP training loop on the CPU.

    python3 bench/make_jax_xspace.py --steps 8000 --out /tmp/jax_big

writes `<out>/plugins/profile/<run>/<host>.xplane.pb` (and JAX's own capped
`trace.json.gz` beside it). 8,000 steps give ~2 M events, ~80 MB: the benchmark
input for XSpace reading, and the larger profile the conversion tests compare
against JAX's JSON when it exists.
"""

from __future__ import annotations

import argparse
import glob
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--out", default="/tmp/jax_xspace")
    ap.add_argument("--width", type=int, default=64)
    a = ap.parse_args()

    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {
        "w1": jax.random.normal(k1, (32, a.width)) * 0.1,
        "w2": jax.random.normal(k2, (a.width, 10)) * 0.1,
    }
    x = jax.random.normal(k3, (128, 32))
    y = jnp.zeros((128, 10))

    def loss(p, x, y):
        h = jnp.tanh(x @ p["w1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    @jax.jit
    def step(p, x, y):
        g = jax.grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda w, d: w - 0.01 * d, p, g)

    params = step(params, x, y)  # compile outside the profile
    jax.block_until_ready(params)
    began = time.perf_counter()
    with jax.profiler.trace(a.out, create_perfetto_trace=False):
        for i in range(a.steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                params = step(params, x, y)
        jax.block_until_ready(params)
    print(f"{a.steps} steps profiled in {time.perf_counter() - began:.1f} s")
    for f in sorted(glob.glob(os.path.join(a.out, "plugins", "profile", "*", "*"))):
        print(f, os.path.getsize(f))


if __name__ == "__main__":
    main()
