"""The cost of one re-linearisation of the cross-entropy flow (:mod:`iterlin.solvers.flow`).

The paper's CNN (``make_model("cnn", ...)``, float32, P = 227 484) at θ₀ on N real CIFAR-10 images
(``--n``), one linearisation's pieces timed one by one, each after a compiling call where said:

* kernel: Θ_s = J_s J_sᵀ (N·10 × N·10), :func:`iterlin.analysis.ntk.empirical_ntk` (first call, compiling
  included, and a second call at the same N up to ``--second-kernel``);
* ODE: :func:`iterlin.solvers.flow.flow_outputs` with each ``--solver`` for each τ of ``--tau`` (mean cross-entropy,
  τ = ηK; the paper's ηK = 500), after a compiling call at τ = 1e-3 (the same program: τ is traced),
  with its number of steps;
* products: θ_τ = θ_s − J_sᵀc by one VJP on the training set, and on the ``--n-test`` held-out
  images one forward pass at θ_τ and one JVP (the linear model's outputs), after compiling calls.

On a shared CPU set ``OPENBLAS_NUM_THREADS=1``: the implicit solver's LU factorisations call
LAPACK, and OpenBLAS's threads spinning against other processes made a 320 × 320 LU take 0.6 s
instead of 14 ms here (2 cores, load 12).

Usage: ``nice python benchmarks/bench_flow.py [--n 250 500] [--tau 500] [--n-test 932] [--solver tsit5 kvaerno5] [--tau-implicit 0.05]``
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from iterlin.data import load_cifar10
from iterlin.linearise import linearised_apply
from iterlin.models import make_model
from iterlin.analysis.ntk import empirical_ntk
from iterlin.precision import full_precision
from iterlin.solvers import FlowConfig, flow_outputs


def _timed(fn):
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[250])
    ap.add_argument("--tau", type=float, nargs="+", default=[500.0])
    ap.add_argument("--n-test", type=int, default=932)
    ap.add_argument("--second-kernel", type=int, default=250, help="time a second kernel call up to this N")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--solver", nargs="+", default=["tsit5"], choices=["kvaerno5", "tsit5"])
    ap.add_argument("--tau-implicit", type=float, nargs="+", default=None,
                    help="the τ for kvaerno5 (default: --tau); its steps cost O((N·C)³)")
    args = ap.parse_args(argv)
    data = load_cifar10(max(args.n), args.n_test)
    model = make_model("cnn", jax.random.PRNGKey(args.seed))
    apply_fn, params = model.apply_fn, model.params
    cfg = FlowConfig()
    print(f"device {jax.devices()[0].device_kind}; rtol {cfg.rtol:g}, atol {cfg.atol:g}; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    pull = jax.jit(lambda p, x, c: jax.vjp(lambda q: apply_fn(q, x), p)[1](c.astype(jnp.float32))[0])
    heldout = jax.jit(lambda ps, p, x: (apply_fn(p, x), linearised_apply(apply_fn, ps, p, x)))
    xt = jnp.asarray(data.x_test)
    for n in args.n:
        x, y = jnp.asarray(data.x_train[:n]), np.asarray(data.y_train[:n])
        with full_precision():
            f0 = np.asarray(apply_fn(params, x), np.float64)
            theta, t_k1 = _timed(lambda: empirical_ntk(apply_fn, params, x))
            line = f"N={n}: kernel {theta.shape[0]}x{theta.shape[1]} {t_k1:.1f} s (first call)"
            if n <= args.second_kernel:
                _, t_k2 = _timed(lambda: empirical_ntk(apply_fn, params, x))
                line += f", {t_k2:.1f} s (second)"
        print(line, flush=True)
        for solver in args.solver:
            cfg = FlowConfig(solver=solver)
            _, t_c = _timed(lambda: flow_outputs(theta, f0, y, 1e-3, config=cfg)[0])
            print(f"N={n}: ODE {solver} compiling call (tau=1e-3) {t_c:.1f} s", flush=True)
            for tau in (args.tau_implicit or args.tau) if solver == "kvaerno5" else args.tau:
                (f, c, steps), t_o = _timed(lambda: flow_outputs(theta, f0, y, tau, config=cfg))
                acc = float(np.mean(np.argmax(np.asarray(f), -1) == y))
                print(f"N={n}: ODE {solver} tau={tau:g} {t_o:.1f} s, {int(steps)} steps, linear-model train acc "
                      f"{acc:.3f}", flush=True)
        c = jnp.asarray(np.asarray(c).reshape(f0.shape))
        with full_precision():
            jax.block_until_ready(pull(params, x, c))
            delta, t_v = _timed(lambda: pull(params, x, c))
            p_tau = jax.tree.map(lambda p, d: p - d, params, delta)
            jax.block_until_ready(heldout(params, p_tau, xt))
            _, t_j = _timed(lambda: heldout(params, p_tau, xt))
        print(f"N={n}: VJP (theta_tau) {t_v:.2f} s; held-out forward + JVP on {xt.shape[0]} images {t_j:.2f} s",
              flush=True)


if __name__ == "__main__":
    main()
