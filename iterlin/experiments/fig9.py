"""Fig. 9: damped Gauss–Newton (Eq. 6) on the quintic: test RMSE against λ, learned functions (Sec. 3.3).

Every (λ, seed) run is full-batch damped Gauss–Newton with step size α for ``steps`` steps,
θ ← θ − α(JᵀJ + λI)⁻¹Jᵀ(f(θ, X) − Y) (:func:`iterlin.solvers.gauss_newton.gauss_newton_train`, λ traced
per run, so every λ and seed run in ONE compiled program). The paper: more damping gives lower,
more consistent test RMSE ("note the number of high RMSE runs") and smoother functions, despite
similar minima; runs with train RMSE > 2.5 are removed.

The setting is the paper's (20 / 1000 evenly spaced points of the quintic on [−3.625, 3.625], an
MLP with 5 hidden layers of 50 ReLU units, squared error, full batch); the λ grid, steps, step
size and seeds are ours (the paper names none). The paper does not say how it initialised the
network; this edition draws every weight and bias from U(−1/√fan_in, 1/√fan_in)
(:func:`iterlin.models.torch_default_init`, the scheme of PyTorch's ``nn.Linear``, through
:func:`iterlin.models.quintic_model`: with Flax's zero biases every ReLU of the MLP has its kink at
x = 0 and the NTK on the 20 points has rank 4), and computes in float64 (``x64``: in float32 most
runs with λ ≤ 10⁻² stall at a train RMSE of about 0.78).

Config keys: ``damping`` (list of λ ≥ 0), ``steps``, ``step_size`` (α), ``seed``, ``n_seeds``
(seeds ``seed … seed + n_seeds − 1``), ``n_functions`` (functions kept per λ, the first seeds),
``n_train``, ``n_test``, ``n_evals``, ``x64``.

Results: :class:`Results`. :func:`kept_means` gives the mean test RMSE over the kept seeds per λ.

Claims: each "more damping → ..." row is a trend over the WHOLE λ grid, not a comparison of its two
ends: the least-squares slope of the per-λ mean over kept seeds against log₁₀ λ (λ = 0 one decade
left of the smallest λ > 0), with a standard error from the seeds (:func:`trend`); it holds when
the 95 % t interval lies below 0, fails when above, and is undecided otherwise; the steps where the
mean rises are listed. Test RMSE and slope variation enter in log₁₀ (the figure's axes: a few kept
runs extrapolate wildly between the training points and would swamp an arithmetic mean, which the
row still reports); "more consistent" is the trend of each run's distance to its λ's median
(Brown–Forsythe). The minima: :func:`minimum_range`, a seed bootstrap.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from ..repro.claims import UNDECIDED, Claim, divergence_row, exceeds, verdict
from ..columns import Record
from ..repro.config import (
    Damping, Evals, ExperimentConfig, Flag, Images, Positive, RunCount, Seed, Steps, TestImages,
)
from ..data import Dataset
from ..solvers.gauss_newton import gauss_newton_train
from ..models import quintic_model
from ..repro.plotting import (
    as_1d,
    as_runs,
    bad_argument,
    band,
    check_axes,
    legend,
    log_positions,
    mean_se,
    panels,
    seed_points,
    set_log_ticks,
)
from ..precision import x64
from ..repro.stats import Difference, num, t_quantile
from . import protocol
from ._common import Experiment, checkpoint_path, eval_points, load_quintic

__all__ = [
    "Results", "Curves", "SCALES", "EXPERIMENT", "MAX_TRAIN_RMSE", "load", "compute", "claims", "slope_variation",
    "kept_means", "GeometricMeans", "geometric_means", "function_panels", "log_lambda", "Trend", "trend", "minimum_range", "N_BOOTSTRAP",
    "removed", "lower", "consistent", "minimum", "smoother", "finite",
    "plot_functions", "plot",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(ExperimentConfig):
    """fig9's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "fig9"

    damping: tuple[Damping, ...]
    steps: Steps
    step_size: Positive
    seed: Seed
    n_seeds: RunCount
    n_functions: RunCount
    n_train: Images | None
    n_test: TestImages | None
    n_evals: Evals
    x64: Flag


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/fig9.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        damping=[0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0], steps=200, step_size=1.0, seed=0, n_seeds=10,
        n_functions=10, n_train=20, n_test=1000, n_evals=10, x64=True,
    ),
    "cpu": dict(
        damping=[0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0], steps=500, step_size=1.0, seed=0,
        n_seeds=40, n_functions=10, n_train=20, n_test=1000, n_evals=10, x64=True,
    ),
    "gpu": dict(
        damping=[0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0], steps=2000, step_size=1.0, seed=0,
        n_seeds=50, n_functions=10, n_train=20, n_test=1000, n_evals=20, x64=True,
    ),
    "paper": dict(
        damping=[0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0], steps=2000, step_size=1.0, seed=0,
        n_seeds=100, n_functions=10, n_train=20, n_test=1000, n_evals=20, x64=True,
    ),
}


@dataclasses.dataclass(frozen=True, eq=False)
class Curves(Record):
    """The RMSE along training of L damping values × S seeds at E evaluation points."""

    step: np.ndarray  #: (E,)
    train_rmse: np.ndarray  #: (L, S, E) float64
    test_rmse: np.ndarray  #: (L, S, E) float64


class Results(NamedTuple):
    """fig9's results (:func:`compute`): L values of λ, S seeds."""

    damping: np.ndarray  #: (L,) float64, the values of λ
    seeds: np.ndarray  #: (S,) int, the seeds
    train_rmse: np.ndarray  #: (L, S) float64, the final network's train RMSE
    test_rmse: np.ndarray  #: (L, S) float64, the final network's test RMSE
    #: (L, S) bool, the runs kept: finite and train RMSE ≤ :data:`MAX_TRAIN_RMSE` (the paper's filter)
    kept: np.ndarray
    diverged: np.ndarray  #: (L, S) bool, the runs that diverged
    #: (L, S) float64, :func:`slope_variation` of the learned function on the test grid
    slope_variation: np.ndarray
    target_slope_variation: np.ndarray  #: () float64, :func:`slope_variation` of the quintic itself
    curves: Curves  #: the RMSE along training
    x_test: np.ndarray  #: (n_test,) float64, the test grid
    y_test: np.ndarray  #: (n_test,) float64, the quintic on it
    x_train: np.ndarray  #: (n_train,) float64, the training points
    y_train: np.ndarray  #: (n_train,) float64, their targets
    #: (L, F, n_test) float64, the learned functions of the first F seeds on the test grid
    functions: np.ndarray
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


#: Runs whose final train RMSE exceeds this are removed (the paper's filter).
MAX_TRAIN_RMSE = 2.5

load = load_quintic


def slope_variation(f, x) -> np.ndarray:
    """Total variation of the slope of a sampled 1-d function, Σ_i |s_{i+1} − s_i| (s = Δf/Δx).

    ``f`` (..., M) values on the sorted grid ``x`` (M,). For a ReLU network (piecewise linear) it
    is the sum of the slope changes at its kinks inside the grid: a roughness measure that is
    small for smooth functions (for the quintic target on the test grid of [−3.625, 3.625] it is ≈ 28.8).
    """
    f = np.asarray(f, np.float64)
    x = np.asarray(x, np.float64).ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.diff(f, axis=-1) / np.diff(x)
        return np.sum(np.abs(np.diff(s, axis=-1)), axis=-1)


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every (λ, seed) in one program (see the module docstring for the results)."""
    lams = list(config.damping)
    seeds = list(range(config.seed, config.seed + config.n_seeds))
    L, S = len(lams), len(seeds)
    F = min(config.n_functions, S)
    with x64(config.x64):
        dtype = jnp.float64 if config.x64 else jnp.float32
        apply_fn, params = quintic_model(seeds, dtype)
        stacked = jax.tree.map(lambda a: jnp.concatenate([a] * L), params)
        final, h = gauss_newton_train(
            apply_fn, stacked, (data.x_train, data.y_train), damping=[lam for lam in lams for _ in seeds],
            steps=config.steps, step_size=config.step_size, loss="mse", solver="kernel",
            eval_data=(data.x_test, data.y_test), eval_steps=eval_points(config.steps, config.n_evals),
            checkpoint=checkpoint_path(checkpoint_dir, "gn"), progress=progress, config=config.to_dict())
        preds = np.asarray(jax.vmap(apply_fn, in_axes=(0, None))(final, jnp.asarray(data.x_test)), np.float64)
    E = len(h.step)
    train_c = np.asarray(h.net_train.rmse).reshape(L, S, E)
    test_c = np.asarray(h.net_test.rmse).reshape(L, S, E)
    train_rmse, test_rmse = train_c[..., -1], test_c[..., -1]
    preds = preds[..., 0].reshape(L, S, -1)
    x_test = np.asarray(data.x_test, np.float64).ravel()
    with np.errstate(invalid="ignore"):
        kept = np.isfinite(test_rmse) & np.isfinite(train_rmse) & (train_rmse <= MAX_TRAIN_RMSE)
    return Results(
        damping=np.asarray(lams, np.float64),
        seeds=np.asarray(seeds),
        train_rmse=train_rmse,
        test_rmse=test_rmse,
        kept=kept,
        diverged=np.asarray(h.diverged).reshape(L, S),
        slope_variation=slope_variation(preds, x_test),
        target_slope_variation=slope_variation(np.asarray(data.y_test, np.float64).ravel(), x_test),
        curves=Curves(step=np.asarray(h.step), train_rmse=train_c, test_rmse=test_c),
        x_test=x_test,
        y_test=np.asarray(data.y_test, np.float64).ravel(),
        x_train=np.asarray(data.x_train, np.float64).ravel(),
        y_train=np.asarray(data.y_train, np.float64).ravel(),
        functions=preds[:, :F],
    )


def kept_means(test_rmse, kept) -> np.ndarray:
    """Mean final test RMSE over the kept seeds, per λ (L,); NaN where no seed was kept.

    ``test_rmse``, ``kept`` (L, S): :attr:`Results.test_rmse`, :attr:`Results.kept`."""
    test = np.asarray(test_rmse, np.float64)
    kept = np.asarray(kept, bool)
    return np.asarray([test[i][kept[i]].mean() if kept[i].any() else np.nan for i in range(len(test))])


class GeometricMeans(NamedTuple):
    """Per λ (:func:`geometric_means`): (L,) each; NaN where no seed was kept (``lo``/``hi`` with fewer than 2)."""

    mean: np.ndarray  #: 10^m, m the mean of log₁₀ test RMSE over the kept finite seeds
    lo: np.ndarray  #: 10^(m − se), se its standard error (:func:`iterlin.repro.plotting.mean_se`)
    hi: np.ndarray  #: 10^(m + se)


def geometric_means(test_rmse, kept) -> GeometricMeans:
    """The per-λ geometric mean of the final test RMSE over the kept seeds (what the claims' trend
    uses, on the figure's log axis), with a band of ± one standard error of the mean of log₁₀ RMSE.

    ``test_rmse``, ``kept`` (L, S): :attr:`Results.test_rmse`, :attr:`Results.kept`.
    """
    test = np.asarray(test_rmse, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        m, se = mean_se(np.log10(test), axis=1, where=np.asarray(kept, bool))
    return GeometricMeans(10.0**m, 10.0 ** (m - se), 10.0 ** (m + se))


def log_lambda(damping) -> np.ndarray:
    """(L,) the positions of the λ grid on the trend rows' axis: log₁₀ λ, with λ = 0 one decade left
    of the smallest λ > 0 (where the figure draws it, :func:`iterlin.repro.plotting.log_positions`); 0
    for λ = 0 when the grid has no λ > 0."""
    lams = np.asarray(damping, np.float64).reshape(-1)
    if np.any(~np.isfinite(lams)) or np.any(lams < 0):
        raise ValueError(f"damping={lams.tolist()} is not allowed: every λ must be finite and >= 0")
    pos = lams[lams > 0]
    left = np.log10(pos.min()) - 1.0 if pos.size else 0.0
    with np.errstate(divide="ignore"):
        return np.where(lams > 0, np.log10(np.where(lams > 0, lams, 1.0)), left)


class Trend(NamedTuple):
    """The least-squares slope of per-λ means against x (:func:`trend`), per unit of x (a decade of λ).

    ``slope`` and its standard error ``se``; ``means``/``ses`` (L,) the per-λ mean and s.e. over the
    included seeds; ``used`` (L,) bool: the λ that entered the fit (≥ 2 included seeds); ``df``
    the degrees of freedom of ``se``: the fewest seeds included at a λ used, less one (with every
    seed included, Var b = Var_s(b_s)/S has S − 1).
    """

    slope: float
    se: float
    means: np.ndarray
    ses: np.ndarray
    used: np.ndarray
    df: float = math.nan

    @property
    def lo(self) -> float:
        return self.slope - t_quantile(self.df) * self.se if self.df >= 1 else math.nan

    @property
    def hi(self) -> float:
        return self.slope + t_quantile(self.df) * self.se if self.df >= 1 else math.nan

    def falls(self) -> str:
        """"Falls as λ grows": ``"yes"`` when the 95 % t interval of the slope lies below 0, ``"no"``
        when above, else :data:`~iterlin.repro.claims.UNDECIDED`: :func:`iterlin.repro.claims.exceeds` of the
        decrease −slope."""
        return exceeds(Difference(-self.slope, self.se, int(self.used.sum()), 0, True,
                                  self.df if self.df >= 1 else None))

    def describe(self, digits: int = 3) -> str:
        """``slope −0.050 per decade, 95 % t interval [−0.090, −0.010]``."""
        return (f"slope {num(self.slope, digits)} per decade, 95 % t interval [{num(self.lo, digits)}, "
                f"{num(self.hi, digits)}]")


def trend(x, values, where=None) -> Trend:
    """The slope of the per-λ mean of ``values`` against ``x``, with the seeds as the noise.

    ``x`` (L,), ``values`` (L, S) (λ × seed), ``where`` (L, S) bool: the entries included (Fig. 9's
    ``kept``; non-finite values are always left out). Per λ, the mean m_i and s.e. over its n_i
    included seeds (:func:`iterlin.repro.plotting.mean_se`); the λ with n_i ≥ 2 enter the fit, each with
    equal weight: slope b = Σ_i c_i m_i, c_i = (x_i − x̄)/Σ_j (x_j − x̄)². The seeds are shared by
    every λ (seed s is one initialisation), so the means are correlated: Var b = cᵀCc with
    C_ii = Var_i/n_i and C_ij = n_ij·Cov_ij/(n_i n_j) over the n_ij seeds included at both λ (sample
    (co)variances, ddof 1). With every seed included this is exactly Var_s(b_s)/S, b_s = Σ_i c_i y_is
    the slope of seed s alone. Fewer than 2 usable λ: slope and se NaN.
    """
    x = np.asarray(x, np.float64).reshape(-1)
    v = np.asarray(values, np.float64)
    if v.ndim != 2 or v.shape[0] != x.shape[0]:
        raise ValueError(f"values of shape {v.shape} is not allowed: it must be (L, S) with L = len(x) = {x.shape[0]}")
    ok = np.isfinite(v) & (np.ones(v.shape, bool) if where is None else np.asarray(where, bool))
    means, ses = mean_se(v, axis=1, where=ok)
    n = ok.sum(axis=1)
    used = n >= 2
    if used.sum() < 2:
        return Trend(math.nan, math.nan, means, ses, used)
    xu = x[used]
    c = (xu - xu.mean()) / np.sum((xu - xu.mean()) ** 2)
    slope = float(c @ means[used])
    o = ok[used].astype(np.float64)
    dev = np.where(ok[used], v[used] - means[used][:, None], 0.0)
    n_ij = o @ o.T
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = np.where(n_ij >= 2, (dev @ dev.T) / (n_ij - 1), 0.0)
        C = n_ij * cov / np.outer(n[used], n[used])
    var = float(c @ C @ c)
    return Trend(slope, math.sqrt(var) if var >= 0 else math.nan, means, ses, used, float(n[used].min() - 1))


def _rises(lams: np.ndarray, means: np.ndarray, digits: int = 2) -> str:
    """The steps of the grid where the per-λ mean rises as λ grows: ``"; rises at λ 0.1→1 (0.28→0.42)"``."""
    order = np.argsort(lams)
    steps = [(a, b) for a, b in zip(order[:-1], order[1:])
             if np.isfinite(means[a]) and np.isfinite(means[b]) and means[b] > means[a]]
    if not steps:
        return "; monotone"
    return "; rises at " + ", ".join(f"λ {lams[a]:g}→{lams[b]:g} ({num(means[a], digits)}→{num(means[b], digits)})"
                                     for a, b in steps)


#: Seed resamples of the minimum row's bootstrap (fixed generator seed: a stable table).
N_BOOTSTRAP = 2000


def minimum_range(test, kept, *, n_bootstrap: int = N_BOOTSTRAP, seed: int = 0) -> tuple[float, float, float]:
    """The range over λ of the per-λ minimum test RMSE (kept seeds), and its seed-bootstrap 95 % interval.

    ``test``, ``kept`` (L, S). Returns ``(range, lo, hi)``: max_λ min_s − min_λ min_s over the kept
    finite runs (λ with none left out), and the 2.5 % / 97.5 % quantiles of the same statistic over
    ``n_bootstrap`` resamples of the S seeds with replacement (one resample for every λ: a seed keeps
    its runs at every λ), by ``numpy.random.default_rng(seed)``. NaN when fewer than 2 λ have a run.
    """
    t = np.asarray(test, np.float64)
    ok = np.asarray(kept, bool) & np.isfinite(t)
    if t.ndim != 2 or ok.shape != t.shape:
        raise ValueError(f"test of shape {t.shape} and kept of shape {ok.shape} are not allowed: both (L, S)")

    def stat(cols):
        v, m = t[:, cols], ok[:, cols]
        has = m.any(axis=1)
        if has.sum() < 2:
            return math.nan
        mins = np.where(m, v, np.inf).min(axis=1)[has]
        return float(mins.max() - mins.min())

    S = t.shape[1]
    rng = np.random.default_rng(seed)
    boot = np.asarray([stat(rng.integers(0, S, S)) for _ in range(int(n_bootstrap))])
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return stat(np.arange(S)), math.nan, math.nan
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return stat(np.arange(S)), float(lo), float(hi)


#: The rule of every trend row: the slope over the whole λ grid against the seeds' noise (:func:`trend`).
_X_RULE = ("the least-squares slope of the per-λ mean over kept seeds against log₁₀ λ (λ = 0 one decade left of the "
           "smallest λ > 0, every λ with ≥ 2 kept seeds weighted equally), 2 s.e. over seeds (paired across λ)")
#: What a trend or minimum row reads when fewer than 2 λ keep ≥ 2 seeds.
_TOO_FEW = ("needs ≥ 2 values of λ with ≥ 2 kept runs", verdict(None),
            "needs ≥ 2 λ values with ≥ 2 kept seeds (a seed-to-seed spread)")


def _log_test(results: Results) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(np.asarray(results.test_rmse, np.float64))  # the figure's log axis


def _judgeable(results: Results) -> bool:
    """Whether ≥ 2 values of λ keep ≥ 2 seeds (a trend needs a seed-to-seed spread)."""
    x = log_lambda(np.asarray(results.damping, np.float64))
    return int(trend(x, _log_test(results), np.asarray(results.kept, bool)).used.sum()) >= 2


def _per_lambda(results: Results, values, digits: int = 2) -> str:
    return ", ".join(f"λ={v:g}: {num(m, digits)}" for v, m in zip(np.asarray(results.damping, np.float64), values))


@protocol.rule("fig9.removed", metrics=("train_rmse",))
def removed(row, results: Results) -> tuple[str, str, str]:
    """The runs kept per λ (train RMSE ≤ :data:`MAX_TRAIN_RMSE`): a procedure, reported only."""
    kept = np.asarray(results.kept, bool)
    return ("kept per λ: " + ", ".join(f"λ={v:g}: {int(k)}/{kept.shape[1]}"
                                       for v, k in zip(np.asarray(results.damping, np.float64), kept.sum(axis=1))),
            verdict(None), "a procedure, not a claim: reported only (applied before the rows below)")


@protocol.rule("fig9.lower", metrics=("test_rmse",))
def lower(row, results: Results) -> tuple[str, str, str]:
    """More damping → lower test RMSE: the :func:`trend` of log₁₀ test RMSE falls."""
    if not _judgeable(results):
        return _TOO_FEW
    lams, kept = np.asarray(results.damping, np.float64), np.asarray(results.kept, bool)
    t = trend(log_lambda(lams), _log_test(results), kept)
    geo = 10.0**t.means
    return (f"log₁₀ test RMSE: {t.describe()}; geometric mean: {_per_lambda(results, geo)}" + _rises(lams, geo, 3)
            + f"; arithmetic mean: {_per_lambda(results, kept_means(results.test_rmse, kept))}",
            t.falls(),
            f"test RMSE in log₁₀ (the figure's axis; the arithmetic mean is dominated by a few runs that extrapolate "
            f"wildly between the training points); {_X_RULE}: 'yes' below 0, 'no' above 0, else undecided")


@protocol.rule("fig9.consistent", metrics=("test_rmse",))
def consistent(row, results: Results) -> tuple[str, str, str]:
    """More damping → more consistent test RMSE: the :func:`trend` of each kept run's distance from
    its λ's median (log₁₀, Brown–Forsythe) falls."""
    if not _judgeable(results):
        return _TOO_FEW
    lams, kept = np.asarray(results.damping, np.float64), np.asarray(results.kept, bool)
    log_test = _log_test(results)
    med = np.asarray([np.median(log_test[i][kept[i]]) if kept[i].any() else np.nan for i in range(len(lams))])
    t = trend(log_lambda(lams), np.abs(log_test - med[:, None]), kept)
    return (f"mean |log₁₀ RMSE − median|: {t.describe()}; per λ: {_per_lambda(results, t.means, 3)}"
            + _rises(lams, t.means, 3),
            t.falls(),
            "the spread is each kept run's distance |log₁₀ test RMSE − its λ's median| on the figure's axis "
            f"(Brown–Forsythe); {_X_RULE}: 'yes' below 0, 'no' above 0, else undecided")


@protocol.rule("fig9.minimum", needs=("margin",), metrics=("test_rmse",))
def minimum(row, results: Results) -> tuple[str, str, str]:
    """The minimum test RMSE is similar at every λ: the range of the per-λ minima
    (:func:`minimum_range`) within the row's margin, by its seed bootstrap."""
    if not _judgeable(results):
        return _TOO_FEW
    test, kept = np.asarray(results.test_rmse, np.float64), np.asarray(results.kept, bool)
    rng_, lo, hi = minimum_range(test, kept)
    mins = [np.min(test[i][kept[i]]) if kept[i].any() else np.nan for i in range(test.shape[0])]
    return (f"min test RMSE: {_per_lambda(results, mins)}; range {num(rng_)}, seed bootstrap 95 % [{num(lo)}, {num(hi)}]",
            "yes" if hi < row.margin else "no" if lo > row.margin else UNDECIDED,
            f"range over λ of the per-λ minimum (kept seeds): 'yes' when its seed-bootstrap 95 % interval lies below "
            f"{row.margin:g}, 'no' when above, else undecided")


@protocol.rule("fig9.smoother", metrics=("slope_variation",))
def smoother(row, results: Results) -> tuple[str, str, str]:
    """More damping → smoother learned functions: the :func:`trend` of log₁₀ slope variation falls."""
    if not _judgeable(results):
        return _TOO_FEW
    lams, kept = np.asarray(results.damping, np.float64), np.asarray(results.kept, bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = trend(log_lambda(lams), np.log10(np.asarray(results.slope_variation, np.float64)), kept)
    return (f"log₁₀ slope variation: {t.describe(2)}; geometric mean: {_per_lambda(results, 10.0**t.means, 0)} "
            f"(target {num(float(results.target_slope_variation), 0)})" + _rises(lams, 10.0**t.means, 0),
            t.falls(),
            f"slope variation = total variation of f' over the test grid, in log₁₀; {_X_RULE}: 'yes' below 0, "
            "'no' above 0, else undecided")


@protocol.rule("fig9.finite")
def finite(row, results: Results) -> Claim:
    """Every run finite (:func:`~iterlin.repro.claims.divergence_row`), each diverged run by its λ and seed."""
    lams = np.asarray(results.damping, np.float64)
    seeds = np.asarray(results.seeds)
    return divergence_row([f"λ={lams[i]:g} seed {int(seeds[j])}"
                           for i, j in zip(*np.nonzero(np.asarray(results.diverged, bool)))])


def claims(results: Results) -> list[Claim]:
    """The rows of fig9 in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): the runs removed;
    more damping → lower, more consistent test RMSE and smoother functions, each a trend over the whole
    λ grid against the seeds' noise (:func:`trend`); similar minima (:func:`minimum_range`); divergence."""
    return protocol.claims("fig9", results)


EXPERIMENT = Experiment("fig9", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws: pure functions of the results (nothing here is part of ``compute``).


def function_panels(damping, n: int = 4) -> list[int]:
    """The indices of the (at most ``n``) values of λ of the grid ``damping`` (:attr:`Results.damping`)
    whose learned functions are drawn.

    Spread evenly over the grid, both ends included, in increasing order, without repeats:
    ``[0, 2, 3, 5]`` for 6 values of λ and n = 4; every index when there are at most n values.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n={n!r} is not allowed: n must be an integer >= 1 (the number of panels)")
    L = len(np.asarray(damping).reshape(-1))
    if L == 0:
        return []
    return sorted({int(round(v)) for v in np.linspace(0, L - 1, min(n, L))})


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot_functions(ax: Axes, x: Any, functions: Any, *, y_target: Any = None, x_train: Any = None,
                   y_train: Any = None, lw: float = 1.0, alpha: float = 0.7) -> list[Line2D]:
    """Learnt functions ``(S, N)`` on ``x`` ``(N,)`` (one per seed), with the target ``(N,)`` dashed
    and the training points.

    Returns the S function lines (target and training points get the labels ``target``, ``train``).
    """
    check_axes(ax)
    xs = as_1d(x, "x")
    f, _ = as_runs(functions, "functions", xs.shape[0])
    lines = [ax.plot(xs, fi, lw=lw, alpha=alpha)[0] for fi in f]
    if y_target is not None:
        ax.plot(xs, as_1d(y_target, "y_target", xs.shape[0], "the target on x"), "k--", lw=1.5, label="target")
    if (x_train is None) != (y_train is None):
        raise bad_argument("y_train" if y_train is None else "x_train", "= None", "given together with the other")
    if x_train is not None:
        xt = as_1d(x_train, "x_train")
        ax.plot(xt, as_1d(y_train, "y_train", xt.shape[0], "one per training point"), "ko", ms=3, label="train")
    return lines


def plot(results: Results):
    """Top: the test RMSE of every seed against λ (λ = 0 at the left edge), runs with train RMSE > 2.5
    removed (grey crosses, at the top when off the chart); the black line is the mean over the kept
    seeds, the red dashed line their geometric mean (the claims' statistic), each with a band of ±
    one standard error. Bottom: the learned functions (the first seeds) for 4
    values of λ spread over the grid, with the training points and the target."""
    lams, test, kept = results.damping, results.test_rmse, results.kept
    xs = log_positions(lams)  # λ = 0 at the left edge
    fig, ax = panels(panel_size=(7, 4))
    seed_points(ax, xs, test, kept=kept, jitter=0.08, cap=1e3, color="C0", size=18)
    band(ax, xs, test, axis=1, where=kept, color="k", marker="o", label="mean over kept seeds (± s.e.)")
    geo = geometric_means(test, kept)  # the claims' statistic: the mean of log RMSE
    ax.plot(xs, geo.mean, "s--", color="C3", label="geometric mean over kept seeds (± s.e.)")
    ax.fill_between(xs, geo.lo, geo.hi, color="C3", alpha=0.15, linewidth=0)
    set_log_ticks(ax, xs, [f"{v:g}" for v in lams])
    ax.set(yscale="log", xlabel="damping λ", ylabel="test RMSE",
           title=f"Damped Gauss–Newton on the quintic ({results.config.scale} scale, {test.shape[1]} seeds)")
    legend(ax)
    plt.show()

    pick = function_panels(lams)  # 4 values of λ spread over the grid
    fig, axes = panels(len(pick), panel_size=(3.6, 3.4), sharey=True, squeeze=False)
    for ax, i in zip(axes[0], pick):
        plot_functions(ax, results.x_test, results.functions[i], y_target=results.y_test,
                       x_train=results.x_train, y_train=results.y_train)
        ax.set(title=f"λ = {lams[i]:g}", xlabel="x", ylim=(-6, 4))
    axes[0][0].set_ylabel("f(x)")
    legend(axes[0][0])
    plt.show()
