"""The statistics of the claims' noise rule: a difference of two accuracies with its 95 % t interval.

Every comparison of two accuracies in the claims tables (:mod:`iterlin.repro.claims`) goes through ONE noise
model, :func:`difference`: Δ = the mean over seeds of the per-seed difference, whose standard error
combines the seed-to-seed spread and the test set's sampling noise (paired on the same test images
when the runs' per-image correctness is known), with the Welch–Satterthwaite degrees of freedom of
that combination, and a 95 % Student's t interval (:class:`Difference`). A quantity measured once per
seed (a ratio, a slope) gets its t interval from :func:`seed_interval`. The verdicts that read these
intervals ("on par", "better") are rules of the claims, in :mod:`iterlin.repro.claims`.

Also here: how the rows print numbers (:func:`pct`, :func:`num`), and the selection of a sweep
history's runs that are compared (:func:`runs_of`, :func:`run_seeds`, :func:`sweep_difference`,
:func:`runs_difference`, and :func:`final_difference` of typed results).
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple

import numpy as np

__all__ = ["pct", "num", "Difference", "difference", "t_quantile", "seed_interval", "final_difference", "runs_difference",
           "sweep_difference", "runs_of", "run_seeds"]


def pct(x: float, digits: int = 1) -> str:
    """A fraction as a percentage, rounded: ``pct(0.41234) == "41.2 %"``; NaN → ``"nan"``."""
    x = float(x)
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    v = round(100.0 * x, digits)
    return f"{v + 0.0:.{digits}f} %"  # + 0.0: never print "-0.0"


def num(x: float, digits: int = 2) -> str:
    """A number rounded to ``digits`` decimals (``-0.00`` printed as ``0.00``); NaN → ``"nan"``."""
    x = float(x)
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return f"{round(x, digits) + 0.0:.{digits}f}"


def _signed(x: float) -> str:
    return ("+" if x > 0 and round(x, 1) != 0 else "") + num(x, 1)


class Difference(NamedTuple):
    """Δ = mean over seeds of (accuracy of B − accuracy of A), and its standard error.

    ``se`` combines the seed-to-seed spread of the per-seed differences (v_seed = var/S, when S ≥ 2)
    and the test set's sampling noise (v_test: paired, the variance over test images of the
    per-image difference in correctness, averaged over seeds, / n; unpaired, two independent
    binomials). ``df``: the degrees of freedom of se², by Welch–Satterthwaite with the seed term's
    S − 1 and the test term's ∞: df = (v_seed + v_test)² / (v_seed²/(S − 1)) (∞ when v_seed = 0);
    ``None`` when they are unknown, for one seed (the seed term cannot be estimated, and
    :func:`difference` leaves it out) or a Difference built by hand without them.
    ``lo``/``hi``: Δ ∓ q·se with q = :attr:`quantile`: the 0.975 quantile of Student's t with
    ``df`` degrees of freedom (a 95 % interval; t(1) = 12.7, t(∞) = 1.96), or 2 when df is None.
    """

    delta: float
    se: float
    n_seeds: int
    n_test: int
    paired: bool
    df: float | None = None

    @property
    def quantile(self) -> float:
        """The interval's half-width in standard errors, t_{0.975}(df) (2 when ``df`` is None)."""
        return 2.0 if self.df is None else t_quantile(self.df)

    @property
    def lo(self) -> float:
        return self.delta - self.quantile * self.se

    @property
    def hi(self) -> float:
        return self.delta + self.quantile * self.se

    def interval_name(self) -> str:
        """``95 % t interval`` (``df`` known) or ``2 s.e. interval`` (one seed: test noise only)."""
        return "2 s.e. interval" if self.df is None else "95 % t interval"

    def describe(self) -> str:
        """``Δ +0.4 pts, 95 % t interval [−1.2, +2.0] (3 seeds, 932 paired test images)``; with one
        seed ``…, 2 s.e. interval […] (1 seed: test noise only, …)``."""
        return (f"Δ {_signed(100 * self.delta)} pts, {self.interval_name()} [{_signed(100 * self.lo)}, "
                f"{_signed(100 * self.hi)}] ({self.counts()})")

    def short(self) -> str:
        """``Δ +0.4 [−1.2, +2.0]``: Δ and its interval (:meth:`interval_name`) in points, for rows
        that list many differences (:meth:`counts` then goes once into the rule)."""
        return f"Δ {_signed(100 * self.delta)} [{_signed(100 * self.lo)}, {_signed(100 * self.hi)}]"

    def counts(self) -> str:
        """``3 seeds, 932 paired test images``: what the interval was estimated from."""
        kind = "paired" if self.paired else "unpaired"
        seeds = f"{self.n_seeds} seed{'s' if self.n_seeds != 1 else ''}"
        if self.n_seeds == 1 and self.df is None:
            seeds += ": test noise only, no seed spread"
        return f"{seeds}, {self.n_test} {kind} test images"


def t_quantile(df: float, p: float = 0.975) -> float:
    """The ``p`` quantile of Student's t with ``df`` > 0 degrees of freedom (the normal's for ∞)."""
    from scipy import stats

    df = float(df)
    return float(stats.norm.ppf(p) if math.isinf(df) else stats.t.ppf(p, df))


def difference(acc_a, acc_b, *, n_test: int, correct_a=None, correct_b=None, test_var: float | None = None) -> Difference:
    """The shared noise model of a comparison of B against A (see :class:`Difference`).

    Args:
      acc_a, acc_b: (S,) accuracies of A and B, one per seed (seed s of A paired with seed s of B:
        same initialisation and batches), or scalars for one seed.
      n_test: test images each accuracy was measured on (n > 0).
      correct_a, correct_b: optional (S, n_test) booleans, whether each run got each test image
        right (or any per-image score whose mean over images is the accuracy compared, such as a
        difference of two accuracies' correctness, −1, 0 or 1: Fig. 5's gains); given both, the
        test noise is that of a paired comparison on the same images,
        max(Var_i[mean_s(c_b − c_a)]/n, 3/n²) (3/n²: the rule of three, so that runs agreeing on
        every image of a small test set are not called noiseless), which is far tighter than two independent binomials
        (2·p(1 − p)/n, p clipped to [0.05, 0.95]) when the runs agree on most images.

      test_var: the test-set variance of Δ when the caller knows it better (e.g. a difference of
        two gains, four accuracies, in Fig. 5's runs made without a per-image record); replaces
        both formulas above.

    The seed term is Var_s(Δ_s)/S (sample variance, S ≥ 2), and the interval is Student's t with
    the Welch–Satterthwaite df of seed + test variance (:class:`Difference`). With one seed the seed
    term cannot be estimated: it is 0 and the interval is ±2 s.e. of the test noise alone, which
    :meth:`Difference.describe` states (``1 seed: test noise only``).
    """
    a = np.atleast_1d(np.asarray(acc_a, np.float64))
    b = np.atleast_1d(np.asarray(acc_b, np.float64))
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"acc_a and acc_b of shapes {a.shape} and {b.shape} are not allowed: one accuracy per seed each")
    n = int(n_test)
    if n <= 0:
        raise ValueError(f"n_test={n_test!r} is not allowed: n_test must be a positive number of test images")
    d = b - a
    S = d.size
    seed_var = float(np.var(d, ddof=1)) / S if S > 1 else 0.0
    paired = correct_a is not None and correct_b is not None and test_var is None
    if test_var is not None:
        test_var = float(test_var)
    elif paired:
        ca = np.asarray(correct_a, np.float64).reshape(S, -1)
        cb = np.asarray(correct_b, np.float64).reshape(S, -1)
        per_image = (cb - ca).mean(axis=0)
        m = per_image.size
        # at least the variance of 3 discordant images in m (the rule of three's 95 % bound when
        # none were seen): runs that agree on every image of a small test set still carry its noise
        test_var = max(float(np.var(per_image, ddof=1)) / m if m > 1 else 0.0, 3.0 / m**2)
    else:
        p = min(max(float(np.mean(np.concatenate([a, b]))), 0.05), 0.95)
        test_var = 2.0 * p * (1.0 - p) / n
    if S == 1:
        df = None
    elif seed_var > 0:
        df = (seed_var + test_var) ** 2 / (seed_var**2 / (S - 1))
    else:
        df = math.inf
    return Difference(float(d.mean()), math.sqrt(seed_var + test_var), S, n, paired, df)


def final_difference(results, ia, ib) -> Difference:
    """:func:`runs_difference` of the final test accuracies of typed results that hold the fields of
    :func:`iterlin.experiments._common.trained_final` (``final_test_acc`` (R,), ``final_test_correct``
    (R, n_test) or None) and ``n_test``."""
    return runs_difference(np.asarray(results.final_test_acc, np.float64), results.final_test_correct, ia, ib,
                           n_test=int(results.n_test))


def runs_difference(acc, correct, ia, ib, *, n_test: int) -> Difference:
    """:func:`difference` of runs ``ib`` against runs ``ia`` (index arrays, paired by seed) of the
    accuracies ``acc`` (R,), paired on the test images when ``correct`` (R, n_test) is given: e.g.
    the final test accuracies and correctness of :func:`iterlin.experiments._common.trained_final`."""
    ia, ib = np.atleast_1d(ia), np.atleast_1d(ib)
    pair = {} if correct is None else {"correct_a": np.asarray(correct)[ia], "correct_b": np.asarray(correct)[ib]}
    return difference(acc[ia], acc[ib], n_test=n_test, **pair)


def seed_interval(values) -> tuple[float, float, float, float]:
    """``(mean, se, lo, hi)`` over seeds of (S,) values (a ratio, a distance, one per seed): the
    mean, its standard error std(ddof=1)/√S and the 95 % Student's t interval
    [mean − q se, mean + q se], q = t_{0.975}(S − 1) (:func:`t_quantile`; 12.7 for two seeds);
    se, lo and hi are NaN for one seed (no spread to estimate)."""
    v = np.atleast_1d(np.asarray(values, np.float64))
    m = float(v.mean())
    if v.size < 2:
        return m, math.nan, math.nan, math.nan
    se = float(np.std(v, ddof=1) / math.sqrt(v.size))
    q = t_quantile(v.size - 1)
    return m, se, m - q * se, m + q * se


def runs_of(h: Mapping, K: float, lr: float | None = None) -> np.ndarray:
    """Indices of a sweep history's runs with period ``K`` (and learning rate ``lr``), one per seed,
    in seed order."""
    sel = np.asarray(h["K"], np.float64) == float(K)
    if lr is not None and "lr" in h:
        sel &= np.asarray(h["lr"], np.float64) == float(lr)
    return np.flatnonzero(sel)


def sweep_difference(h: Mapping, ia, ib, *, n_test: int, metric: str = "net_test_acc", point: int = -1) -> Difference:
    """:func:`difference` of runs ``ib`` against runs ``ia`` (index arrays, paired by seed) of a
    sweep history at evaluation ``point``; paired on the test images when the history records the
    runs' final per-image correctness (``net_test_correct``/``lin_test_correct``) and ``point`` is
    the last."""
    values = np.asarray(h[metric], np.float64)
    correct = h.get(metric.replace("_acc", "_correct")) if metric.endswith("test_acc") else None
    last = point in (-1, values.shape[-1] - 1)
    return runs_difference(values[..., point], correct if last else None, ia, ib, n_test=n_test)


def run_seeds(h: Mapping) -> np.ndarray:
    """(R,) each run's seed: the history's ``seed``, else its ``seed_index``, else 0."""
    if "seed" in h:
        return np.asarray(h["seed"])
    return np.asarray(h.get("seed_index", np.zeros(np.size(h["K"]), int)))

