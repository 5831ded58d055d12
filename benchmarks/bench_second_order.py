"""Second-order benchmark: one damped Gauss–Newton step and one empirical NTK, in one run.

* The MLP of Fig 9 (5 hidden layers of 50 ReLU units, P = 10 351) on the 20 quintic points:
  a GN step with each solver (kernel, kernel CG, primal CG) and the 20×20 NTK.
* The paper's CNN (P = 227 484) at a small N of real CIFAR-10 images: a GN step (cross-entropy,
  generalised GN, kernel solver) and the (N·10 × N·10) NTK.

Times are medians of ``--reps`` calls after one compiling call, on the default JAX device.
Usage: ``python benchmarks/bench_second_order.py [--n-cnn 16] [--reps 7]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

import iterlin
from iterlin.models import make_model


def _median(fn, reps):
    jax.block_until_ready(fn())  # compile
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _fmt(seconds):
    return f"{seconds * 1e3:8.2f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-cnn", type=int, default=16)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}")

    q = iterlin.quintic()
    mlp = make_model("mlp", jax.random.PRNGKey(0))
    x, y = q.x_train, q.y_train
    print(f"MLP of Fig 9, P = {iterlin.count_params(mlp.params)}, N = {len(x)}")
    for solver in ("kernel", "kernel_cg", "primal_cg"):
        t = _median(lambda s=solver: iterlin.gauss_newton_step(mlp.apply_fn, mlp.params, x, y, damping=1e-3,
                                                                solver=s), args.reps)
        print(f"  GN step ({solver:9s}, λ = 1e-3): {_fmt(t)}")
    t = _median(lambda: iterlin.empirical_ntk(mlp.apply_fn, mlp.params, x), args.reps)
    print(f"  NTK {len(x)}×{len(x)}:                 {_fmt(t)}")

    try:
        xc = iterlin.load_cifar10(n_train=args.n_cnn, n_test=1).x_train
        source = "CIFAR-10"
    except Exception as e:  # noqa: BLE001 - speed does not depend on the pixels
        xc = np.random.default_rng(0).standard_normal((args.n_cnn, 32, 32, 3), dtype=np.float32)
        source = f"random images ({type(e).__name__})"
    yc = np.arange(args.n_cnn, dtype=np.int32) % 10
    cnn = make_model("cnn", jax.random.PRNGKey(0))
    n = args.n_cnn
    print(f"CNN of the paper, P = {iterlin.count_params(cnn.params)}, N = {n} ({source})")
    t = _median(lambda: iterlin.gauss_newton_step(cnn.apply_fn, cnn.params, xc, yc, damping=1e-3, loss="ce",
                                                  solver="kernel"), args.reps)
    print(f"  GN step (kernel, CE, λ = 1e-3):  {_fmt(t)}")
    t = _median(lambda: iterlin.empirical_ntk(cnn.apply_fn, cnn.params, xc), args.reps)
    print(f"  NTK {n * 10}×{n * 10}:               {_fmt(t)}")


if __name__ == "__main__":
    main()
