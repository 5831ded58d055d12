"""The empirical NTK over training, K = 1 against a large K (no figure in the paper; Sec. 1 and 5).

The empirical NTK Θ̂_θ(X_p, X_p) = ϕϕᵀ (Eq. 2) on ``n_probe`` fixed training images
(:func:`iterlin.analysis.ntk.kernel_tracker`): the kernel distance of the network's kernel from its initial
value, its velocity, and the change of the linear model's kernel Θ̂_{θ_s} made by the
re-linearisations between evaluation points (evaluated at every re-linearisation of the large K,
:func:`iterlin.analysis.ntk.relinearisation_steps`, so each is seen alone), for every seed. Between
re-linearisations θ_s, hence the linear model's kernel, does not change at all: that distance is
exactly 0 (a consistency check, not evidence).

Config keys: ``K`` (list: 1 and the large period), ``lr``, ``steps``, ``batch_size``,
``n_train``, ``n_test``, ``n_probe`` (the first n_probe training images; kernels are
(10·n_probe)²; None: every training image loaded, at most :data:`PROBE_CAP`; the kernels held
must fit :data:`KERNEL_BYTES`, :func:`probe_size`), ``seed``, ``n_seeds``, ``n_evals``,
``n_eval_train``.

Results: :class:`Results`; d is the kernel distance of Fort et al. (:func:`iterlin.analysis.ntk.kernel_distance`).

Conventions: :mod:`iterlin.experiments._common` (the paper's CNN, softmax cross-entropy on the
linearised logits, plain SGD at ``lr`` for every K; the runs of one seed start from one
initialisation and see the same batches). A run that diverges (a NaN or huge loss) is frozen at its
last finite state and recorded; its trackers keep reporting the frozen state. Checkpoints resume:
the trackers take θ_0 explicitly.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping, NamedTuple

import matplotlib.pyplot as plt
import numpy as np

from ..repro.claims import Claim, beyond, fmt_K, only_k1_rows, verdict
from ..repro.config import Images, Period, Rate, Steps, TestImages
from ..data import Dataset
from ..analysis.ntk import kernel_tracker, relinearisation_steps
from ..repro.plotting import legend, mark_steps, panels, plot_sweep
from ..repro.stats import num, runs_of, seed_interval
from . import protocol
from ._common import Experiment, Seeds, Sweep, checkpoint_path, cnn_sweep, eval_points, load_data, seeds

__all__ = [
    "Results", "SCALES", "EXPERIMENT", "PROBE_CAP", "KERNEL_BYTES", "load", "compute", "claims", "kernel_moves", "kernel_fixed", "kernel_each_moves", "eval_steps",
    "probe_size", "kernel_bytes", "KernelChanges", "relin_kernel_changes", "relin_steps", "relin_table", "plot",
]

#: ``n_probe=None``: every training image loaded, but at most this many (kernels 1000 × 1000).
PROBE_CAP = 100
#: The most memory the kernel tracker's kernels may take (:func:`kernel_bytes`): 4 GiB.
KERNEL_BYTES = 4 * 2**30


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Seeds):
    """ntk's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "ntk"

    K: tuple[Period, ...]
    lr: Rate
    steps: Steps
    batch_size: Images | None
    n_train: Images | None
    n_test: TestImages | None
    n_probe: Images | None


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/ntk.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 6], lr=0.05, steps=24, batch_size=32, n_train=256, n_test=200, n_probe=8, seed=0,
        n_seeds=1, n_evals=8, n_eval_train=None,
    ),
    "cpu": dict(
        K=[1, 30], lr=0.01, steps=180, batch_size=128, n_train=None, n_test=None, n_probe=20, seed=0,
        n_seeds=3, n_evals=12, n_eval_train=1000,
    ),
    "gpu": dict(
        K=[1, 2000], lr=1e-2, steps=20_000, batch_size=256, n_train=None, n_test=None, n_probe=None,
        seed=0, n_seeds=3, n_evals=20, n_eval_train=5000,
    ),
    "paper": dict(  # as our Fig. 3 paper settings (K = 5e6); probe set and evaluations ours
        K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, n_train=50_000, n_test=10_000,
        n_probe=100, seed=0, n_seeds=3, n_evals=30, n_eval_train=10_000,
    ),
}


class Results(NamedTuple):
    """ntk's results (:func:`compute`)."""

    #: the sweep history (every seed × K, seed-major: R = S·len(K) runs), evaluated at
    #: :func:`eval_steps`, with (R, E) arrays ``kernel_distance_init`` (d(Θ_t, Θ_0) of the network's
    #: kernel), ``kernel_velocity`` (d(Θ_t, Θ_prev)/Δt; NaN at step 0) and ``kernel_distance_relin``
    #: (the change of the linear model's kernel Θ_s since the previous evaluation point; exactly 0
    #: when θ_s did not change)
    runs: Sweep
    n_probe: np.ndarray  #: () int, the probe images (the first training images) the kernels are on
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


def kernel_bytes(n_probe: int, runs: int, n_outputs: int = 10) -> int:
    """Memory of the kernels :func:`iterlin.analysis.ntk.kernel_tracker` holds for ``runs`` runs: per run the
    initial, current and linear model's kernels and the two being computed, 5 float32 matrices of
    (n_outputs · n_probe)² numbers (the Jacobians are chunked apart, :mod:`iterlin.analysis.jacobian`)."""
    return 5 * int(runs) * (int(n_outputs) * int(n_probe)) ** 2 * 4


def probe_size(config: Config, n_train: int) -> int:
    """The number of probe images (the first training images) of ``config``.

    ``n_probe=None``: every one of the ``n_train`` images loaded, at most :data:`PROBE_CAP`; an
    explicit ``n_probe`` must be ≤ ``n_train``, and the kernels of the config's runs
    (n_seeds · len(K), :func:`kernel_bytes`) must fit in :data:`KERNEL_BYTES`. Raises ValueError
    naming n_probe, the value and the largest allowed.
    """
    n_train = int(n_train)
    n = config.n_probe
    if n is None:
        n = min(n_train, PROBE_CAP)
    elif int(n) > n_train:
        raise ValueError(
            f"n_probe={n} is not allowed: n_probe must be <= n_train={n_train} (the training images loaded), "
            f"or None for all of them up to {PROBE_CAP}"
        )
    runs = len(seeds(config)) * len(config.K)
    if kernel_bytes(n, runs) > KERNEL_BYTES:
        largest = int(math.isqrt(KERNEL_BYTES // (5 * runs * 4))) // 10
        raise ValueError(
            f"n_probe={n} is not allowed: the kernel tracker would hold {kernel_bytes(n, runs) / 2**30:.1f} GiB of "
            f"(10 n_probe)^2 kernels for {runs} runs; at most {KERNEL_BYTES // 2**30} GiB, so n_probe <= {largest} "
            "(or fewer seeds)"
        )
    return int(n)


def load(config: Config) -> Dataset:
    """CIFAR-10 as :func:`~iterlin.experiments._common.load_data`, ``n_probe`` checked against it
    and against the memory bound (:func:`probe_size`)."""
    data = load_data(config)
    probe_size(config, data.x_train.shape[0])
    return data


def eval_steps(config: Config, max_points: int = 50) -> list[int]:
    """``eval_points(steps, n_evals)`` and every re-linearisation of every finite K > 1 (at most
    ``max_points`` per K, :func:`iterlin.analysis.ntk.relinearisation_steps`)."""
    pts = set(eval_points(config.steps, config.n_evals))
    for k in config.K:
        if k > 1 and math.isfinite(k):
            pts |= set(relinearisation_steps(k, config.steps, max_points=max_points))
    return sorted(pts)


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every seed × K in one program, the kernels measured at :func:`eval_steps` (module docstring)."""
    n = probe_size(config, data.x_train.shape[0])
    x_probe = data.x_train[:n]
    runs = cnn_sweep(config, data, callback=lambda f, p0: kernel_tracker(f, x_probe, params0=p0),
                     eval_steps=eval_steps(config), checkpoint=checkpoint_path(checkpoint_dir, "runs"),
                     progress=progress)
    return Results(runs=runs, n_probe=np.asarray(n))


class KernelChanges(NamedTuple):
    """One run's evaluation points after step 0 (:func:`relin_kernel_changes`): (E − 1,) each."""

    step: np.ndarray  #: the step
    n_relin: np.ndarray  #: the re-linearisations made so far
    relinearised: np.ndarray  #: bool, whether θ_s changed since the previous point (n_relin grew)
    distance: np.ndarray  #: d(Θ_s, Θ_s,prev) of the linear model's kernel (``kernel_distance_relin``)


def relin_kernel_changes(history: Mapping, run: int) -> KernelChanges:
    """For run ``run``: which evaluation intervals contain a re-linearisation, and the kernel change."""
    steps = np.asarray(history["step"])[1:]
    nr = np.asarray(history["n_relin"])[run]
    d = np.asarray(history["kernel_distance_relin"], np.float64)[run, 1:]
    return KernelChanges(steps, nr[1:], np.diff(nr) > 0, d)


def _large_runs(h):
    return runs_of(h, float(np.asarray(h["K"], np.float64).max()))


@protocol.rule("ntk.moves", needs=("margin",), metrics=("kernel_distance_init",))
def kernel_moves(row, results: Results) -> tuple[str, str, str]:
    """The kernel moves under SGD: d(Θ_T, Θ_0) of K = 1 above the row's margin, a 95 % t interval over seeds."""
    h = results.runs
    d_init = np.asarray(h["kernel_distance_init"], np.float64)[:, -1]
    d1, dj = d_init[runs_of(h, 1)], d_init[_large_runs(h)]
    m, se, lo, hi = seed_interval(d1)
    spread = (f", 95 % t interval [{num(lo, 3)}, {num(hi, 3)}] ({d1.size} seeds)" if math.isfinite(se)
              else " (1 seed)")
    return (f"d(Θ_T, Θ_0): K=1 {num(m, 3)}{spread}; K={fmt_K(np.max(h['K']))} network {num(dj.mean(), 3)}",
            beyond(d1, row.margin, above=True),
            f"d > {num(row.margin)} (kernel distance of Fort et al., in [0, 1]): yes when the 95 % t interval over "
            f"seeds lies above {num(row.margin)}, no when wholly at or below it, else undecided (also with one seed: "
            "no spread to estimate)")


@protocol.rule("ntk.fixed", metrics=("kernel_distance_relin",))
def kernel_fixed(row, results: Results) -> tuple[str, str, str]:
    """Check: the linear model's kernel does not move between re-linearisations."""
    large = _large_runs(results.runs)
    changes = [relin_kernel_changes(results.runs, j) for j in large]
    still = np.concatenate([c.distance[~c.relinearised] for c in changes])
    return (f"K={fmt_K(np.max(results.runs['K']))}: max d(Θ_s, Θ_s,prev) = "
            f"{num(still.max(), 6) if still.size else 'n/a'} over {still.size} intervals without re-linearisation "
            f"({len(large)} seed{'s' if len(large) != 1 else ''})",
            verdict(bool(np.all(still == 0.0)), applicable=still.size > 0),
            "exactly 0 at every such interval (θ_s is not changed between re-linearisations)")


@protocol.rule("ntk.each_moves", metrics=("kernel_distance_relin",))
def kernel_each_moves(row, results: Results) -> tuple[str, str, str]:
    """Check: every interval holding a re-linearisation moves the linear model's kernel."""
    Kj = fmt_K(np.max(results.runs["K"]))
    moved = np.concatenate([c.distance[c.relinearised]
                            for c in (relin_kernel_changes(results.runs, j) for j in _large_runs(results.runs))])
    return ((f"K={Kj}: {moved.size} intervals with re-linearisations, d from {num(moved.min(), 4)} "
             f"to {num(moved.max(), 4)}") if moved.size else f"K={Kj}: no re-linearisation",
            verdict(bool(np.all(moved > 0)), applicable=moved.size > 0),
            "d > 0 at every interval containing a re-linearisation (θ_s moved to θ_t)")


def claims(results: Results) -> list[Claim]:
    """The rows of ntk in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): the kernel moves
    under SGD (:func:`kernel_moves`); divergence; checks: the linear model's kernel is exactly fixed
    between re-linearisations and moves at each one."""
    rows = only_k1_rows("ntk", results.runs)
    return rows if rows is not None else protocol.claims("ntk", results)


EXPERIMENT = Experiment("ntk", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws and prints: pure functions of the results (nothing here is part of ``compute``).


def _first_seed_largest(history: Mapping) -> tuple[int, int]:
    """The first seed's K = 1 run and largest-K run (every seed shares the schedule of re-linearisations)."""
    K = np.asarray(history["K"], np.float64)
    return int(runs_of(history, 1)[0]), int(runs_of(history, K.max())[0])


def relin_steps(results: Results) -> np.ndarray:
    """The evaluation steps that end an interval containing a re-linearisation of the largest-K runs
    (the dotted verticals); empty when the largest K is 1 (only K = 1 ran)."""
    h = results.runs
    i1, j = _first_seed_largest(h)
    if j == i1:
        return np.zeros(0, np.asarray(h["step"]).dtype)
    c = relin_kernel_changes(h, j)
    return c.step[c.relinearised]


def relin_table(results: Results) -> str:
    """:func:`relin_kernel_changes` of the largest-K runs as a table: step, re-linearisations so far,
    whether θ_s changed since the previous evaluation point, and d(Θ_s, Θ_s,prev) of each seed."""
    h = results.runs
    large = runs_of(h, np.asarray(h["K"], np.float64).max())
    cs = [relin_kernel_changes(h, j) for j in large]
    seed = np.asarray(h["seed"] if "seed" in h else h.get("seed_index", np.zeros(len(h["K"]), int)))
    heads = [f"seed {int(seed[j])}" for j in large]
    lines = [f"K = {fmt_K(h['K'][large[0]])}; d(Θ_s, Θ_s,prev) by seed",
             f"{'step':>8}  {'re-linearisations so far':>24}  {'re-linearised since previous':>28}  "
             + "  ".join(f"{x:>9}" for x in heads)]
    c = cs[0]
    for e, (t, n, r) in enumerate(zip(c.step, c.n_relin, c.relinearised)):
        lines.append(f"{int(t):>8}  {int(n):>24}  {'yes' if r else 'no':>28}  "
                     + "  ".join(f"{float(x.distance[e]):>9.4f}" for x in cs))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Left: the network's kernel, distance from its value at initialisation. Centre: its velocity
    (none at step 0). Right: the change of the linear model's kernel Θ̂_{θ_s} since the previous
    evaluation point; dotted verticals mark the large K's re-linearisations. Lines: the mean over
    seeds, bands ± one standard error; a cross marks a diverged run. Then the linear model's kernel
    at every evaluation point of the large-K runs (relin_table)."""
    h = results.runs
    later = {**h, "step": h["step"][1:], "kernel_distance_relin": h["kernel_distance_relin"][:, 1:],
             "kernel_velocity": h["kernel_velocity"][:, 1:]}  # step 0 has no previous point
    fig, (a, b, c) = panels(3, panel_size=(5, 4.2),
                            suptitle=f"empirical NTK of the CNN on {int(results.n_probe)} CIFAR-10 images "
                                     f"({results.config.scale} scale)")
    plot_sweep(a, h, "kernel_distance_init", scale=1, diverged_label=None)
    plot_sweep(b, later, "kernel_velocity", scale=1, diverged_label=None)
    plot_sweep(c, later, "kernel_distance_relin", scale=1, diverged_label=None)
    mark_steps(c, relin_steps(results))  # the large K's re-linearisations
    a.set(xlabel="step", ylabel="d(Θ_t, Θ_0)", title="network kernel: distance from initialisation")
    b.set(xlabel="step", ylabel="d(Θ_t, Θ_prev) per step", title="network kernel: velocity")
    c.set(xlabel="step", ylabel="d(Θ_s, Θ_s,prev)", title="linear model's kernel: change since previous point")
    for ax in (a, b, c):
        legend(ax)
    plt.show()
    print(relin_table(results))
