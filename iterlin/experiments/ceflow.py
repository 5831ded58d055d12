"""The paper's regime for the paper's loss: iterated linearised gradient flow under cross-entropy on CIFAR-10.

Sec. 3 of the paper: with a small rate η, each block of K steps of iterative linearisation is
gradient flow on the linear model at θ_s for the time τ = ηK. For the softmax cross-entropy on the
linearised logits (Sec. 4: the softmax is not linearised) that flow is solved in function space,
in N·C dimensions (:mod:`iterlin.solvers.flow`):

    dF/dτ = −Θ_s ∇_F L(F),   F(0) = f(θ_s, X),   θ_τ = θ_s − J_sᵀ c(τ),  c(τ) = ∫₀^τ ∇_F L(F) dτ',

with L the MEAN cross-entropy over the N training images, as :func:`iterlin.training.train`
normalises it (rate η on the mean loss: τ is the paper's ηK, so the paper's K = 5·10⁶ at
η = 10⁻⁴ is τ = 500). Here the paper's CNN (``iterlin.models.make_model("cnn", ...)``, float32)
is trained on N CIFAR-10 images, full batch, by R re-linearisations at a fixed total time T
(:func:`iterlin.solvers.flow.iterated_flow`, τ = T/R each).

Runs (each seed's θ₀ shared by all its runs; :func:`run_specs`):

* **the R grid**: every R of ``relins`` at N = ``n_grid``, time T = ``total_time`` (R = 1 is one
  flow of τ = T: the paper's ηK = 500 at T = 500). The largest R (smallest τ) stands for gradient
  flow on the network; a literal full-batch GD run (``iterlin.train`` with K = 1) is compared with
  a small-τ flow over a shorter time in the consistency check (:func:`consistency_check`);
* **K = ∞**: the linear model at θ₀ trained for T, which is the R = 1 run's linear model
  (``lin_*`` of the R = 1 rows; the R = 1 rows' ``net_*`` are the network at θ₀ + its step);
* **solving each linearisation further** (Fig. 8): R = ``n_relin`` at N = ``n_grid`` with each
  linearisation flowed for the longer times τ of ``long_taus`` (total time R·τ);
* **data scaling** (Fig. 5): R = 1 (K = ∞) and R = ``n_relin`` at every N of ``n_train`` (a
  doubling grid), time T.

Every run's final network f(θ_R) and its last linear model f_lin_s(θ_R) are scored on every image
of the held-out pool (:func:`iterlin.data.load_heldout` of the largest N: the installed test images
first, then the training-batch images no run trains on; ``n_heldout`` takes its first ones, None all),
per image (``net_correct``, ``lin_correct``), so that paired statistics over seeds × images can use
them (:func:`iterlin.repro.stats.difference`, ``model="two_way"``).

A run interrupted resumes after its last finished re-linearisation (one checkpoint per run,
:func:`iterlin.solvers.flow.iterated_flow`'s, under ``checkpoint_dir``); a finished run also
leaves its scores there (``<run>.scores.npz``), which a rerun reads instead of scoring again.

Config keys: ``n_train`` (list, doubling), ``n_grid`` (the N of the R grid and the Fig. 8 runs, one
of ``n_train``; None: the smallest), ``total_time`` (T), ``relins`` (list of R), ``n_relin`` (the R
of the scaling and Fig. 8 runs), ``long_taus`` (list of τ > T/n_relin), ``n_heldout`` (None: the
whole pool), ``seed``, ``n_seeds``, ``n_check``, ``check_time``, ``check_relins``, ``gd_steps`` (the
consistency check), ``rtol``, ``atol`` (the ODE's tolerances, :class:`iterlin.solvers.flow.FlowConfig`).

Results: :class:`Results`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import ClassVar, NamedTuple

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from ..checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ..columns import Record
from ..data import Dataset, load_cifar10, load_heldout
from ..models import make_model
from ..precision import full_precision
from ..repro.claims import NA, UNDECIDED, Claim, exceeds, on_par, verdict
from ..repro.config import (
    ExperimentConfig, Images, ImageSubset, ImagesOrNone, Positive, Rate, Relins, RunCount, Seed, Steps, resolve,
)
from ..repro.plotting import band, legend, panels
from ..repro.stats import Difference, difference, num, pct, runs_where
from ..solvers.flow import FlowConfig, classified, iterated_flow
from ..training import train
from . import protocol
from ._common import Experiment, checkpoint_path, seed_keys

__all__ = ["Config", "Data", "Runs", "Check", "Results", "Spec", "get_config", "SCALES", "EXPERIMENT", "load",
           "compute", "claims", "run_specs", "grid_size", "consistency_check", "select", "by_R", "plot",
           "PAPER"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(ExperimentConfig):
    """ceflow's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks
    each, :func:`load` the relations between them)."""

    experiment: ClassVar[str] = "ceflow"

    n_train: tuple[Images, ...]
    n_grid: ImagesOrNone | None
    total_time: Positive
    relins: tuple[Relins, ...]
    n_relin: Relins
    long_taus: tuple[Rate, ...]  # times τ (Rate's check: finite numbers > 0, sorted)
    n_heldout: ImagesOrNone | None
    seed: Seed
    n_seeds: RunCount
    n_check: ImageSubset
    check_time: Positive
    check_relins: Relins
    gd_steps: Steps
    rtol: Positive
    atol: Positive


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/ceflow.py, "What each scale runs"). Each is a difference from _BASE.
_BASE = dict(n_train=[32, 64, 128], n_grid=64, total_time=500.0, relins=[1, 2, 4, 8, 16, 32], n_relin=4,
             long_taus=[500.0, 2000.0], n_heldout=None, seed=0, n_seeds=2, n_check=32, check_time=0.5,
             check_relins=50, gd_steps=50, rtol=1e-6, atol=1e-8)
SCALES = {
    "smoke": dict(_BASE, n_train=[8, 16], n_grid=8, relins=[1, 2, 4], n_relin=2, long_taus=[1000.0], n_heldout=200,
                  n_seeds=1, n_check=8, check_relins=20, gd_steps=20),
    "cpu": dict(_BASE),
    "gpu": dict(_BASE, n_train=[250, 500, 1000], n_grid=250, relins=[1, 2, 4, 8, 16, 32, 64, 128, 256], n_relin=8,
                long_taus=[250.0, 500.0, 2000.0], n_seeds=3, n_check=64, gd_steps=2000),
    "paper": dict(_BASE, n_train=[250, 500, 1000, 2000], n_grid=250, relins=[1, 2, 4, 8, 16, 32, 64, 128, 256],
                  n_relin=8, long_taus=[250.0, 500.0, 2000.0], n_seeds=3, n_check=64, gd_steps=2000),
}

#: The paper's numbers drawn on the figure: Fig. 3's test accuracies (its regime: 50,000 images,
#: mini-batch SGD with augmentation, K = 1 and K = 5·10⁶).
PAPER = {"fig3_K1": 0.823, "fig3_K5e6": 0.814}


def get_config(scale: str = "smoke", **overrides) -> Config:
    """The config at ``scale`` (:data:`SCALES`) with ``overrides`` applied (None keeps the default)."""
    return resolve(Config, SCALES, scale, overrides)


class Data(NamedTuple):
    """What :func:`load` gives :func:`compute`.

    images: ``x_train``/``y_train`` the largest N's training images (each smaller N takes the first
    ones); ``x_test``/``y_test`` the held-out pool scored per image (its test images first, then its
    unused training-batch images). pool: the pool's index (:class:`iterlin.data.HeldOut`) as arrays,
    ``x_train`` its ``test_index`` (positions in ``test_batch``) and ``y_train`` its ``train_index``
    (official training indices), in the order of ``images``' held-out images; ``x_test``/``y_test`` empty.
    """

    images: Dataset
    pool: Dataset


def grid_size(config: Config) -> int:
    """N of the R grid and the Fig. 8 runs: ``n_grid``, one of ``n_train`` (None: the smallest)."""
    sizes = sorted(config.n_train)
    if config.n_grid is None:
        return sizes[0]
    if config.n_grid not in sizes:
        raise ValueError(f"n_grid={config.n_grid!r} is not allowed: n_grid must be one of n_train={sizes}, or None "
                         "(the smallest)")
    return int(config.n_grid)


def _check(config: Config) -> None:
    """The relations between knobs that their types do not check (ValueError naming the knob)."""
    grid_size(config)
    tau = config.total_time / config.n_relin
    short = [t for t in config.long_taus if not t > tau]
    if short:
        raise ValueError(f"long_taus={list(config.long_taus)!r} is not allowed: every τ of long_taus must exceed "
                         f"total_time/n_relin = {tau:g} (the runs that solve each linearisation further)")
    if config.n_check > max(config.n_train):
        raise ValueError(f"n_check={config.n_check} is not allowed: n_check must be <= max(n_train)="
                         f"{max(config.n_train)}")
    if not 1e-13 <= config.rtol < 1:
        raise ValueError(f"rtol={config.rtol!r} is not allowed: rtol must be in [1e-13, 1) (the ODE is solved in "
                         "float64)")


def load(config: Config) -> Data:
    """CIFAR-10: the largest N of ``n_train`` training images and their held-out pool
    (:func:`iterlin.data.load_heldout`; its first ``n_heldout``, None: all); the knobs' relations checked."""
    _check(config)
    n_max = max(config.n_train)
    train = load_cifar10(n_max, 1)
    pool, held = load_heldout(n_max)
    x = np.concatenate([held.x_test, held.x_unused])
    y = np.concatenate([held.y_test, held.y_unused])
    test_index, train_index = pool.test_index, pool.train_index
    m = config.n_heldout
    if m is not None:
        if m > x.shape[0]:
            raise ValueError(f"n_heldout={m} is not allowed: the held-out pool of n_train={n_max} holds {x.shape[0]} "
                             "installed images")
        x, y = x[:m], y[:m]
        test_index, train_index = test_index[:m], train_index[:max(0, m - test_index.size)]
    empty = np.zeros(0, np.int64)
    return Data(Dataset(train.x_train, train.y_train, x, y), Dataset(test_index, train_index, empty, empty))


# ------------------------------------------------------------------------------------------------
# Runs
# ------------------------------------------------------------------------------------------------


class Spec(NamedTuple):
    """One run: R re-linearisations at total time T (τ = T/R each) on the first N images, one seed."""

    R: int
    total_time: float
    n_train: int
    seed: int

    @property
    def tau(self) -> float:
        return self.total_time / self.R

    def key(self) -> str:
        return f"flow_R{self.R}_T{self.total_time:g}_N{self.n_train}_s{self.seed}"


def run_specs(config: Config) -> list[Spec]:
    """Every run of the config, seed-major, each once (module docstring): the R grid, the Fig. 8
    runs, then the scaling runs, smallest N first."""
    T, Rn, n = float(config.total_time), int(config.n_relin), grid_size(config)
    specs = []
    for seed in range(config.seed, config.seed + config.n_seeds):
        specs += [Spec(int(R), T, n, seed) for R in sorted(config.relins)]
        specs += [Spec(Rn, Rn * float(tau), n, seed) for tau in sorted(config.long_taus)]
        for m in sorted(config.n_train):
            specs += [Spec(1, T, int(m), seed), Spec(Rn, T, int(m), seed)]
    return list(dict.fromkeys(specs))


@dataclasses.dataclass(frozen=True, eq=False)
class Runs(Record):
    """One row per run (Q runs, :func:`run_specs`): (Q,) arrays unless said; M held-out images."""

    R: np.ndarray  #: re-linearisations
    total_time: np.ndarray  #: float64, T (ηK units)
    tau: np.ndarray  #: float64, τ = T/R, the flow time of each linearisation
    n_train: np.ndarray  #: N
    seed: np.ndarray
    net_correct: np.ndarray  #: (Q, M) bool: the final network f(θ_R) classifies each held-out image
    lin_correct: np.ndarray  #: (Q, M) bool: the same for its last linear model f_lin_s(θ_R) (R = 1: K = ∞)
    net_heldout_acc: np.ndarray  #: float64, the network on the whole pool
    lin_heldout_acc: np.ndarray
    net_test_acc: np.ndarray  #: float64, the network on the pool's test images only
    lin_test_acc: np.ndarray
    net_train_acc: np.ndarray  #: float64, the final network on its N training images
    lin_train_acc: np.ndarray  #: float64, the last linear model on them
    train_loss: np.ndarray  #: float64, the last linear model's mean cross-entropy on them
    ode_steps: np.ndarray  #: int, the ODE steps of all R solves
    seconds: np.ndarray  #: float64, wall time of the run in this process (NaN: read from its stored scores)


@dataclasses.dataclass(frozen=True, eq=False)
class Check(Record):
    """The consistency check (:func:`consistency_check`), () arrays."""

    n_check: np.ndarray
    time: np.ndarray  #: the time compared (ηK units)
    relins: np.ndarray  #: R of the small-τ flow
    gd_steps: np.ndarray
    lr: np.ndarray  #: η of the literal GD = time / gd_steps
    gd_vs_flow: np.ndarray  #: ‖θ_GD − θ_flow(R)‖ / ‖θ_flow(R) − θ₀‖
    gd_vs_one_flow: np.ndarray  #: the same against one flow of the whole time (R = 1)
    agree: np.ndarray  #: fraction of held-out images where GD's network and the small-τ flow's predict alike
    agree_one: np.ndarray  #: the same for R = 1


class Results(NamedTuple):
    """ceflow's results (:func:`compute`)."""

    runs: Runs
    check: Check
    n_test: np.ndarray  #: () int, the pool's test images (its first ``n_test`` held-out images)
    pool_test_index: np.ndarray  #: (n_test,) int, their positions in test_batch
    pool_train_index: np.ndarray  #: (M − n_test,) int, the official indices of the unused training images
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


class _Scores(NamedTuple):
    """What a finished run keeps (``<run>.scores.npz``)."""

    net_correct: np.ndarray
    lin_correct: np.ndarray
    net_train_acc: np.ndarray
    lin_train_acc: np.ndarray
    train_loss: np.ndarray
    ode_steps: np.ndarray

    @classmethod
    def read(cls, path: Path | None, key: str, m: int) -> "_Scores | None":
        if path is None or not path.exists():
            return None
        z = np.float64(0)
        try:
            scores, meta = load_checkpoint(path, cls(np.zeros(m, bool), np.zeros(m, bool), z, z, z, np.int64(0)))
        except CheckpointError:
            return None
        return cls(*scores) if meta.get("run") == key else None


def _run(spec: Spec, config: Config, images: Dataset, model, checkpoint_dir) -> tuple[_Scores, float]:
    x, y = np.asarray(images.x_train[: spec.n_train]), np.asarray(images.y_train[: spec.n_train])
    flow = FlowConfig(rtol=config.rtol, atol=config.atol)
    t0 = time.perf_counter()
    out = iterated_flow(model.apply_fn, model.params, (x, y), None, total_time=spec.total_time, relins=spec.R,
                        config=flow, checkpoint=checkpoint_path(checkpoint_dir, spec.key()))
    net, lin = classified(model.apply_fn, out.params_s, out.params, images.x_test, images.y_test)
    r = out.rounds
    scores = _Scores(net, lin, np.float64(r.net_train_acc[-1]), np.float64(r.lin_train_acc[-1]),
                     np.float64(r.train_loss[-1]), np.int64(r.num_steps.sum()))
    return scores, time.perf_counter() - t0


def compute(config: Config, data: Data, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every run of :func:`run_specs` and the consistency check (module docstring), every product
    inside the network at full float32 precision (:func:`iterlin.precision.full_precision`)."""
    with full_precision():
        return _compute(config, data, checkpoint_dir, progress)


def _compute(config: Config, data: Data, checkpoint_dir, progress: bool) -> Results:
    images = data.images
    m = int(images.y_test.shape[0])
    ckdir = None if checkpoint_dir is None else Path(checkpoint_dir)
    if ckdir is not None:
        ckdir.mkdir(parents=True, exist_ok=True)
    models, rows = {}, []
    for spec in run_specs(config):
        stored = checkpoint_path(ckdir, spec.key() + ".scores")
        scores, seconds = _Scores.read(stored, spec.key(), m), math.nan
        if scores is None:
            if spec.seed not in models:
                models[spec.seed] = make_model("cnn", seed_keys(spec.seed)[0])
            scores, seconds = _run(spec, config, images, models[spec.seed], ckdir)
            if stored is not None:
                save_checkpoint(stored, scores, {"run": spec.key()})
        if progress:
            print(f"ceflow: {spec.key()} done ({seconds:.0f} s)", flush=True)
        rows.append((spec, scores, seconds))
    n_test = int(data.pool.x_train.shape[0])
    net = np.stack([s.net_correct for _, s, _ in rows])
    lin = np.stack([s.lin_correct for _, s, _ in rows])
    col = lambda f, dtype=np.float64: np.asarray([f(*r) for r in rows], dtype)  # noqa: E731
    runs = Runs(
        R=col(lambda p, s, t: p.R, np.int64), total_time=col(lambda p, s, t: p.total_time),
        tau=col(lambda p, s, t: p.tau), n_train=col(lambda p, s, t: p.n_train, np.int64),
        seed=col(lambda p, s, t: p.seed, np.int64), net_correct=net, lin_correct=lin,
        net_heldout_acc=net.mean(1), lin_heldout_acc=lin.mean(1),
        net_test_acc=net[:, :n_test].mean(1) if n_test else np.full(len(rows), np.nan),
        lin_test_acc=lin[:, :n_test].mean(1) if n_test else np.full(len(rows), np.nan),
        net_train_acc=col(lambda p, s, t: s.net_train_acc), lin_train_acc=col(lambda p, s, t: s.lin_train_acc),
        train_loss=col(lambda p, s, t: s.train_loss), ode_steps=col(lambda p, s, t: s.ode_steps, np.int64),
        seconds=col(lambda p, s, t: t))
    return Results(runs=runs, check=consistency_check(config, images), n_test=np.asarray(n_test),
                   pool_test_index=np.asarray(data.pool.x_train), pool_train_index=np.asarray(data.pool.y_train))


# ------------------------------------------------------------------------------------------------
# The consistency check: small τ against literal full-batch GD on the network
# ------------------------------------------------------------------------------------------------


def _rel(a, b, ref) -> float:
    fa, fb, fr = (np.asarray(ravel_pytree(t)[0], np.float64) for t in (a, b, ref))
    return float(np.linalg.norm(fa - fb) / max(np.linalg.norm(fb - fr), 1e-300))


def consistency_check(config: Config, images: Dataset) -> Check:
    """At N = ``n_check`` from seed ``seed``'s θ₀: ``gd_steps`` literal full-batch GD steps on the
    network (``iterlin.train``, K = 1, mean cross-entropy, rate η = ``check_time``/``gd_steps``)
    against the iterated flow with R = ``check_relins`` over the same time ``check_time`` (τ small:
    gradient flow on the network as τ → 0) and against one flow of that time (R = 1): the relative
    distance of the parameters and the agreement of the networks' predictions on the held-out pool."""
    n, T, R, K = int(config.n_check), float(config.check_time), int(config.check_relins), int(config.gd_steps)
    x, y = np.asarray(images.x_train[:n]), np.asarray(images.y_train[:n])
    model = make_model("cnn", seed_keys(config.seed)[0])
    f, p0 = model.apply_fn, model.params
    lr = T / K
    gd, _ = train(f, p0, (jnp.asarray(x), jnp.asarray(y)), K=1, steps=K, optimizer=optax.sgd(lr), loss="ce",
                  eval_steps=[0, K])
    flow = FlowConfig(rtol=config.rtol, atol=config.atol)
    small = iterated_flow(f, p0, (x, y), None, total_time=T, relins=R, config=flow).params
    one = iterated_flow(f, p0, (x, y), None, total_time=T, relins=1, config=flow).params
    xh, yh = images.x_test, images.y_test
    pred = lambda p: classified(f, p, p, xh, yh, linear=False)[0]  # noqa: E731
    g = pred(gd)
    return Check(n_check=np.asarray(n), time=np.asarray(T), relins=np.asarray(R), gd_steps=np.asarray(K),
                 lr=np.asarray(lr), gd_vs_flow=np.asarray(_rel(gd, small, p0)),
                 gd_vs_one_flow=np.asarray(_rel(gd, one, p0)),
                 agree=np.asarray(np.mean(g == pred(small))), agree_one=np.asarray(np.mean(g == pred(one))))


# ------------------------------------------------------------------------------------------------
# Claims: the rows of ceflow in claims.toml, by this experiment's own rules
# ------------------------------------------------------------------------------------------------


def select(results: Results, **where) -> np.ndarray:
    """The runs matching ``where`` (column = value; floats by ``isclose``), ordered by seed
    (:func:`iterlin.repro.stats.runs_where`)."""
    return runs_where(results.runs, **where)


def _grid(results: Results, n: int | None = None) -> dict[int, np.ndarray]:
    """``{R: runs}`` of the R grid at N = ``n`` (None: ``n_grid``), time T, ascending R, each
    ordered by seed."""
    c = results.config
    n = grid_size(c) if n is None else n
    return {int(R): select(results, R=int(R), n_train=n, total_time=float(c.total_time)) for R in sorted(c.relins)}


def _diff(results: Results, ia, ib, net_a: bool = True, net_b: bool = True) -> Difference:
    """B − A on the whole held-out pool, paired by seed and image (two-way: seeds × images)."""
    runs = results.runs
    ca = runs.net_correct[ia] if net_a else runs.lin_correct[ia]
    cb = runs.net_correct[ib] if net_b else runs.lin_correct[ib]
    return difference(ca.mean(1), cb.mean(1), n_test=ca.shape[1], correct_a=ca, correct_b=cb, model="two_way")


def _fitted(results: Results, idx, threshold: float) -> bool:
    return bool(np.asarray(results.runs.net_train_acc)[np.asarray(idx)].min() >= threshold)


def _fit_note(results: Results, idx, threshold: float) -> str:
    train = np.asarray(results.runs.net_train_acc)[np.asarray(idx)]
    return "" if train.min() >= threshold else (f"; not judged: a compared run ends at {pct(train.min())} train "
                                                f"accuracy, under {pct(threshold, 0)}")


@protocol.rule("ceflow.large_tau", needs=("margin", "value"), metrics=("net_heldout_acc",))
def large_tau(row, results: Results) -> tuple[str, str, str]:
    """Fig. 2 (full batch): the largest τ that re-linearises and fits its training set (the smallest
    R ≥ 2 of the grid whose networks all reach ``row.value`` train accuracy; else the smallest R ≥ 2,
    then n/a) on par with the smallest τ (the largest R) within ``row.margin``."""
    grid = _grid(results)
    Rs = [R for R in grid if R >= 2]
    if len(Rs) < 2:
        return "needs two R ≥ 2 in the grid", NA, "n/a"
    a = grid[Rs[-1]]
    fitted = [R for R in Rs[:-1] if _fitted(results, grid[R], row.value)]
    Rb = fitted[0] if fitted else Rs[0]
    b = grid[Rb]
    d = _diff(results, a, b)
    fits = _fitted(results, np.concatenate([a, b]), row.value)
    runs = results.runs
    return (f"R={Rb} (τ={num(float(runs.tau[b][0]), 3)}) {pct(runs.net_heldout_acc[b].mean())} vs R={Rs[-1]} "
            f"(τ={num(float(runs.tau[a][0]), 3)}) {pct(runs.net_heldout_acc[a].mean())}; {d.describe()}",
            on_par(d, row.margin) if fits else NA,
            f"the largest τ that fits its training set (the smallest R ≥ 2 whose networks all reach "
            f"{pct(row.value, 0)} train accuracy) on par with the smallest τ: the 95 % interval of Δ (two-way, "
            f"seeds × held-out images) inside ±{pct(row.margin, 0)}"
            + _fit_note(results, np.concatenate([a, b]), row.value))


def _near_ten(Rs: list[int]) -> int:
    """The R of 8–12 among ``Rs`` (the first), else the R nearest 10 (on a log scale)."""
    inside = [R for R in Rs if 8 <= R <= 12]
    return inside[0] if inside else min(Rs, key=lambda R: abs(math.log(R / 10)))


@protocol.rule("ceflow.few_updates", needs=("margin", "value"), metrics=("net_heldout_acc",))
def few_updates(row, results: Results) -> tuple[str, str, str]:
    """Fig. 3: an R of 8–12 (else the R nearest 10) on par with the largest R of the grid (the
    smallest τ) within ``row.margin``; every R's comparison listed, and the smallest R on par."""
    grid = _grid(results)
    Rs = list(grid)
    if len(Rs) < 2:
        return "needs two R in the grid", NA, "n/a"
    gf = grid[Rs[-1]]
    R10 = _near_ten(Rs[:-1])
    parts, smallest = [], None
    for R in Rs[:-1]:
        d = _diff(results, gf, grid[R])
        v = on_par(d, row.margin)
        parts.append(f"R={R}: {d.short()} {v}")
        if v == "yes" and smallest is None:
            smallest = R
    d = _diff(results, gf, grid[R10])
    fits = _fitted(results, np.concatenate([gf, grid[R10]]), row.value)
    return (f"R={R10} vs R={Rs[-1]}: {d.describe()}; smallest R on par: {smallest if smallest else 'none'} ("
            + "; ".join(parts) + ")",
            on_par(d, row.margin) if fits else NA,
            f"R = {R10} (8–12 where the grid has it, else the nearest to 10) on par with the smallest τ (R = {Rs[-1]}):"
            f" the 95 % interval (two-way) inside ±{pct(row.margin, 0)}"
            + _fit_note(results, np.concatenate([gf, grid[R10]]), row.value))


def _gap(results: Results, grid: dict[int, np.ndarray]) -> tuple[Difference, int] | None:
    """Δ = the smallest τ's network (the largest R of the ``grid``, :func:`_grid`) − K = ∞ (R = 1's
    linear model, the linear model at θ₀ trained for T), paired by seed and held-out image; None
    without R = 1 and a larger R in the grid."""
    if 1 not in grid or len(grid) < 2:
        return None
    top = list(grid)[-1]
    return _diff(results, grid[1], grid[top], net_a=False), top


@protocol.rule("ceflow.gap", metrics=("lin_heldout_acc", "net_heldout_acc"))
def gap(row, results: Results) -> tuple[str, str, str]:
    """K = ∞ below the smallest τ: the effect that the gap-relative margins are fractions of ("yes"
    when the 95 % interval of Δ(largest R − K = ∞), two-way, lies above 0)."""
    grid = _grid(results)
    got = _gap(results, grid)
    if got is None:
        return "needs R = 1 and a larger R in the grid", NA, "n/a"
    d, top = got
    runs = results.runs
    return (f"K=∞ {pct(runs.lin_heldout_acc[grid[1]].mean())}, R={top} {pct(runs.net_heldout_acc[grid[top]].mean())}; "
            f"R={top} − K=∞: {d.describe()}", exceeds(d),
            f"'yes' when the 95 % interval of Δ(R={top} − K=∞) lies above 0, 'no' when below, else undecided "
            "(two-way seeds × images, every held-out image)")


def _on_par_gap(row, results: Results, pick) -> tuple[str, str, str]:
    """R = ``pick(Rs)`` (of the grid's R below its largest) on par with the largest R within
    ``row.value`` × the run's own gap (:func:`gap`)."""
    grid = _grid(results)
    got = _gap(results, grid)
    if got is None or len(grid) < 3:
        return "needs R = 1, a compared R and a larger R in the grid", NA, "n/a"
    g, top = got
    R = pick([r for r in grid if 1 < r < top])
    d = _diff(results, grid[top], grid[R])
    margin = row.value * g.delta
    runs = results.runs
    measured = (f"R={R} (τ={num(float(runs.tau[grid[R]][0]), 3)}) {pct(runs.net_heldout_acc[grid[R]].mean())} vs "
                f"R={top} (τ={num(float(runs.tau[grid[top]][0]), 3)}) {pct(runs.net_heldout_acc[grid[top]].mean())}; "
                f"{d.describe()}; margin ±{100 * margin:.2f} pts ({row.value:g} × the gap, {100 * g.delta:.1f} pts)")
    rule = (f"on par: the 95 % interval of Δ(R={R} − R={top}) inside ±{row.value:g} of the run's own gap (Δ of row "
            f"{row.experiment}.gap), 'no' when wholly outside, else undecided (two-way, every held-out image)")
    if margin <= 0:
        return measured + "; K=∞ is not below the smallest τ, so there is no gap to take a fraction of", UNDECIDED, rule
    return measured, on_par(d, margin), rule


@protocol.rule("ceflow.large_tau_gap", needs=("value",), metrics=("net_heldout_acc",))
def large_tau_gap(row, results: Results) -> tuple[str, str, str]:
    """Fig. 2 (full batch), at a margin the run measures: the largest τ that re-linearises (the
    smallest R ≥ 2 of the grid) on par with the smallest τ within ``row.value`` × the gap."""
    return _on_par_gap(row, results, min)


@protocol.rule("ceflow.few_updates_gap", needs=("value",), metrics=("net_heldout_acc",))
def few_updates_gap(row, results: Results) -> tuple[str, str, str]:
    """Fig. 3, at a margin the run measures: the R of 8–12 (else the nearest to 10) on par with the
    smallest τ within ``row.value`` × the gap."""
    return _on_par_gap(row, results, _near_ten)


@protocol.rule("ceflow.inf_scales_worse", metrics=("lin_heldout_acc", "net_heldout_acc"))
def inf_scales_worse(row, results: Results) -> tuple[str, str, str]:
    """Fig. 5: the gain in held-out accuracy from the smallest to the largest N of K = ∞ (the linear
    model at θ₀, R = 1's ``lin_*``) below that of R = ``n_relin``'s network, per image paired
    (gain_R − gain_∞ > 0 beyond noise: the per-image gains, −1, 0 or 1, two-way)."""
    c = results.config
    sizes = sorted(c.n_train)
    if len(sizes) < 2:
        return "one training-set size only", NA, "needs ≥ 2 sizes"
    T, Rn = float(c.total_time), int(c.n_relin)
    runs = results.runs
    k0, k1 = (select(results, R=1, n_train=s, total_time=T) for s in (sizes[0], sizes[-1]))
    f0, f1 = (select(results, R=Rn, n_train=s, total_time=T) for s in (sizes[0], sizes[-1]))
    g_inf = runs.lin_correct[k1].astype(np.int8) - runs.lin_correct[k0].astype(np.int8)
    g_r = runs.net_correct[f1].astype(np.int8) - runs.net_correct[f0].astype(np.int8)
    d = difference(g_inf.mean(1), g_r.mean(1), n_test=g_r.shape[1], correct_a=g_inf, correct_b=g_r, model="two_way")
    acc = lambda i, lin=False: pct((runs.lin_correct if lin else runs.net_correct)[i].mean())  # noqa: E731
    return (f"N={sizes[0]}→{sizes[-1]}: K=∞ {acc(k0, True)}→{acc(k1, True)}, R={Rn} {acc(f0)}→{acc(f1)}; "
            f"gain_R − gain_∞: {d.describe()}", exceeds(d),
            "'yes' when the gain of R = n_relin beats that of K = ∞ beyond noise (95 % interval, two-way, above 0)")


@protocol.rule("ceflow.solve_further", needs=("value",), metrics=("net_heldout_acc",))
def solve_further(row, results: Results) -> tuple[str, str, str]:
    """Fig. 8: at R = ``n_relin`` (N = ``n_grid``), τ = T/R above the longest τ of ``long_taus``
    beyond noise (acc(τ = T/R) − acc(longest τ) > 0); judged when both fit their set (``row.value``)."""
    c = results.config
    n, Rn = grid_size(c), int(c.n_relin)
    base = select(results, R=Rn, n_train=n, total_time=float(c.total_time))
    longest = max(c.long_taus)
    far = select(results, R=Rn, n_train=n, total_time=Rn * float(longest))
    runs = results.runs
    d = _diff(results, far, base)
    parts = [f"τ={num(float(t), 3)}: {pct(runs.net_heldout_acc[select(results, R=Rn, n_train=n, total_time=Rn * t)].mean())}"
             for t in sorted({float(c.total_time) / Rn, *map(float, c.long_taus)})]
    both = np.concatenate([base, far])
    return (f"R={Rn}: " + ", ".join(parts) + f"; τ=T/R − τ={num(float(longest), 3)}: {d.describe()}",
            exceeds(d) if _fitted(results, both, row.value) else NA,
            "'yes' when τ = T/R beats the longest τ beyond noise (95 % interval, two-way, above 0)"
            + _fit_note(results, both, row.value))


@protocol.rule("ceflow.fits", needs=("value",), metrics=("net_train_acc",))
def fits(row, results: Results) -> tuple[str, str, str]:
    """The networks of the R grid with R ≥ 2 end at ≥ ``row.value`` train accuracy (T is long enough)."""
    grid = _grid(results)
    runs = results.runs
    parts = [f"R={R}: {pct(runs.net_train_acc[i].min())}" for R, i in grid.items()]
    idx = [i for R, ii in grid.items() if R >= 2 for i in ii]
    return ("min over seeds: " + ", ".join(parts), verdict(bool(idx) and _fitted(results, idx, row.value),
                                                             applicable=bool(idx)),
            f"every network of the R grid with R ≥ 2 ≥ {pct(row.value, 0)} train accuracy (R = 1 is one step)")


@protocol.rule("ceflow.gd_check", needs=("margin",))
def gd_check(row, results: Results) -> tuple[str, str, str]:
    """Consistency: the small-τ flow within ``row.margin`` (relative distance) of literal GD, and
    closer than one flow of the same time."""
    c = results.check
    ok = float(c.gd_vs_flow) < row.margin and float(c.gd_vs_flow) < float(c.gd_vs_one_flow)
    return (f"N={int(c.n_check)}, time {num(float(c.time), 3)}: GD ({int(c.gd_steps)} steps of η={float(c.lr):.3g}) vs "
            f"R={int(c.relins)}: {num(float(c.gd_vs_flow), 3)} ({pct(float(c.agree))} of held-out predictions "
            f"alike); vs R=1: {num(float(c.gd_vs_one_flow), 3)} ({pct(float(c.agree_one))} alike)",
            verdict(ok), f"relative distance < {row.margin:g} and below R = 1's")


def claims(results: Results) -> list[Claim]:
    """The rows of ceflow in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`), by the rules above."""
    return protocol.claims("ceflow", results)


EXPERIMENT = Experiment("ceflow", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws (not part of ``compute``)


def by_R(results: Results, n: int | None = None, metric: str = "net_heldout_acc") -> tuple[np.ndarray, np.ndarray]:
    """``(R, acc)``: the R grid's ``metric`` at N = ``n`` (None: ``n_grid``), (L,) and (L, S)."""
    grid = _grid(results, n)
    return np.asarray(list(grid)), np.stack([results.runs[metric][i] for i in grid.values()])


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Left: held-out accuracy of the network against R at fixed T (mean ± s.e. over seeds, seeds as
    dots), K = ∞ (the linear model at θ₀) and the runs with longer τ at R = n_relin as markers, the
    paper's numbers (its regime) as dotted lines and its "8–12 feature updates" shaded. Right:
    held-out error against N (log-log), K = ∞ against R = n_relin."""
    c = results.config
    runs = results.runs
    n, T, Rn = grid_size(c), float(c.total_time), int(c.n_relin)
    fig, (ax, ax2) = panels(2, panel_size=(5.5, 4))
    Rs, acc = by_R(results)
    band(ax, Rs, acc, axis=1, color="C0", marker="o", label=f"network, iterated flow τ = T/R (N = {n})")
    for i, R in enumerate(Rs):
        ax.scatter(np.full(acc.shape[1], R), acc[i], color="C0", s=10, alpha=0.5)
    _, lin = by_R(results, metric="lin_heldout_acc")
    ax.axhline(lin[0].mean(), color="k", linestyle="--", label=f"K = ∞ (linear model at θ₀, time T = {T:g})")
    for tau in sorted(c.long_taus):
        i = select(results, R=Rn, n_train=n, total_time=Rn * float(tau))
        ax.errorbar([Rn], [runs.net_heldout_acc[i].mean()], fmt="s", ms=6, mfc="none",
                    label=f"R = {Rn}, longer τ = {tau:g} (time {Rn * tau:g})")
    ax.axvspan(8, 12, color="C2", alpha=0.12, label="the paper's 8–12 feature updates")
    for key, style, label in (("fig3_K1", ":", "paper Fig. 3: K = 1, 82.3 %"),
                              ("fig3_K5e6", "-.", "paper Fig. 3: K = 5·10⁶, 81.4 %")):
        ax.axhline(PAPER[key], color="C3", linestyle=style, linewidth=1, label=label)
    ax.set(xscale="log", xlabel="re-linearisations R (total time T fixed)", ylabel="held-out accuracy",
           title=f"{c.scale} scale: τ = T/R, T = {T:g} (ηK units)")
    legend(ax, fontsize=7)
    sizes = sorted(c.n_train)
    for R, key, color, label in ((1, "lin_correct", "k", "K = ∞"), (Rn, "net_correct", "C0", f"R = {Rn}")):
        err = np.stack([1 - runs[key][select(results, R=R, n_train=m, total_time=T)].mean(1) for m in sizes])
        band(ax2, sizes, err, axis=1, color=color, marker="o", label=label)
    ax2.set(xscale="log", yscale="log", xlabel="training images N", ylabel="held-out error",
            title="data scaling (the paper: K = ∞ scales worse)")
    legend(ax2)
    plt.show()
    chk = results.check
    print(f"consistency: literal GD vs R = {int(chk.relins)}: relative distance {float(chk.gd_vs_flow):.3g}; "
          f"vs R = 1: {float(chk.gd_vs_one_flow):.3g}")
