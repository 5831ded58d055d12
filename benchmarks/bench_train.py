"""Training-speed benchmark: ratios measured in one run, on one device (the first JAX device).

The network is the paper's CNN (``make_model("cnn", ...)``: on a CPU its convolutions lowered to
slices and one matrix product, :mod:`iterlin.conv`), K = ``--K`` (10), SGD, the same batch size
throughout. Every ``iterlin.train``/``train_sweep`` time is end to end (host NumPy data in,
parameters out: data transfer, tracing, the evaluations, the steps) and of LATER calls with the
same arguments, which compile nothing (``iterlin.training`` caches its programs on what they close
over; JAX's persistent compilation cache is not turned on here, so the first call compiles).
``--e2e-reps N`` keeps the least of N calls in each round. iterlin's steps, ``train`` and
``train_sweep`` accumulate their gradients over chunks of ``--microbatch`` examples (default 16 on a CPU, where the products and
copies of whole batches of 256 are memory-bound; the whole batch elsewhere): ``train(...,
microbatch=16)``, the same training to rounding (``tests/test_training.py``); ratio 1e compares it with
the whole-batch step.

1. Step time, every step AOT-compiled and timed on the same batch, INTERLEAVED (``--rounds`` rounds,
   each timing every step ``--reps`` times and keeping the least; each ratio is taken within a
   round, so a change of the machine's load weighs on both sides alike):
   - iterlin's linearised step (``make_step``: forward + jvp + its transpose at θ_s);
   - iterlin's K = 1 step (``make_step(...).k1``: SGD on the network, iterlin's convolutions);
   - plain Flax/Optax SGD with ``lax.conv`` (``make_model(..., conv="xla")``, ``value_and_grad``):
     the step a researcher would write, and the baseline of ratios 1 and 1b;
   - PyTorch (CPU: channels-last, ``torch.set_num_threads`` = the cores JAX sees) with the same
     CNN: an SGD step, and the linearised step with ``torch.func.jvp`` (the linear model's outputs
     f(θ_s) + J(θ_s)(θ − θ_s)) and ``backward``: the peer a researcher would otherwise write
     (skipped, saying so, where torch is not installed: ``pip install torch==2.13.0`` is the CPU
     build);
   - a ``--matmul``-sized float32 matrix product: the ceiling of 4.
   Ratio 1: linearised / plain Flax SGD (target ≤ 0.85); 1b: iterlin's K = 1 / plain Flax SGD;
   1c: linearised / PyTorch's linearised (target ≤ 1); 1d: PyTorch SGD / plain Flax SGD.
2. ``iterlin.train`` (linearised, evaluation only at steps 0 and T, of the network and the linear
   model on the first ``--n-eval-train`` training images) over the way most reproductions are
   written: a per-step-jitted Flax/Optax SGD step (``lax.conv``) fed host NumPy batches (shuffled on
   the host), evaluating the network on the same images at steps 0 and T; same steps, second
   calls. The first calls (compilation included) and the steady state (T(2·steps) − T(steps), no
   per-call costs) are printed too. Target ≤ 1.5 on CPU, < 1 on a GPU.
3. An R = ``--runs`` (8) run sweep, ``iterlin.train_sweep`` with its defaults (8 initialisations,
   the same K; the runs vmapped in one program, or on a CPU, the CNN having at least
   ``iterlin.training.STEP_RUNS_MIN_PARAMS`` parameters, stepped one after another), over the same
   R runs trained one after another by R calls of ``iterlin.train``, both ``--sweep-steps`` steps,
   timed alternately (``--e2e-rounds``).
   Target ≤ 1.0: a sweep costs no more than its runs one after another (timed as R calls, not as R
   times one call: a machine whose clock falls under sustained load charges both alike).
   3b and 3c: the steady state (T(2·steps) − T(steps): a step's cost, without the per-call costs of
   compiling-cache lookups, initialisation and the two evaluations), per run and step: the vmapped
   sweep (``vectorise=True``, 3b) and the sweep stepping its runs one after another
   (``vectorise=False``, 3c), each over
   one ``iterlin.train`` run's steady state of 2.
4. The linearised step's share of the ceiling: its useful FLOP/s (the FLOPs of the same step with
   ``lax.conv``, counted by XLA's ``cost_analysis``: the network's arithmetic, not the lowering's
   copies, / the step time of 1) over the peak. The peak is a table value for known accelerators
   (the tensor-core dense peak at JAX's default matmul precision, TF32 on NVIDIA GPUs; the FP32
   non-tensor peak under ``jax_default_matmul_precision=highest``); on a CPU or an unknown device
   the FLOP/s of the large float32 matmul timed beside the steps in 1 (an achievable ceiling, more
   honest than cores × clock × FLOPs/cycle, which is printed beside it). Target ≥ 0.35 on a CPU.
5. Evaluation's share of a default run: ``train`` with its default evaluation
   (:func:`iterlin.training.default_evaluation`: up to 21 points, network and linear model,
   budgeted at a tenth of the images trained on; no test split) against a bare run that evaluates
   one image at the two ends; share = (default − bare) / default. 5b: the same for the default of
   earlier versions, every ``steps // 20`` steps (21 points) on the whole training split.

6. A user's own Flax CNN (:class:`UserCNN`: ``nn.Conv`` and ``nn.max_pool``, the paper's shapes, not
   ``make_model``) trained by ``iterlin.train`` with its defaults (K = ∞, ``--user-batch`` 128,
   ``--user-steps`` 12, SGD, evaluation at 0 and T on the evaluation subset) over its own plain
   Flax/Optax loop doing the same evaluation work (the network and its linearisation on the same
   images at 0 and T). Target ≤ 1.3. 6b: the same call with ``conv="xla"`` (the network's
   ``lax.conv`` kept, so ``fit`` dispatches its steps one by one).

Every ratio is taken round by round over interleaved rounds (``--rounds`` for 1 and 4, each
round the least of ``--reps`` calls; ``--e2e-rounds`` for 2, 3, 5 and 6, after a first, compiling
call) and printed as its median and its range [least–greatest] over the rounds; the summary table
gives both. ``--sections 1,4,6`` runs some sections only.

Usage: ``python benchmarks/bench_train.py [--batch 256] [--steps N] [--n-train N] [--quick]``
(defaults: 1000 steps and 4096 images on an accelerator, 40 steps and 1024 images on CPU, so that
``make bench`` ends in minutes there; ``--help`` lists the rest). Real CIFAR-10 images from
``$ITERLIN_CIFAR10`` when available, random images otherwise: speed does not depend on pixel
values. ``--quick``: tiny sizes and a 2-run sweep, a smoke test (its numbers mean little: per-call
costs dominate). Ratios 2 and 5 depend on the sizes: per-call costs (tracing, the evaluations at
the ends) weigh less in longer runs; the per-call overhead is printed under [2]. Absolute times on
a shared CPU are inflated by contention; the ratios are what to read. No target is asserted
anywhere: they are printed beside the values.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import statistics
import sys
import time

import jax
import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import optax

import iterlin
from iterlin.models import make_model, resolve_conv
from iterlin.training import STEP_RUNS_MIN_PARAMS, default_evaluation, init_state, make_step
from iterlin.tree import tree_index, tree_size, tree_stack

#: Peak dense FLOP/s (TFLOP/s) by device kind (a substring of ``device.device_kind``; the first
#: match wins): (FP32 on the non-tensor units, the tensor units' dense peak for float32 inputs at
#: JAX's default precision: TF32 on NVIDIA Ampere and later, bf16 passes on TPUs; None: no such
#: units). Vendor data sheets, without sparsity (the sheets' TF32 figures are often 2x, "with
#: sparsity").
PEAK_TFLOPS = [
    ("H100 PCIe", 51.2, 378.0),
    ("H100 NVL", 60.0, 417.5),
    ("H100", 66.9, 494.7),  # SXM5 ("NVIDIA H100 80GB HBM3")
    ("H200", 66.9, 494.7),  # GH200 too
    ("A100", 19.5, 156.0),
    ("L40S", 91.6, 183.0),
    ("L4", 30.3, 60.0),
    ("A10", 31.2, 62.5),
    ("V100", 15.7, None),
    ("T4", 8.1, None),
    ("TPU v4", None, 275.0),
    ("TPU v5 lite", None, 197.0),
    ("TPU v5", None, 459.0),  # v5p
    ("TPU v6", None, 918.0),
]


def _timed(fn, *args, **kwargs):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args, **kwargs))
    return time.perf_counter() - t


#: Calls timed per round after the first; the least is kept (``--e2e-reps``).
E2E_REPS = 1


def _flops(compiled) -> float:
    ca = compiled.cost_analysis()
    if isinstance(ca, (list, tuple)):  # older JAX: one dict per program
        ca = ca[0]
    return float(ca["flops"]) if ca and "flops" in ca else math.nan


def _s(seconds):
    return f"{seconds * 1e3:.1f} ms" if abs(seconds) < 1 else f"{seconds:.2f} s"


def _sgd_step(model, opt):
    def step(params, opt_state, x, y):
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply_fn(p, x), y).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step


def _interleaved(fns: dict, rounds: int, reps: int = 1, warm: bool = True) -> dict:
    """Each of ``fns`` (name -> zero-argument callable) timed ``reps`` times per round (the least kept:
    the least disturbed on a shared machine), round after round, one function after the other:
    {name: [each round's time]}. A ratio of two is then taken round by round (:func:`_spread`), so a
    change of the machine's load weighs on both alike."""
    if warm:
        for fn in fns.values():
            jax.block_until_ready(fn())  # warm up (compiles)
    per_round = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            per_round[name].append(min(_timed(fn) for _ in range(reps)))
    return per_round


def _spread(values) -> tuple[float, float, float]:
    """(median, least, greatest) of per-round values."""
    values = list(values)
    return statistics.median(values), min(values), max(values)


def _ratio(num, den) -> tuple[float, float, float]:
    """The ratio of two per-round time lists, round by round: (median, least, greatest)."""
    return _spread(a / b for a, b in zip(num, den))


def _fmt_spread(r) -> str:
    return f"{r[0]:.2f} [{r[1]:.2f}–{r[2]:.2f}]"


def torch_steps(x_np, y_np, lr: float):
    """PyTorch's SGD step and linearised step of the paper's CNN on the batch (x_np, y_np), or the
    reason they cannot run. CPU, channels-last, as many threads as JAX's process may use.

    The linearised step is the one of ``iterlin.training.make_step``: the linear model's outputs
    f(θ_s) + J(θ_s)(θ − θ_s) by ``torch.func.jvp`` at θ_s with tangent θ − θ_s, the softmax
    cross-entropy of them, ``backward`` to θ, and θ ← θ − lr·∇.
    """
    try:
        import torch
        import torch.nn.functional as F
        from torch import nn
        from torch.func import functional_call, jvp
    except ImportError:
        return None, "PyTorch is not installed (its CPU build: pip install torch==2.13.0)"
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 50, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(50, 50, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(1250, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10),
    ).to(memory_format=torch.channels_last)
    x = torch.from_numpy(np.ascontiguousarray(np.transpose(x_np, (0, 3, 1, 2)))).to(
        memory_format=torch.channels_last)
    y = torch.from_numpy(np.asarray(y_np, np.int64))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    params_s = {k: v.detach().clone() for k, v in model.named_parameters()}
    params = {k: v.detach().clone() for k, v in params_s.items()}

    def sgd():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    def linearised():
        theta = {k: v.requires_grad_() for k, v in params.items()}
        tangent = {k: theta[k] - params_s[k] for k in theta}
        out, jv = jvp(lambda p: functional_call(model, p, (x,)), (params_s,), (tangent,))
        F.cross_entropy(out + jv, y).backward()
        with torch.no_grad():
            for k, v in theta.items():
                params[k] = (v - lr * v.grad).detach()

    return {"torch_sgd": sgd, "torch_lin": linearised}, f"PyTorch {torch.__version__}, {threads} threads"


def step_times(model, flax_model, opt, K, x, y, n_mm: int, rounds: int, reps: int, lr: float,
               microbatch: int | None = None):
    """Ratio 1's steps (and 4's ceiling), timed interleaved: (times, FLOPs, the ceiling's n, torch note).
    With ``microbatch``, iterlin's steps accumulate their gradients over chunks of that many examples,
    and the linearised step over the whole batch is timed beside them (``lin_whole``)."""
    state = init_state(model.params, opt, K)
    step = make_step(model.apply_fn, opt, "ce", microbatch=microbatch)
    lin = jax.jit(step).lower(state, (x, y)).compile()
    k1 = jax.jit(step.k1).lower(state, (x, y)).compile()
    lin_xla = jax.jit(make_step(flax_model.apply_fn, opt, "ce")).lower(state, (x, y)).compile()
    opt_state = opt.init(flax_model.params)
    sgd = jax.jit(_sgd_step(flax_model, opt)).lower(flax_model.params, opt_state, x, y).compile()
    a = jax.random.normal(jax.random.PRNGKey(1), (n_mm, n_mm), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(2), (n_mm, n_mm), jnp.float32)
    mm = jax.jit(jnp.dot).lower(a, b).compile()
    fns = {
        "lin": lambda: lin(state, (x, y)),
        "k1": lambda: k1(state, (x, y)),
        "flax_sgd": lambda: sgd(flax_model.params, opt_state, x, y),
        "matmul": lambda: mm(a, b),
    }
    if microbatch is not None:
        whole = jax.jit(make_step(model.apply_fn, opt, "ce")).lower(state, (x, y)).compile()
        fns["lin_whole"] = lambda: whole(state, (x, y))
    peers, torch_note = torch_steps(np.asarray(x), np.asarray(y), lr)
    fns.update(peers or {})
    times = _interleaved(fns, rounds, reps)
    flops = {"lin": _flops(lin_xla), "lin_lowered": _flops(lin), "flax_sgd": _flops(sgd), "matmul": 2.0 * n_mm**3}
    return times, flops, torch_note


def make_host_loop(model, opt, x_np, y_np, batch, n_eval, eval_batch=1000, linear_too=False):
    """The usual reproduction: one jitted step (built once), NumPy shuffling and slicing on the
    host every step, and the network's loss and accuracy on the first ``n_eval`` training images
    at steps 0 and T (jitted, in chunks); with ``linear_too`` also those of its linearisation at
    θ_0, f(θ_0) + J(θ_0)(θ − θ_0) by ``jax.jvp`` (the evaluation work of ``iterlin.train``)."""
    step = jax.jit(_sgd_step(model, opt))

    def metrics(logits, y):
        return (optax.softmax_cross_entropy_with_integer_labels(logits, y).sum(),
                (jnp.argmax(logits, -1) == y).sum())

    @jax.jit
    def eval_chunk(params, x, y):
        out = metrics(model.apply_fn(params, x), y)
        if linear_too:
            delta = jax.tree.map(jnp.subtract, params, model.params)
            f0, jv = jax.jvp(lambda p: model.apply_fn(p, x), (model.params,), (delta,))
            out = out + metrics(f0 + jv, y)
        return out

    def evaluate(params):
        loss = correct = 0.0
        for i in range(0, n_eval, eval_batch):
            s = slice(i, min(i + eval_batch, n_eval))
            chunk = eval_chunk(params, x_np[s], y_np[s])
            loss, correct = loss + float(chunk[0]), correct + float(chunk[1])
        return loss / n_eval, correct / n_eval

    def run(steps, seed=0):
        params, opt_state = model.params, opt.init(model.params)
        evaluate(params)
        rng = np.random.default_rng(seed)
        per_epoch = len(x_np) // batch
        perm = None
        for t in range(steps):
            if t % per_epoch == 0:
                perm = rng.permutation(len(x_np))
            idx = perm[(t % per_epoch) * batch : (t % per_epoch + 1) * batch]
            params, opt_state, _ = step(params, opt_state, x_np[idx], y_np[idx])
        evaluate(params)
        return params

    return run


class UserCNN(nn.Module):
    """A researcher's own Flax network (not :func:`iterlin.models.make_model`): the paper's CNN shapes
    written the usual way, ``nn.Conv`` (``lax.conv_general_dilated``) and ``nn.max_pool``
    (``lax.reduce_window``)."""

    @nn.compact
    def __call__(self, x):
        x = nn.max_pool(nn.relu(nn.Conv(50, (5, 5), padding="VALID")(x)), (2, 2), strides=(2, 2))
        x = nn.max_pool(nn.relu(nn.Conv(50, (5, 5), padding="VALID")(x)), (2, 2), strides=(2, 2))
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(120)(x))
        x = nn.relu(nn.Dense(84)(x))
        return nn.Dense(10)(x)


def user_model_ratio(x_np, y_np, dev, batch: int, steps: int, n_eval: int, rounds: int,
                     with_xla: bool = True) -> dict:
    """Ratio 6: :class:`UserCNN` trained by ``iterlin.train(apply_fn, params, data, K=inf, steps,
    optimizer=optax.sgd(1e-3), loss="ce", batch_size, eval_every=steps, eval_train_size=n_eval)`` (every
    other argument its default: ``conv="auto"``, ``compiled_loop=None``, ``microbatch=None``) against its
    own plain loop (:func:`make_host_loop` with ``linear_too``: a jitted Flax/Optax SGD step with
    ``lax.conv``, host batches, the network and its linearisation evaluated on the same images at
    steps 0 and T), and with ``conv="xla"`` (6b, unless not ``with_xla``); later calls, interleaved
    over ``rounds``. Returns {"auto": spread, "xla": spread or None, "times": {name: median seconds}}."""
    net = UserCNN()
    params = net.init(jax.random.PRNGKey(0), jnp.ones((1,) + x_np.shape[1:], jnp.float32))
    model = type("UserModel", (), {"apply_fn": staticmethod(net.apply), "params": params})
    opt = optax.sgd(1e-3)

    def train(**kw):
        return iterlin.train(net.apply, params, (x_np, y_np), K=math.inf, steps=steps, optimizer=opt, loss="ce",
                             batch_size=batch, eval_every=steps, eval_train_size=n_eval, **kw)[0]

    host = make_host_loop(model, opt, x_np, y_np, batch, n_eval, linear_too=True)
    fns = {"plain": lambda: host(steps), "auto": train}
    if with_xla:
        fns["xla"] = lambda: train(conv="xla")
    with jax.default_device(dev):
        times = _interleaved(fns, rounds, E2E_REPS)
    spreads = {name: _ratio(times[name], times["plain"]) if name in times else None for name in ("auto", "xla")}
    print(f"[6] a user's own Flax CNN (nn.Conv, nn.max_pool; P = {iterlin.count_params(params):,}), K = inf, batch "
          f"{batch}, {steps} steps, network and linear model evaluated at 0 and {steps} on {n_eval} images: "
          f"iterlin.train (defaults) {_s(statistics.median(times['auto']))}, its own plain Flax/Optax loop "
          f"{_s(statistics.median(times['plain']))}: ratio {_fmt_spread(spreads['auto'])}"
          + (f"; with conv='xla' {_s(statistics.median(times['xla']))}: ratio {_fmt_spread(spreads['xla'])}"
             if with_xla else "") + f" ({rounds} interleaved rounds)")
    return {**spreads, "times": {name: statistics.median(v) for name, v in times.items()}}


def cpu_theoretical_flops():
    """cores × clock × float32 FLOPs per cycle (2 FMA units assumed), or None where unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return None, "no /proc/cpuinfo"
    mhz = re.search(r"^cpu MHz\s*:\s*([\d.]+)", info, re.MULTILINE)
    flags = re.search(r"^flags\s*:(.*)$", info, re.MULTILINE)
    if not mhz or not flags:
        return None, "clock or flags unknown"
    flags = set(flags.group(1).split())
    per_cycle, isa = (64, "AVX-512") if "avx512f" in flags else (32, "AVX2+FMA") if {"avx2", "fma"} <= flags \
        else (8, "SSE")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ghz = float(mhz.group(1)) / 1e3
    return cores * ghz * 1e9 * per_cycle, (f"{cores} cores × {ghz:.2f} GHz × {per_cycle} FLOPs/cycle "
                                           f"({isa}, 2 FMA units)")


def table_peak(device):
    """(peak FLOP/s, description) from :data:`PEAK_TFLOPS`, or (None, reason)."""
    kind = device.device_kind
    for name, fp32, tensor in PEAK_TFLOPS:
        if name.lower() in kind.lower():
            precision = str(jax.config.jax_default_matmul_precision or "default").lower()
            if precision in ("highest", "float32") and fp32 is not None:
                return fp32 * 1e12, f"{name} FP32 non-tensor peak {fp32:g} TFLOP/s (matmul precision {precision})"
            if tensor is not None:
                unit = "bf16 MXU" if name.startswith("TPU") else "TF32 tensor-core dense"
                return tensor * 1e12, (f"{name} {unit} peak {tensor:g} TFLOP/s (JAX's default precision for float32 "
                                       "convolutions and matmuls)")
            return fp32 * 1e12, f"{name} FP32 peak {fp32:g} TFLOP/s"
    return None, f"{kind!r} not in the table"


def load_data(n_train):
    try:
        data = iterlin.data.load_cifar10(n_train=n_train, n_test=1, download=False)
        return data.x_train, data.y_train, "CIFAR-10"
    except Exception as e:  # noqa: BLE001 - speed does not depend on the pixels
        rng = np.random.default_rng(0)
        x = rng.standard_normal((n_train, 32, 32, 3), dtype=np.float32)
        y = rng.integers(0, 10, n_train).astype(np.int32)
        return x, y, f"random images (no CIFAR-10: {type(e).__name__})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=None,
                    help="training steps (default 1000 on an accelerator, 40 on CPU)")
    ap.add_argument("--sweep-steps", type=int, default=None,
                    help="steps of ratio 3's sweep and its one-run reference "
                    "(default --steps on an accelerator, 4 on CPU)")
    ap.add_argument("--n-train", type=int, default=None, help="training images (default 4096; 1024 on CPU)")
    ap.add_argument("--n-eval-train", type=int, default=512,
                    help="training images evaluated in ratios 2-4 and 5b (eval_train_size)")
    ap.add_argument("--K", type=float, default=10, help="re-linearisation period (inf allowed)")
    ap.add_argument("--runs", type=int, default=8, help="runs of the vmapped sweep (ratio 3)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each step time per round (ratio 1)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the step times (ratio 1)")
    ap.add_argument("--e2e-reps", type=int, default=1,
                    help="end-to-end calls timed per round (after a first, compiling call), the least kept (default 1)")
    ap.add_argument("--e2e-rounds", type=int, default=5,
                    help="interleaved rounds of the end-to-end times (ratios 2, 3, 5, 6): median and range")
    ap.add_argument("--user-batch", type=int, default=128, help="batch of ratio 6's user-defined CNN")
    ap.add_argument("--user-steps", type=int, default=12, help="steps of ratio 6's user-defined CNN")
    ap.add_argument("--sections", default="1,2,3,4,5,6",
                    help="which numbered sections to run (comma-separated; 4 needs 1); the summary holds those run")
    ap.add_argument("--matmul", type=int, default=None, help="matmul size for the measured ceiling "
                    "(default 2048 on CPU, 8192 elsewhere)")
    ap.add_argument("--microbatch", default="auto",
                    help="iterlin's steps accumulate their gradients over chunks of this many examples "
                    "(train(..., microbatch=c)); 'none': the whole batch at once; 'auto' (default): 16 on CPU, "
                    "none elsewhere")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes, a smoke test: batch 32, 4 steps, n_train 256, a 2-run sweep, 2 rounds, no 6b")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # a long run, often sent to a file: each line as it comes
    on_cpu = jax.devices()[0].platform == "cpu"
    if args.quick:
        args.batch, args.steps, args.sweep_steps, args.n_train, args.n_eval_train = 32, 4, 4, 256, 32
        args.runs, args.reps, args.rounds, args.e2e_reps, args.matmul = 2, 1, 2, 1, args.matmul or 512
        args.e2e_rounds, args.user_batch, args.user_steps = 2, 32, 2
    if args.steps is None:
        args.steps = 40 if on_cpu else 1000
    if args.n_train is None:
        args.n_train = 1024 if on_cpu else 4096
    if args.sweep_steps is None:
        args.sweep_steps = min(4, args.steps) if on_cpu else args.steps
    if args.microbatch == "auto":
        args.microbatch = 16 if on_cpu else None
    elif args.microbatch == "none":
        args.microbatch = None
    else:
        args.microbatch = int(args.microbatch)
    K = math.inf if math.isinf(args.K) else int(args.K)
    B, T = args.batch, args.steps
    global E2E_REPS
    E2E_REPS = max(1, args.e2e_reps)
    run_benchmark(args, K, B, T)


def run_benchmark(args, K, B, T):
    dev = jax.devices()[0]
    on_cpu = dev.platform == "cpu"
    x_np, y_np, source = load_data(args.n_train)
    n_sub = min(args.n_eval_train, len(x_np))
    model = make_model("cnn", jax.random.PRNGKey(0))
    flax_model = make_model("cnn", jax.random.PRNGKey(0), conv="xla")
    conv = resolve_conv("auto")
    lr = 1e-3
    opt = optax.sgd(lr)
    P = iterlin.count_params(model.params)
    print(f"device: {dev.device_kind} ({dev.platform}), jax {jax.__version__}, {jax.device_count()} device(s), "
          f"all measurements on {dev}")
    mb = args.microbatch
    print(f"model: CNN of the paper (P = {P}, iterlin's convolutions: {conv!r}), K = {K}, SGD; batch {B}, {T} steps; "
          f"data: {source}, n_train {len(x_np)}, evaluation subset {n_sub}; iterlin's gradients "
          + (f"in chunks of {mb} examples (microbatch={mb})" if mb else "over the whole batch (microbatch=None)"))
    print("compilation: iterlin caches its compiled programs in the process (a second call compiles nothing); "
          "JAX's persistent cache is not used")
    print(f"end-to-end times: the 1st call, then {args.e2e_rounds} interleaved rounds of later calls"
          + (f" (each the least of {E2E_REPS})" if E2E_REPS > 1 else "") + "; ratios: median [least–greatest] over "
          "the rounds, each round's ratio of its own times. On a shared machine the spread is the load's")

    sec = {s.strip() for s in args.sections.split(",")}
    rounds = args.e2e_rounds
    common = {"K": K, "optimizer": opt, "batch_size": B, "devices": [dev], "microbatch": mb}

    def train(steps, **kw):
        return iterlin.train(model.apply_fn, model.params, (x_np, y_np), steps=steps, **common, **kw)[0]

    ends_sub = {"eval_steps": [], "eval_train_size": n_sub}
    steady_a, has_torch, torch_note = math.nan, False, "section 1 not run"
    # 1. the steps, interleaved; FLOPs for 4
    if "1" in sec:
        xb, yb = jnp.asarray(x_np[:B]), jnp.asarray(y_np[:B])
        n_mm = args.matmul or (2048 if on_cpu else 8192)
        per_round, flops, torch_note = step_times(model, flax_model, opt, K, xb, yb, n_mm, args.rounds, args.reps, lr,
                                                  mb)
        times = {name: statistics.median(v) for name, v in per_round.items()}
        t_lin, t_k1, t_sgd = times["lin"], times["k1"], times["flax_sgd"]
        r_lin, r_k1 = _ratio(per_round["lin"], per_round["flax_sgd"]), _ratio(per_round["k1"], per_round["flax_sgd"])
        has_torch = "torch_lin" in times
        if has_torch:
            r_torch = _ratio(per_round["lin"], per_round["torch_lin"])
            r_torch_sgd = _ratio(per_round["torch_sgd"], per_round["flax_sgd"])
            torch_wins = sum(a <= b for a, b in zip(per_round["lin"], per_round["torch_lin"]))
        print(f"[1] step times (median of {args.rounds} interleaved rounds, each the least of {args.reps}): iterlin "
              f"linearised {_s(t_lin)}, iterlin K = 1 {_s(t_k1)}, plain Flax/Optax SGD with lax.conv {_s(t_sgd)}"
              + (f", PyTorch SGD {_s(times['torch_sgd'])}, PyTorch linearised (torch.func.jvp + backward) "
                 f"{_s(times['torch_lin'])} ({torch_note})" if has_torch else f"; PyTorch skipped: {torch_note}"))
        print(f"    ratios, median [range] over the rounds: linearised / Flax SGD {_fmt_spread(r_lin)}, "
              f"K = 1 / Flax SGD "
              f"{_fmt_spread(r_k1)}"
              + (f", linearised / PyTorch linearised {_fmt_spread(r_torch)} (<= 1 in {torch_wins} of {args.rounds} "
                 f"rounds), PyTorch SGD / Flax SGD {_fmt_spread(r_torch_sgd)}" if has_torch else "")
              + (f"; the linearised step over the whole batch (microbatch=None) {_s(times['lin_whole'])}, "
                 f"microbatched / whole {_fmt_spread(_ratio(per_round['lin'], per_round['lin_whole']))}" if mb else "")
              + f"; XLA FLOPs linearised {flops['lin'] / 1e9:.2f} G (lowered: {flops['lin_lowered'] / 1e9:.2f} G), "
              f"SGD {flops['flax_sgd'] / 1e9:.2f} G")

    # 2. iterlin.train end to end vs the host-fed loop
    if "2" in sec:
        host = make_host_loop(flax_model, opt, x_np, y_np, B, n_sub)
        with jax.default_device(dev):
            a1, h1 = _timed(train, T, **ends_sub), _timed(host, T)  # first calls: compiling
            e2e = _interleaved({"a": lambda: train(T, **ends_sub), "h": lambda: host(T),
                                "a2": lambda: train(2 * T, **ends_sub), "h2": lambda: host(2 * T)}, rounds, E2E_REPS)
        a2, h2 = statistics.median(e2e["a"]), statistics.median(e2e["h"])
        steady_a = statistics.median([b - a for a, b in zip(e2e["a"], e2e["a2"])])
        steady_h = statistics.median([b - a for a, b in zip(e2e["h"], e2e["h2"])])
        r2 = _ratio(e2e["a"], e2e["h"])
        r2_steady = _spread((b - a) / (d - c) for a, b, c, d in zip(e2e["a"], e2e["a2"], e2e["h"], e2e["h2"]))
        over_a, over_h = a2 - steady_a, h2 - steady_h  # per-call costs: tracing, transfers, the two evaluations
        noisy = " (negative: noise, e.g. the machine's load changed between calls)" if min(over_a, over_h) < 0 else ""
        print(f"[2] {T} steps, evaluation at steps 0 and {T} on {n_sub} images: iterlin.train 1st call {_s(a1)}, "
              f"later calls {_s(a2)} ({T * B / a2:.0f} img/s); host-fed Flax/Optax loop 1st {_s(h1)}, later {_s(h2)} "
              f"({T * B / h2:.0f} img/s); ratio (later calls, {rounds} interleaved rounds) {_fmt_spread(r2)}")
        print(f"    steady state, T({2 * T}) − T({T}): iterlin.train {_s(steady_a)}, host loop {_s(steady_h)}, "
              f"ratio {_fmt_spread(r2_steady)}; per-call overhead (later call − steady) iterlin {_s(over_a)}, "
              f"host {_s(over_h)}{noisy}")

    # 3. the sweep per run vs one run, timed alternately
    if "3" in sec:
        R, T3 = args.runs, args.sweep_steps
        stacked = tree_stack([make_model("cnn", jax.random.PRNGKey(i)).params for i in range(R)])

        def sweep(steps=T3, **kw):
            return iterlin.train_sweep(model.apply_fn, stacked, (x_np, y_np), K=[K] * R, steps=steps, optimizer=opt,
                                       batch_size=B, devices=[dev], microbatch=mb, **kw, **ends_sub)[0]

        singles = [tree_index(stacked, i) for i in range(R)]

        def one_by_one():
            return [iterlin.train(model.apply_fn, p, (x_np, y_np), steps=T3, **common, **ends_sub)[0] for p in singles]

        n_params = tree_size(singles[0])
        # fit's rule, one device
        default_route = "stepped" if on_cpu and n_params >= STEP_RUNS_MIN_PARAMS else "vmapped"
        s1 = _timed(sweep)
        _timed(train, T3, **ends_sub)  # compiles T3's program if T3 != T
        r3_times = _interleaved({"sweep": sweep, "one": one_by_one}, rounds, E2E_REPS, warm=False)
        s2, one = statistics.median(r3_times["sweep"]), statistics.median(r3_times["one"]) / R
        r3 = _ratio(r3_times["sweep"], r3_times["one"])
        print(f"[3] {R}-run sweep (train_sweep's defaults: {default_route}, P = {n_params:,}), {T3} steps: "
              f"1st call {_s(s1)}, 2nd {_s(s2)} ({_s(s2 / R)} per run); its {R} runs one after another (train), "
              f"per run {_s(one)}; per run / one run {_fmt_spread(r3)} ({rounds} interleaved rounds)")
        # steady state per run and step: T(2·T3) − T(T3) of each sweep route (the least of alternated
        # calls; R runs a step), over one run's steady state of [2] (T(2·T) − T(T): T3 steps of one run
        # are too few to time)
        routes = {"vmapped": functools.partial(sweep, vectorise=True),
                  "stepped": functools.partial(sweep, vectorise=False)}
        for fn in routes.values():
            _timed(fn)  # compiles the route's programs if the default did not
        spans = {name: [] for name in routes}
        for _ in range(rounds):
            for name, fn in routes.items():
                spans[name].append((_timed(fn, T3), _timed(fn, 2 * T3)))
        per_round_step = {name: [(b - a) / (T3 * R) for a, b in v] for name, v in spans.items()}
        per_run_step = {name: statistics.median(v) for name, v in per_round_step.items()}
        per_run_step["one run"] = steady_a / T
        r3b, r3c = (_spread(v / per_run_step["one run"] for v in per_round_step[name])
                    for name in ("vmapped", "stepped"))
        noisy3 = " (not positive: noise)" if min(per_run_step.values()) <= 0 else ""
        print(f"    steady state per run and step, T({2 * T3}) − T({T3}): vmapped sweep (vectorise=True) "
              f"{_s(per_run_step['vmapped'])}, "
              f"the sweep stepping its runs one after another (vectorise=False) {_s(per_run_step['stepped'])}; one run "
              f"(T({2 * T}) − T({T}) of [2]) {_s(per_run_step['one run'])}; over one run "
              f"{_fmt_spread(r3b)} and {_fmt_spread(r3c)}{noisy3}")

    # 4. the linearised step's share of the ceiling
    if "4" in sec:
        flops_img = flops["lin"] / B
        ips = B / t_lin
        mm = flops["matmul"] / times["matmul"]
        r4_mm = _spread(flops["matmul"] / t for t in per_round["matmul"])  # per round, for the measured ceiling
        peak, peak_note = table_peak(dev)
        theo, theo_note = cpu_theoretical_flops() if on_cpu else (None, "")
        if peak is None:
            ceiling, ceiling_note = mm, f"measured {n_mm}×{n_mm} float32 matmul, {mm / 1e9:.1f} GFLOP/s ({peak_note})"
        else:
            ceiling, ceiling_note = peak, peak_note
        print(f"[4] linearised training: {ips:.0f} img/s (batch / step time of [1]), {flops_img / 1e6:.1f} MFLOP/img "
              f"(XLA cost analysis of the step with lax.conv / batch)")
        r4 = _spread(flops["lin"] / tl / (flops["matmul"] / tm if peak is None else ceiling)
                     for tl, tm in zip(per_round["lin"], per_round["matmul"]))
        print(f"    ceiling: {ceiling_note} -> {ceiling / flops_img:.0f} img/s; fraction {_fmt_spread(r4)} "
              f"(round by round); measured matmul {r4_mm[0] / 1e9:.1f} "
              f"[{r4_mm[1] / 1e9:.1f}–{r4_mm[2] / 1e9:.1f}] GFLOP/s")
        print(f"    measured {n_mm}×{n_mm} matmul {mm / 1e9:.1f} GFLOP/s (interleaved with the steps of [1])"
              + (f" ({mm / peak:.2f} of the table peak)" if peak else "")
              + (f"; theoretical {theo / 1e9:.0f} GFLOP/s = {theo_note}" if theo else ""))

    # 5. evaluation's share
    if "5" in sec:
        # each pair side by side (so a change of the machine's load between them weighs least)
        every, n_def = default_evaluation(T, B, len(x_np))
        n_pts = -(-T // every) + 1  # 0, every, 2·every, … below T, and T
        variants = {"bare": {"eval_steps": [], "eval_train_size": 1}, "default": {},
                    "old": {"eval_every": max(1, T // 20)}}
        firsts = {name: _timed(train, T, **kw) for name, kw in variants.items()}
        r5_times = _interleaved({name: functools.partial(train, T, **kw) for name, kw in variants.items()}, rounds,
                                E2E_REPS, warm=False)
        c1, d1, b1 = firsts["bare"], firsts["default"], firsts["old"]
        c2, d2, b2 = (statistics.median(r5_times[name]) for name in ("bare", "default", "old"))
        r5 = _spread((d - c) / d for c, d in zip(r5_times["bare"], r5_times["default"]))
        r5b = _spread((b - c) / b for c, b in zip(r5_times["bare"], r5_times["old"]))
        n_old = -(-T // max(1, T // 20)) + 1
        share, share_old = r5[0], r5b[0]
        print(f"[5] default evaluation ({n_pts} points on {n_def} of {len(x_np)} training images) vs bare "
              f"(one image at "
              f"the ends): {_s(d2)} vs {_s(c2)} (1st calls {_s(d1)}, {_s(c1)}), share {_fmt_spread(r5)}")
        print(f"    earlier default ({n_old} points on all {len(x_np)} images): {_s(b2)} (1st call {_s(b1)}), "
              f"share {_fmt_spread(r5b)}")

    # 6. a user's own Flax CNN (not make_model) with iterlin.train's defaults, against its own plain loop
    if "6" in sec:
        r6 = user_model_ratio(x_np, y_np, dev, args.user_batch, args.user_steps, n_sub, rounds,
                              with_xla=not args.quick)

    rows = []
    if "1" in sec:
        rows += [
            ("1", "linearised step / plain Flax SGD step", r_lin, _s(t_lin), _s(t_sgd),
             f"<= 0.85 (XLA FLOP ratio {flops['lin'] / flops['flax_sgd']:.2f})"),
            ("1b", "iterlin K = 1 step / plain Flax SGD step", r_k1, _s(t_k1), _s(t_sgd), "none"),
        ]
        if mb:
            rows += [("1e", "linearised, microbatched / whole batch", _ratio(per_round["lin"], per_round["lin_whole"]),
                      _s(t_lin), _s(times["lin_whole"]), "none")]
        if has_torch:
            rows += [
                ("1c", "linearised step / PyTorch linearised", r_torch, _s(t_lin), _s(times["torch_lin"]),
                 f"<= 1 in the median and in >= 4 of 5 rounds ({torch_wins} of {args.rounds} here)"),
                ("1d", "PyTorch SGD step / plain Flax SGD step", r_torch_sgd, _s(times["torch_sgd"]), _s(t_sgd),
                 "none"),
            ]
    if "2" in sec:
        rows += [("2", "iterlin.train later call / host-fed loop", r2, _s(a2), _s(h2),
                  f"<= 1.5 on CPU, < 1 on a GPU (1st calls {_s(a1)} / {_s(h1)})")]
    if "3" in sec:
        rows += [
            ("3", f"{R}-run sweep ({default_route}) / its runs one by one, {T3} steps", r3, _s(s2 / R), _s(one),
             "<= 1.0"),
            ("3b", "vmapped sweep / one run, per step", r3b, _s(per_run_step["vmapped"]), _s(per_run_step["one run"]),
             "none (vectorise=True; steady state, per run and step)"),
            ("3c", "stepped sweep / one run, per step", r3c, _s(per_run_step["stepped"]), _s(per_run_step["one run"]),
             "none (vectorise=False)"),
        ]
    if "4" in sec and "1" in sec:
        rows += [("4", "linearised img/s / ceiling img/s", r4, f"{ips:.0f} img/s", f"{ceiling / flops_img:.0f} img/s",
                  ">= 0.35 (ceiling: " + ("table peak)" if peak else "measured matmul, round by round)"))]
    if "5" in sec:
        rows += [
            ("5", "eval share, default evaluation", r5, f"{_s(d2)} - {_s(c2)}", _s(d2),
             f"<= 0.1 ({n_pts} points, {n_def} training images)"),
            ("5b", "eval share, 21 points on every image", r5b, f"{_s(b2)} - {_s(c2)}", _s(b2),
             f"none (the default before; {n_old} points, {len(x_np)} images)"),
        ]
    if "6" in sec:
        rows += [
            ("6", "user's Flax CNN: iterlin.train / own loop", r6["auto"], _s(r6["times"]["auto"]),
             _s(r6["times"]["plain"]), f"<= 1.3 (defaults: conv='auto'; batch {args.user_batch}, "
             f"{args.user_steps} steps, K = inf)"),
        ]
        if r6["xla"] is not None:
            rows += [("6b", "the same, conv='xla' (lax.conv, dispatched)", r6["xla"], _s(r6["times"]["xla"]),
                      _s(r6["times"]["plain"]), "none (the network as written: fit's loop rule steps it one dispatch "
                      "each)")]
    print()
    print(f"summary ({dev.device_kind}, {dev.platform}, jax {jax.__version__}; batch {B}, {T} steps, K = {K}; "
          f"convolutions {conv!r}; microbatch {mb})")
    if not has_torch:
        print(f"(ratios 1c and 1d not measured: {torch_note})")
    print(f"{'':9}{'':44}   {'median':>7}  {'range over rounds':>17}  {'numerator':>19}  {'denominator':>12}  "
          "target / note")
    for n, name, (med, lo, hi), num, den, note in rows:
        print(f"ratio {n:<3}{name:<44} = {med:7.3f}  {f'[{lo:.3f}, {hi:.3f}]':>17}  {num:>19}  {den:>12}  {note}")


if __name__ == "__main__":
    main()
