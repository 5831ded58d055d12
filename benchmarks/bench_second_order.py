"""Second-order benchmark: one damped Gauss–Newton step and one empirical NTK, in one run.

* The MLP of Fig 9 (5 hidden layers of 50 ReLU units, P = 10 351) on the 20 quintic points:
  a GN step with each solver (kernel, kernel CG, primal CG) and the 20×20 NTK.
* The paper's CNN (P = 227 484) at a small N of real CIFAR-10 images: a GN step (cross-entropy,
  generalised GN, kernel solver) and the (N·10 × N·10) NTK.
* The CNN's empirical NTK at the sizes of the exact-limit experiments (``--n-ntk``, default 256 and
  1,000 images): its time, and its share of the ceiling, the FLOP/s of a ``--matmul``-sized float32
  matrix product timed just before and just after it (the mean of the two). The work is counted as
  ONE product ϕϕᵀ, 2(N·O)²·P FLOPs (the issue's count; ``empirical_ntk`` computes only the blocks on
  or above the diagonal of the symmetric kernel, about half of it, so a share above 1 is possible,
  up to about 2; target ≥ 1.2 at N = 1,000); beside it the useful share, (N·O)²·P (the half) plus
  the N per-example Jacobians (XLA's cost analysis of one chunk's). For N ≤ 512 the call is timed
  ``--ntk-rounds`` times after a compiling call (the exact limit forms kernels of one size many
  times; median and range of the per-round shares); above, the one call, compiling included.
* The matrix-free product v ↦ Θ̂v (:func:`iterlin.ntk_vector_product`, one vjp and one jvp over the
  batch) of the CNN at the same sizes: its time and its FLOP/s (XLA's cost analysis of the compiled
  product) over the same matmul ceiling, median and range over ``--ntk-rounds`` interleaved rounds.
* ``--n-relin``: one re-linearisation of the exact limit (:mod:`iterlin.experiments.limit`: Θ = JJᵀ,
  its float64 eigendecomposition and the flow's update −Jᵀa) of the CNN on that many images, after
  a compiling call at the same size (N ≤ 512; above, the one call includes compiling). Default: none.

Times are medians of ``--reps`` calls after one compiling call, on the default JAX device (the
large NTKs: see above).
Usage: ``python benchmarks/bench_second_order.py [--n-cnn 16] [--reps 7] [--n-ntk 256 1000] [--ntk-rounds 3]
[--n-relin 256 500 1000]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import iterlin
from iterlin.experiments import limit
from iterlin.analysis.jacobian import example_jacobians
from iterlin.models import make_model, resolve_conv


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


def _matmul_flops(n: int, reps: int = 3) -> float:
    """FLOP/s of an n×n float32 matrix product (median of ``reps`` after a compiling call)."""
    a = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.dot)
    return 2.0 * n**3 / _median(lambda: mm(a, a), reps)


def ntk_share(model, x, n_mm: int, rounds: int):
    """The NTK of ``model`` on x against the matmul ceiling (module docstring): a dict of the
    seconds (per round), the one-GEMM work 2(N·O)²·P, the useful work, the ceilings (per round,
    FLOP/s) and the first call's seconds. For N ≤ 512 ``rounds`` calls after a compiling one, above
    it the one call."""
    n, P = len(x), iterlin.count_params(model.params)
    jax.block_until_ready(iterlin.empirical_ntk(model.apply_fn, model.params, x[:32]))  # compiles
    jac = jax.jit(lambda p, xs: example_jacobians(model.apply_fn, p, xs)).lower(model.params, x[:8]).compile()
    ca = jac.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    n_out = 10
    useful = (n * n_out) ** 2 * P + n * float(ca["flops"]) / 8

    def once():
        t = time.perf_counter()
        jax.block_until_ready(iterlin.empirical_ntk(model.apply_fn, model.params, x))
        return time.perf_counter() - t

    first = once() if n <= 512 else None
    seconds, ceilings = [], []
    for _ in range(rounds if n <= 512 else 1):
        before = _matmul_flops(n_mm)
        seconds.append(once())
        ceilings.append((before + _matmul_flops(n_mm)) / 2)
    return {"seconds": seconds, "gemm": 2.0 * (n * n_out) ** 2 * P, "useful": useful, "ceilings": ceilings,
            "first": first}


def ntvp_share(model, x, n_mm: int, rounds: int, reps: int):
    """(seconds per round, FLOPs, ceilings per round) of Θ̂v (:func:`iterlin.ntk_vector_product`, jitted)
    on x, each round the median of ``reps`` products after the ceiling."""
    mv = jax.jit(lambda p, xs, v: iterlin.ntk_vector_product(model.apply_fn, p, xs)(v))
    v = jax.random.normal(jax.random.PRNGKey(3), (len(x) * 10,), jnp.float32)
    compiled = mv.lower(model.params, x, v).compile()
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    seconds, ceilings = [], []
    for _ in range(rounds):
        ceilings.append(_matmul_flops(n_mm))
        seconds.append(_median(lambda: compiled(model.params, x, v), reps))
    return seconds, float(ca["flops"]), ceilings


def _spread(values) -> str:
    values = list(values)
    return f"{statistics.median(values):.2f} [{min(values):.2f}–{max(values):.2f}]"


def relin_seconds(model, x, y) -> tuple[float, float]:
    """(seconds of :func:`~iterlin.experiments.limit.linearise_at`, seconds of its flow
    :func:`~iterlin.experiments.limit.update` at τ = 1/16) of ``model`` on (x, y); compiled first when N ≤ 512."""
    def once():
        t = time.perf_counter()
        lin = limit.linearise_at(model.apply_fn, model.params, x, y)
        t1 = time.perf_counter()
        jax.block_until_ready(limit.update(model.apply_fn, model.params, x, lin, limit.flow_phi(1 / 16)))
        return t1 - t, time.perf_counter() - t1

    if len(x) <= 512:
        once()
    return once()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-cnn", type=int, default=16)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--n-ntk", type=int, nargs="*", default=[256, 1000],
                    help="images of the large CNN NTKs timed against the ceiling (none: skip)")
    ap.add_argument("--ntk-rounds", type=int, default=3,
                    help="timed calls of each NTK with N <= 512 (and rounds of Θv), each between two ceilings")
    ap.add_argument("--n-relin", type=int, nargs="*", default=[],
                    help="images of the exact limit's re-linearisations timed (default: none)")
    ap.add_argument("--matmul", type=int, default=2048, help="matrix size of the measured ceiling")
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

    n_load = max([args.n_cnn, *args.n_ntk, *args.n_relin])
    try:
        cifar = iterlin.load_cifar10(n_train=n_load, n_test=1, download=False)
        xc_all, yc_all = cifar.x_train, cifar.y_train
        source = "CIFAR-10"
    except Exception as e:  # noqa: BLE001 - speed does not depend on the pixels
        xc_all = np.random.default_rng(0).standard_normal((n_load, 32, 32, 3), dtype=np.float32)
        yc_all = np.arange(n_load, dtype=np.int32) % 10
        source = f"random images ({type(e).__name__})"
    xc = xc_all[: args.n_cnn]
    yc = np.arange(args.n_cnn, dtype=np.int32) % 10
    cnn = make_model("cnn", jax.random.PRNGKey(0))
    n = args.n_cnn
    print(f"CNN of the paper, P = {iterlin.count_params(cnn.params)}, N = {n} ({source}), "
          f"convolutions {resolve_conv('auto')!r}")
    t = _median(lambda: iterlin.gauss_newton_step(cnn.apply_fn, cnn.params, xc, yc, damping=1e-3, loss="ce",
                                                  solver="kernel"), args.reps)
    print(f"  GN step (kernel, CE, λ = 1e-3):  {_fmt(t)}")
    t = _median(lambda: iterlin.empirical_ntk(cnn.apply_fn, cnn.params, xc), args.reps)
    print(f"  NTK {n * 10}×{n * 10}:               {_fmt(t)}")
    for n in args.n_ntk:
        r = ntk_share(cnn, xc_all[:n], args.matmul, args.ntk_rounds)
        gemm = [r["gemm"] / t / c for t, c in zip(r["seconds"], r["ceilings"])]
        useful = [r["useful"] / t / c for t, c in zip(r["seconds"], r["ceilings"])]
        print(f"  NTK {n * 10}×{n * 10} ({n} images): "
              + (f"1st call (compiling) {r['first']:.1f} s, then {len(r['seconds'])} calls "
                 if r["first"] else "one call (with compiling) ")
              + f"{statistics.median(r['seconds']):.1f} s (median; {min(r['seconds']):.1f}–{max(r['seconds']):.1f}); "
              f"ceiling ({args.matmul}² matmul before and after) "
              f"{statistics.median(r['ceilings']) / 1e9:.1f} GFLOP/s; "
              f"share counting one GEMM 2(N·O)²·P = {r['gemm'] / 1e12:.2f} TFLOP: {_spread(gemm)} (target >= 1.2 at "
              f"N = 1000); useful (half + Jacobians, {r['useful'] / 1e12:.2f} TFLOP): {_spread(useful)}")
        secs, flops, ceil = ntvp_share(cnn, xc_all[:n], args.matmul, args.ntk_rounds, args.reps)
        print(f"  Θv ({n} images, ntk_vector_product, jitted): {_fmt(statistics.median(secs))} "
              f"({_fmt(min(secs))}–{_fmt(max(secs))}), {flops / 1e9:.2f} GFLOP (XLA), share of the matmul "
              f"ceiling {_spread(flops / t / c for t, c in zip(secs, ceil))}")
    for n in args.n_relin:
        lin, upd = relin_seconds(cnn, xc_all[:n], yc_all[:n])
        print(f"  exact-limit re-linearisation, {n} images: kernel + float64 eigh {lin:.1f} s, update {upd:.1f} s"
              + (" (with compiling)" if n > 512 else ""))


if __name__ == "__main__":
    main()
