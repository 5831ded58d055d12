"""The statistics of the claims' noise rule: a difference of two accuracies with its 95 % t interval.

Every comparison of two accuracies in the claims tables (:mod:`iterlin.repro.claims`) goes through ONE noise
model, :func:`difference`: Δ = the mean over seeds of the per-seed difference, whose standard error
combines the seed-to-seed spread and the test set's sampling noise (paired on the same test images
when the runs' per-image correctness is known), with the Welch–Satterthwaite degrees of freedom of
that combination, and a 95 % Student's t interval (:class:`Difference`). A quantity measured once per
seed (a ratio, a slope) gets its t interval from :func:`seed_interval`. The verdicts that read these
intervals ("on par", "better") are rules of the claims, in :mod:`iterlin.repro.claims`.

The two-way model (``difference(..., model="two_way")``; the default stays ``"split"`` until the
claims switch) reads the per-(seed, image) differences d_si as a seeds × images crossed random-effects
design, d_si = Δ + a_s + b_i + c_si, and counts the seed × image interaction c once
(:func:`variance_components`, :class:`VarianceComponents`). From a pilot's components,
:func:`power` and :func:`seeds_needed` give the power of a row's test and the seeds it needs.

Also here: how the rows print numbers (:func:`pct`, :func:`num`), and the selection of a sweep
history's runs that are compared (:func:`runs_of`, :func:`run_seeds`, :func:`sweep_difference`,
:func:`runs_difference`, and :func:`final_difference` of typed results).
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple

import numpy as np

from ..validate import check_int

__all__ = ["pct", "num", "Difference", "difference", "t_quantile", "seed_interval", "final_difference", "runs_difference",
           "sweep_difference", "runs_of", "runs_where", "run_seeds", "MODELS", "VarianceComponents", "variance_components",
           "mean_variance", "Plan", "TESTS", "power", "seeds_needed"]

#: The noise models of :func:`difference`: ``"split"`` (seed spread + per-image variance of the seed
#: mean; counts the seed × image interaction twice, conservative) and ``"two_way"`` (a crossed
#: seeds × images random-effects model; the interaction once).
MODELS = ("split", "two_way")
#: The tests of a claims row that :func:`power` plans: ``"on_par"`` (equivalence: the 95 % interval
#: inside ±margin, i.e. two one-sided tests at 2.5 % each) and ``"exceeds"`` (one-sided: the 95 %
#: interval above 0, a one-sided test at 2.5 %).
TESTS = ("on_par", "exceeds")


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


def difference(acc_a, acc_b, *, n_test: int, correct_a=None, correct_b=None, test_var: float | None = None,
               model: str = "split") -> Difference:
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

    model: ``"split"`` (the default, all of the above) or ``"two_way"`` (:data:`MODELS`): the
      per-(seed, image) differences d_si = correct_b − correct_a as a crossed seeds × images
      random-effects design, d_si = Δ + a_s + b_i + c_si, whose grand mean has variance
      σ_a²/S + σ_b²/n + σ_c²/(S n) (:func:`mean_variance` of :func:`variance_components`); the split
      model's seed term MS_A/(S n) and test term MS_B/(S n) each hold σ_c²/(S n), so the split
      counts the interaction twice. Two-way: se² = (MS_A + MS_B − MS_AB)/(S n) (unbiased; at least
      MS_AB/(S n)), df by Satterthwaite over the three mean squares, at least the rule of three's 3/n²
      (df ∞ where that floor binds). In Clark's (1973) terms the two-way interval is the quasi-F
      test F′ of a crossed subjects × items design, and the split's is min F′ (MS_A + MS_B: a
      conservative bound). Needs ``correct_a`` and ``correct_b`` and no
      ``test_var``; with one seed it is the split model (nothing is counted twice). Δ is the same.
    """
    if model not in MODELS:
        raise ValueError(f"model={model!r} is not allowed: model must be one of {MODELS}")
    if model == "two_way" and (correct_a is None or correct_b is None or test_var is not None):
        raise ValueError("model='two_way' is not allowed without correct_a and correct_b (the per-(seed, image) "
                         f"scores), or with test_var (given: {test_var!r}); use model='split'")
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
    if model == "two_way" and S > 1:
        var, df = _two_way_variance(*_mean_squares(cb - ca))
        return Difference(float(d.mean()), math.sqrt(float(var)), S, n, paired, float(df))
    if S == 1:
        df = None
    elif seed_var > 0:
        df = (seed_var + test_var) ** 2 / (seed_var**2 / (S - 1))
    else:
        df = math.inf
    return Difference(float(d.mean()), math.sqrt(seed_var + test_var), S, n, paired, df)


# ------------------------------------------------------------------------------------------------
# The two-way model: seeds × images, the interaction once
# ------------------------------------------------------------------------------------------------


class _MeanSquares(NamedTuple):
    seed: float  # MS_A = n Σ_s (d̄_s· − d̄)² / (S − 1); E = σ_c² + n σ_a²; df S − 1
    image: float  # MS_B = S Σ_i (d̄_·i − d̄)² / (n − 1); E = σ_c² + S σ_b²; df n − 1
    interaction: float  # MS_AB = Σ_si (d_si − d̄_s· − d̄_·i + d̄)² / ((S − 1)(n − 1)); E = σ_c²
    n_seeds: int
    n_images: int


def _mean_squares(d) -> _MeanSquares:
    """The two-way analysis of variance without replication of an (S, n) array (S, n ≥ 2)."""
    d = np.asarray(d, np.float64)
    S, n = d.shape
    grand = d.mean()
    row, col = d.mean(axis=1), d.mean(axis=0)
    resid = d - row[:, None] - col[None, :] + grand
    return _MeanSquares(n * float(np.sum((row - grand) ** 2)) / (S - 1), S * float(np.sum((col - grand) ** 2)) / (n - 1),
                        float(np.sum(resid**2)) / ((S - 1) * (n - 1)), S, n)


def _two_way_variance(seed, image, interaction, S: int, n: int):
    """(se², df) of the two-way model's Δ̂ from its mean squares MS_A, MS_B, MS_AB (floats or arrays).

    Var(Δ̂) = σ_a²/S + σ_b²/n + σ_c²/(S n) = E[MS_A + MS_B − MS_AB]/(S n): the unbiased estimate
    (MS_A + MS_B − MS_AB)/(S n), df by Satterthwaite, (Σ c_k MS_k)² / Σ (c_k MS_k)²/df_k; at least the
    interaction's MS_AB/(S n) (df (S − 1)(n − 1)), below which no variance of the model lies; at least
    the rule of three's 3/n² (df ∞), as in the split model. (Truncating each component at 0 instead
    is biased upwards when σ_a² ≈ 0 with few seeds: it over-covers.)
    """
    seed, image, interaction = (np.asarray(v, np.float64) for v in (seed, image, interaction))
    total = seed + image - interaction
    low = total <= interaction
    denom = seed**2 / (S - 1) + image**2 / (n - 1) + interaction**2 / ((S - 1) * (n - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(low, float((S - 1) * (n - 1)), total**2 / denom)
    var = np.where(low, interaction, total) / (S * n)
    floor = 3.0 / n**2
    return np.maximum(var, floor), np.where(var >= floor, df, math.inf)


class VarianceComponents(NamedTuple):
    """The variance components of per-(seed, image) score differences, and the pool's size.

    The model (a crossed seeds × images random-effects design): d_si = Δ + a_s + b_i + c_si, with
    a_s ~ (0, ``seed``) the seed effect, b_i ~ (0, ``image``) the image effect and c_si ~ (0,
    ``interaction``) the seed × image interaction (with one score per seed and image it holds the
    residual too). ``n_images``: the evaluation images available (the held-out pool), n ≥ 2.
    Variances in squared accuracy units (a difference of 1 point is 0.01).
    """

    seed: float
    image: float
    interaction: float
    n_images: int


def variance_components(correct_a, correct_b, *, n_images: int | None = None) -> VarianceComponents:
    """A pilot's :class:`VarianceComponents` from its per-(seed, image) scores.

    Args:
      correct_a, correct_b: (S, n) per-(seed, image) correctness (bool or scores) of runs A and B,
        seed s of A paired with seed s of B, on the same n images; S ≥ 2, n ≥ 2.
      n_images: the pool the components are for (default: the pilot's n).

    The method of moments of the two-way analysis of variance of d = correct_b − correct_a, each
    component truncated at 0: seed = max(0, MS_A − MS_AB)/n, image = max(0, MS_B − MS_AB)/S,
    interaction = MS_AB (see :func:`difference`'s ``model="two_way"``).
    """
    a = np.asarray(correct_a, np.float64)
    b = np.asarray(correct_b, np.float64)
    if a.shape != b.shape or a.ndim != 2 or a.shape[0] < 2 or a.shape[1] < 2:
        raise ValueError(f"correct_a and correct_b of shapes {a.shape} and {b.shape} are not allowed: they must be "
                         "(S, n) arrays of one shape with S >= 2 seeds and n >= 2 images")
    ms = _mean_squares(b - a)
    n = ms.n_images if n_images is None else check_int(n_images, "n_images", minimum=2)
    return VarianceComponents(max(0.0, ms.seed - ms.interaction) / ms.n_images,
                              max(0.0, ms.image - ms.interaction) / ms.n_seeds, ms.interaction, n)


def mean_variance(components: VarianceComponents, n_seeds: int) -> tuple[float, float]:
    """(Var(Δ̂), df) of the mean difference over ``n_seeds`` seeds and the components' ``n_images``:
    σ_a²/S + σ_b²/n + σ_c²/(S n), and the df that :func:`difference`'s two-way estimate has at the
    expected mean squares (:func:`_expected_mean_squares`; Satterthwaite's)."""
    c = _check_components(components)
    S, n = _check_seeds(n_seeds), c.n_images
    _, df = _two_way_variance(*_expected_mean_squares(c, S), S, n)
    return c.seed / S + c.image / n + c.interaction / (S * n), float(df)


def _expected_mean_squares(c: VarianceComponents, S: int) -> tuple[float, float, float]:
    """E[MS_A], E[MS_B], E[MS_AB] = σ_c² + n σ_a², σ_c² + S σ_b², σ_c² (n = ``c.n_images``)."""
    return c.interaction + c.n_images * c.seed, c.interaction + S * c.image, c.interaction


def _check_components(components) -> VarianceComponents:
    if not isinstance(components, VarianceComponents):
        raise TypeError(f"components={components!r} is not allowed: it must be a VarianceComponents")
    bad = [f"{f}={v!r}" for f, v in zip(components._fields[:3], components[:3]) if not (math.isfinite(v) and v >= 0)]
    if bad or components.n_images < 2:
        raise ValueError(f"components={components!r} is not allowed: variances must be finite and >= 0 and "
                         "n_images >= 2" + (f" ({', '.join(bad)})" if bad else ""))
    return components


def _check_seeds(n_seeds, name: str = "n_seeds") -> int:
    return check_int(n_seeds, name, minimum=2, why="the seed term needs a spread")


class Plan(NamedTuple):
    """The seeds a row needs (:func:`seeds_needed`): ``n_seeds`` on ``n_images`` evaluation images give
    ``power`` (≥ the target) at the assumed true difference; ``se`` and ``df``: Δ̂'s standard error
    and the df of its estimate there."""

    n_seeds: int
    n_images: int
    power: float
    se: float
    df: float


def power(components: VarianceComponents, n_seeds: int, *, margin: float, test: str = "on_par",
          true_diff: float | None = None) -> float:
    """The probability that a row reads ``"yes"`` with ``n_seeds`` seeds on ``components.n_images``
    images, Δ̂ and its interval from :func:`difference`'s ``model="two_way"``.

    The rules are those of :func:`iterlin.repro.claims.on_par` and :func:`iterlin.repro.claims.exceeds` on the
    95 % t interval Δ̂ ± q se, q = t_{0.975}(df) (:data:`TESTS`):

    * ``"on_par"``: equivalence at ±``margin`` (two one-sided tests at 2.5 % each): yes when
      −margin < Δ̂ − q se and Δ̂ + q se < margin. ``true_diff`` defaults to margin/2; power falls as
      ``abs(Δ)`` grows, so this is the least power over every true ``abs(Δ) ≤ margin/2``.
    * ``"exceeds"``: one-sided at 2.5 %: yes when Δ̂ − q se > 0. ``true_diff`` defaults to ``margin``
      (the smallest gain worth detecting).

    Exact for the Gaussian model d_si = Δ + a_s + b_i + c_si of :class:`VarianceComponents`, where
    Δ̂ ~ N(Δ, σ²) (σ² of :func:`mean_variance`) is independent of the mean squares MS_A, MS_B, MS_AB,
    each E[MS]·χ²_k/k with k = S − 1, n − 1, (S − 1)(n − 1): the power is the expectation over the
    mean squares of P(yes | se, df) (Φ((m − q se − Δ)/σ) − Φ((−m + q se − Δ)/σ), at least 0, for
    on par; Φ((Δ − q se)/σ), the noncentral t, for exceeds), with se and df as :func:`difference`
    computes them (Satterthwaite's df, its floors). The expectation is a 3-d integral over the χ²
    quantiles, taken by scrambled Sobol points (2¹⁴, fixed seed: deterministic, error about 1e-4).
    """
    from scipy import stats
    from scipy.stats import qmc

    if test not in TESTS:
        raise ValueError(f"test={test!r} is not allowed: test must be one of {TESTS}")
    m = float(margin)
    if not (math.isfinite(m) and m > 0):
        raise ValueError(f"margin={margin!r} is not allowed: margin must be a positive number")
    delta = (m / 2 if test == "on_par" else m) if true_diff is None else float(true_diff)
    if not math.isfinite(delta):
        raise ValueError(f"true_diff={true_diff!r} is not allowed: true_diff must be a finite difference (or None)")
    c = components
    var, _ = mean_variance(c, n_seeds)
    S, n = int(n_seeds), c.n_images
    sigma = math.sqrt(var)
    if sigma == 0:
        return float(abs(delta) < m if test == "on_par" else delta > 0)
    u = qmc.Sobol(3, scramble=True, seed=0).random(2**14)
    dfs = (S - 1, n - 1, (S - 1) * (n - 1))
    ms = [e * stats.chi2.ppf(u[:, i], k) / k for i, (e, k) in enumerate(zip(_expected_mean_squares(c, S), dfs))]
    se2, df = _two_way_variance(*ms, S, n)
    half = stats.t.ppf(0.975, df) * np.sqrt(se2)
    if test == "exceeds":
        p = stats.norm.cdf((delta - half) / sigma)
    else:
        p = np.maximum(0.0, stats.norm.cdf((m - half - delta) / sigma) - stats.norm.cdf((-m + half - delta) / sigma))
    return float(np.mean(p))


def seeds_needed(components: VarianceComponents, *, margin: float, test: str = "on_par", true_diff: float | None = None,
                 target: float = 0.8, max_seeds: int = 1000) -> Plan:
    """The fewest seeds (≥ 2) whose :func:`power` reaches ``target`` on ``components.n_images`` images.

    A ValueError when ``max_seeds`` seeds do not reach it: the image terms σ_b²/n + σ_c²/(S n) do not
    shrink with seeds, so the pool is too small; the message gives the images that would do at
    ``max_seeds`` seeds (or says that none would).

    >>> pilot = VarianceComponents(seed=0.0, image=0.0028, interaction=0.066, n_images=4592)
    >>> plan = seeds_needed(pilot, margin=0.02)  # on par within ±2 points, true abs(Δ) ≤ 1 point
    >>> plan.n_seeds, round(plan.power, 2)
    (4, 0.93)
    >>> seeds_needed(pilot, margin=0.01).n_seeds
    8
    """
    if not 0 < target < 1:
        raise ValueError(f"target={target!r} is not allowed: target must be a power in (0, 1)")
    top = _check_seeds(max_seeds, "max_seeds")

    def achieved(S, c=components):
        return power(c, S, margin=margin, test=test, true_diff=true_diff)

    if achieved(top) < target:
        pools = (components.n_images * 2**k for k in range(1, 16))
        more = next((n for n in pools if achieved(top, components._replace(n_images=n)) >= target), None)
        hint = (f"{more} images (the pool doubled until enough) would reach it at {top} seeds" if more
                else "no pool would (the seed term alone is too large)")
        raise ValueError(f"components={components!r} is not allowed: {top} seeds on {components.n_images} images "
                         f"give power {achieved(top):.2f} < {target} at margin {margin} ({test}); {hint}")
    lo, hi = 2, top  # power rises with seeds (variance and df improve): bisect for the first that reaches it
    if achieved(lo) >= target:
        hi = lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if achieved(mid) >= target else (mid, hi)
    var, df = mean_variance(components, hi)
    return Plan(hi, components.n_images, achieved(hi), math.sqrt(var), df)


def final_difference(results, ia, ib, *, model: str = "split") -> Difference:
    """:func:`runs_difference` of the final test accuracies of typed results that hold the fields of
    :func:`iterlin.experiments._common.trained_final` (``final_test_acc`` (R,), ``final_test_correct``
    (R, n_test) or None) and ``n_test``."""
    return runs_difference(np.asarray(results.final_test_acc, np.float64), results.final_test_correct, ia, ib,
                           n_test=int(results.n_test), model=model)


def runs_difference(acc, correct, ia, ib, *, n_test: int, model: str = "split") -> Difference:
    """:func:`difference` of runs ``ib`` against runs ``ia`` (index arrays, paired by seed) of the
    accuracies ``acc`` (R,), paired on the test images when ``correct`` (R, n_test) is given: e.g.
    the final test accuracies and correctness of :func:`iterlin.experiments._common.trained_final`."""
    ia, ib = np.atleast_1d(ia), np.atleast_1d(ib)
    pair = {} if correct is None else {"correct_a": np.asarray(correct)[ia], "correct_b": np.asarray(correct)[ib]}
    return difference(acc[ia], acc[ib], n_test=n_test, model=model, **pair)


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


def runs_where(runs: Mapping, **where) -> np.ndarray:
    """Indices of the runs (rows of ``runs``' (Q,) columns, with a ``seed`` column) whose columns
    equal ``where``'s values (float columns by ``numpy.isclose``), in seed order (stable)."""
    seed = np.asarray(runs["seed"])
    mask = np.ones(len(seed), bool)
    for k, v in where.items():
        col = np.asarray(runs[k])
        mask &= np.isclose(col, v) if col.dtype.kind == "f" else (col == v)
    idx = np.nonzero(mask)[0]
    return idx[np.argsort(seed[idx], kind="stable")]


def sweep_difference(h: Mapping, ia, ib, *, n_test: int, metric: str = "net_test_acc", point: int = -1,
                     model: str = "split") -> Difference:
    """:func:`difference` of runs ``ib`` against runs ``ia`` (index arrays, paired by seed) of a
    sweep history at evaluation ``point``; paired on the test images when the history records the
    runs' final per-image correctness (``net_test_correct``/``lin_test_correct``) and ``point`` is
    the last."""
    values = np.asarray(h[metric], np.float64)
    correct = h.get(metric.replace("_acc", "_correct")) if metric.endswith("test_acc") else None
    last = point in (-1, values.shape[-1] - 1)
    return runs_difference(values[..., point], correct if last else None, ia, ib, n_test=n_test, model=model)


def run_seeds(h: Mapping) -> np.ndarray:
    """(R,) each run's seed: the history's ``seed``, else its ``seed_index``, else 0."""
    if "seed" in h:
        return np.asarray(h["seed"])
    return np.asarray(h.get("seed_index", np.zeros(np.size(h["K"]), int)))

