"""Fig. 4: ResNet-18 on CIFAR-10, without and with BatchNorm, K = 1 against a large K (Sec. 4.1).

Two panels as in the paper:

* ``"no_bn"``: the CIFAR ResNet-18 without BatchNorm (``make_model("resnet18")``), no data
  augmentation; periods ``K`` at learning rate ``lr`` (the paper: K = 10⁶, lr 7·10⁻⁷);
* ``"bn"``: with BatchNorm (``make_model("resnet18_bn", bn_mode=...)``) and, when ``augment_bn``,
  random flips and 4-pixel crops; periods ``K_bn`` at ``lr_bn`` (the paper: K = 10⁵, lr 10⁻⁵).

Each run is iterative linearisation (Algorithm 1) with plain SGD and softmax cross-entropy on the
linearised logits. BatchNorm is linearised as the paper does ("due to linearising the BatchNorm
layer"): with ``bn_mode="batch"`` (default) the network normalises every batch by its own
statistics inside f(θ, x), and those statistics are linearised with everything else; with
``bn_mode="frozen"`` the statistics are constants frozen at θ_s and re-estimated from the current
batch at each re-linearisation (``refresh`` of :func:`iterlin.models.make_model`). In batch mode the
evaluation normalises each evaluation chunk (up to 1000 images) by its own statistics.

Seeds: every seed of :func:`iterlin.experiments._common.seeds` has its own initialisation and
batches (:func:`~iterlin.experiments._common.seed_keys`), shared by that seed's runs of every K
in a panel, so that K = 1 and the large K are compared seed by seed and on the same test images.
Each panel is one :func:`iterlin.training.train_sweep` over every seed × K (seed-major, R = S·len(K)
runs; one batch key per run): its programs are compiled once per panel, not per run; on a CPU
the runs are stepped one after the other (a vmapped ResNet-18 step costs more there than the
steps one by one), on an accelerator vmapped. A run that diverges (a NaN or huge loss) is frozen at its last finite
parameters while the others go on; ``diverged`` and ``diverged_step`` record it. The paper reports
that BatchNorm runs "are far more likely to diverge due to linearising the BatchNorm layer".

Evaluation: the network f(θ_t) on every test image (:func:`net_test_callback`: the paper's Fig. 4
shows the network's test accuracy), and the network and the current linear model on the first
``n_eval_train`` training images (the training loop's evaluation). The linear model is not
evaluated on the test set: a linearised ResNet-18 pass costs about three forward passes, and on a
CPU one evaluation of both models on the 932 test images costs as much as about fifty training
steps of 16 images.

Config keys: ``K``, ``lr`` (no-BN panel: periods, including 1, and learning rate); ``K_bn``,
``lr_bn``, ``augment_bn`` (BN panel); ``bn_mode`` (``"batch"`` or ``"frozen"``); ``steps``,
``batch_size``, ``n_train``, ``n_test``, ``seed``, ``n_seeds``, ``n_evals``, ``n_eval_train``,
``n_sharpness``, ``sharpness_iters``, ``sharpness_every`` (shared; the sharpness record of
:func:`~iterlin.experiments._common.sharpness_callback`, with each panel's rate).

Results: :class:`Results`, one sweep history per panel (:data:`PANELS` names its fields).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, ClassVar, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

from ..repro.claims import NA, UNDECIDED, Claim, beyond
from ..repro.config import BNMode, Flag, Images, Period, Positive, Rate, Steps, TestImages
from ..data import Dataset
from ..repro.failures import EXPLODING, exploded_runs
from ..losses import get_loss
from ..models import make_model
from ..repro.plotting import bound_panel, legend, panels, plot_sweep
from ..repro.stats import seed_interval
from ..training import train_sweep
from ..tree import tree_index, tree_stack
from . import protocol
from ._common import (
    Experiment,
    Seeds,
    Sharpness,
    Sweep,
    check_sharpness,
    checkpoint_path,
    eval_points,
    load_data,
    merge_callbacks,
    seed_keys,
    seeds,
    sharpness_callback,
)

__all__ = [
    "Results", "SCALES", "EXPERIMENT", "Panel", "PANELS", "panel_settings", "load", "compute", "claims", "net_test_callback", "fisher_one_sided", "sharpest_per_seed", "bn_bound",
    "divergence_counts", "bn_divergence", "plot",
]

INF = math.inf


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Seeds, Sharpness):
    """fig4's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "fig4"

    K: tuple[Period, ...]
    lr: Rate
    K_bn: tuple[Period, ...]
    lr_bn: Positive
    augment_bn: Flag
    bn_mode: BNMode
    steps: Steps
    batch_size: Images | None
    n_train: Images | None
    n_test: TestImages | None


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/fig4.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 2], lr=0.01, K_bn=[1, 2], lr_bn=0.01, augment_bn=True, bn_mode="batch", steps=4,
        batch_size=4, n_train=16, n_test=16, seed=0, n_seeds=1, n_evals=4, n_eval_train=None,
        n_sharpness=4, sharpness_iters=2, sharpness_every=2,
    ),
    "cpu": dict(
        K=[1, 20], lr=0.003, K_bn=[1, 20], lr_bn=0.003, augment_bn=True, bn_mode="batch", steps=120,
        batch_size=64, n_train=None, n_test=None, seed=0, n_seeds=3, n_evals=3, n_eval_train=64,
        n_sharpness=64, sharpness_iters=10, sharpness_every=40,
    ),
    "gpu": dict(
        K=[1, 60], lr=0.001, K_bn=[1, 60], lr_bn=0.001, augment_bn=True, bn_mode="batch", steps=360,
        batch_size=64, n_train=None, n_test=None, seed=0, n_seeds=8, n_evals=3, n_eval_train=64,
        n_sharpness=64, sharpness_iters=10, sharpness_every=120,
    ),
    "paper": dict(  # lr 7e-7, K = 1e6 (no BN); lr 1e-5, K = 1e5 (BN + augmentation): the paper's.
        K=[1, 1_000_000], lr=7e-7, K_bn=[1, 100_000], lr_bn=1e-5, augment_bn=True, bn_mode="batch",
        steps=10_000_000, batch_size=256, n_train=50_000, n_test=10_000, seed=0, n_seeds=3, n_evals=100,
        n_eval_train=10_000, n_sharpness=1000, sharpness_iters=30, sharpness_every=1_000_000,
    ),
}


class Results(NamedTuple):
    """fig4's results (:func:`compute`). Each panel's sweep history (R = S·len(K) runs, seed-major):
    ``step`` (E,); ``n_relin``, ``net_test_{loss,acc}`` and ``{net,lin}_train_{loss,acc}`` (R, E);
    ``diverged``, ``diverged_step``, ``K`` (R,) float (∞ as ``inf``), ``lr``, ``seed_index`` (R,)
    0..S−1, ``seed`` (R,); ``sharpness`` and ``lr_over_bound`` (R, E), λ_max of the linear model's
    curvature on the first ``n_sharpness`` training images and η·λ_max/2 (NaN at evaluation points
    off ``sharpness_every``); ``net_test_correct`` (R, n_test) bool, whether each run's final
    network classifies each test image correctly (for paired comparisons)."""

    no_bn: Sweep  #: the no-BatchNorm panel's sweep history (every seed × ``K``, seed-major)
    bn: Sweep  #: the BatchNorm panel's sweep history (every seed × ``K_bn``, seed-major)
    n_test: np.ndarray  #: () int, the test images
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


class Panel(NamedTuple):
    """One panel of Fig. 4: the model (:func:`iterlin.models.make_model`'s name), its periods ``K``,
    rate ``lr`` and whether its training images are augmented."""

    model: str
    K: tuple
    lr: float
    augment: bool


#: The panels of Fig. 4, by their field of :class:`Results` (:func:`panel_settings`).
PANELS = ("no_bn", "bn")


def panel_settings(config: Config) -> dict[str, Panel]:
    """The :data:`PANELS` of ``config``: ResNet-18 without BatchNorm (``K``, ``lr``, no augmentation)
    and with it (``K_bn``, ``lr_bn``, ``augment_bn``)."""
    return {"no_bn": Panel("resnet18", config.K, config.lr, False),
            "bn": Panel("resnet18_bn", config.K_bn, config.lr_bn, config.augment_bn)}


def load(config: Config) -> Dataset:
    """CIFAR-10 as :func:`~iterlin.experiments._common.load_data`, and ``n_sharpness <= n_train`` checked."""
    return check_sharpness(config, load_data(config))


def net_test_callback(apply_fn: Callable, x, y, batch_size: int = 1000) -> Callable:
    """A :func:`iterlin.training.fit` callback that evaluates the network on the test set.

    Returns ``callback(step, state) -> dict`` for a sweep state (every leaf (R, ...)): for each run
    r, the network f(θ_r, ·) on ``x`` (N, ...) in chunks of ``batch_size`` (the training loop's
    evaluation chunks, so that a BatchNorm network in batch mode is normalised alike), giving
    ``net_test_loss`` (R,) the mean softmax cross-entropy, ``net_test_acc`` (R,) the accuracy and
    ``net_test_correct`` (R, N) bool, whether argmax f(θ_r, x_n) = y_n.
    """
    ce = get_loss("ce")

    @jax.jit
    def chunk(params, xb, yb):
        out = apply_fn(params, xb)
        return ce.per_example(out, yb), jnp.argmax(out, -1) == yb

    x, y = jnp.asarray(x), jnp.asarray(y)
    n = int(x.shape[0])

    def callback(step, state):
        runs = int(np.shape(jax.tree.leaves(state.params)[0])[0])
        losses, correct = [], []
        for r in range(runs):
            p = tree_index(state.params, r)
            parts = [jax.device_get(chunk(p, x[i:i + batch_size], y[i:i + batch_size]))
                     for i in range(0, n, batch_size)]
            losses.append(np.concatenate([np.asarray(a, np.float64) for a, _ in parts]).mean())
            correct.append(np.concatenate([np.asarray(c, bool) for _, c in parts]))
        correct = np.stack(correct)
        return {"net_test_loss": np.asarray(losses), "net_test_acc": correct.mean(axis=1), "net_test_correct": correct}

    return callback


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Both panels, each one sweep over every seed × K (see the module docstring)."""
    steps = eval_points(config.steps, config.n_evals)
    n_eval_train = config.n_eval_train
    eval_train_size = None if n_eval_train is None else min(n_eval_train, data.x_train.shape[0])
    seed_list = seeds(config)
    out: dict = {}
    for name, panel in panel_settings(config).items():
        Ks = list(panel.K)
        bn_mode = config.bn_mode if panel.model == "resnet18_bn" else None
        inits, keys = [], []
        for s in seed_list:
            init_key, data_key = seed_keys(s)
            model = make_model(panel.model, init_key, bn_mode=bn_mode)
            inits += [model.params] * len(Ks)
            keys += [data_key] * len(Ks)
        params = tree_stack(inits)
        _, hist = train_sweep(
            model.apply_fn, params, (data.x_train, data.y_train), K=Ks * len(seed_list),
            steps=config.steps, optimizer=optax.sgd(panel.lr), loss="ce", batch_size=config.batch_size,
            key=jnp.stack(keys), refresh=model.refresh, eval_steps=steps, eval_train_size=eval_train_size,
            augment=bool(panel.augment),
            callback=merge_callbacks(
                sharpness_callback(config, data, panel.lr),
                lambda apply_fn, params0: net_test_callback(apply_fn, data.x_test, data.y_test),
            )(model.apply_fn, params),
            checkpoint=checkpoint_path(checkpoint_dir, name), progress=progress, config=config.to_dict(),
            vectorise=True,  # vmapped on every backend, as the reference runs were computed (fit: vectorise)
        )
        extra = dict(hist.extra)
        final_correct = np.asarray(extra.pop("net_test_correct"), bool)[:, -1, :]  # the callback's last point
        seed_index = np.repeat(np.arange(len(seed_list)), len(Ks))
        out[name] = Sweep(history=dataclasses.replace(hist, extra=extra),
                          K=np.tile(np.asarray([float(k) for k in Ks], np.float64), len(seed_list)),
                          seed_index=seed_index, lr=np.full(len(Ks) * len(seed_list), float(panel.lr)),
                          seed=np.asarray(seed_list)[seed_index], net_test_correct=final_correct)
    return Results(**out, n_test=np.asarray(data.x_test.shape[0]))


def fisher_one_sided(a: int, n_a: int, b: int, n_b: int) -> float:
    """Fisher's exact test: the probability, with ``a + b`` events spread at random over
    ``n_a + n_b`` runs, that group A (``n_a`` runs) gets ``a`` or more of them (hypergeometric
    upper tail). Small: A's rate exceeds B's beyond chance."""
    for name, v, hi in (("a", a, n_a), ("b", b, n_b)):
        if not 0 <= v <= hi:
            raise ValueError(f"{name}={v} is not allowed: it must lie in [0, {hi}] (events among that group's runs)")
    m, n = a + b, n_a + n_b
    total = math.comb(n, m)
    return sum(math.comb(n_a, k) * math.comb(n_b, m - k) for k in range(a, min(m, n_a) + 1)) / total


def divergence_counts(results: Results) -> tuple[int, int, int, int]:
    """``(diverged with BN, BN runs, diverged without BN, no-BN runs)``, counted over every seed and K:
    a run diverged when the guard stopped it or its loss exploded (:func:`iterlin.repro.failures.exploded_runs`)."""
    d_b, d_nb = (np.asarray(h["diverged"], bool) | exploded_runs(h) for h in (results.bn, results.no_bn))
    return int(d_b.sum()), int(d_b.size), int(d_nb.sum()), int(d_nb.size)


def _rates(results: Results) -> dict[str, str]:
    """Each panel's learning rates as text (``"0.001"``, or ``"0.001, 0.003"``), for the claims rows."""
    return {p: ", ".join(f"{v:g}" for v in np.unique(np.asarray(getattr(results, p)["lr"], np.float64)))
            for p in PANELS}


@protocol.rule("fig4.divergence_count", needs=("margin",))
def bn_divergence(row, results: Results) -> tuple[str, str, str]:
    """"BatchNorm runs diverge more easily": the counts of diverged runs with and without BatchNorm
    (every seed and K), decided by Fisher's exact test, one-sided each way at the row's margin."""
    alpha = row.margin
    a, n_a, b, n_b = divergence_counts(results)
    more, less = fisher_one_sided(a, n_a, b, n_b), fisher_one_sided(b, n_b, a, n_a)
    holds = "yes" if more < alpha else ("no" if less < alpha else UNDECIDED)
    lr = _rates(results)
    same = lr["bn"] == lr["no_bn"] and np.array_equal(np.unique(np.asarray(results.bn["K"], np.float64)),
                                                      np.unique(np.asarray(results.no_bn["K"], np.float64)))
    setting = ("the same learning rate and K in both panels" if same
               else "learning rates or K differ between the panels (as in the paper)")
    return (
        f"diverged or loss exploded: BN {a}/{n_a} runs (lr {lr['bn']}), no BN {b}/{n_b} runs (lr {lr['no_bn']}); "
        f"one-sided Fisher p = {more:.2f} (BN more), {less:.2f} (BN fewer)",
        holds,
        f"Fisher's exact test on the counts of diverged runs (stopped by the guard, or a loss above {EXPLODING:g}× its "
        f"start): yes when BN diverged more often at p < {alpha:g}, "
        f"no when less often at p < {alpha:g}, else undecided (no divergence at all decides nothing); {setting}",
    )


def sharpest_per_seed(h: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """``(seeds (S,), λ (S,))``: per seed (``h["seed_index"]``), the largest λ_max of the linear model's
    curvature recorded along any of that seed's runs (``sharpness`` (R, E), NaN off the record's
    schedule, every K pooled); NaN for a seed with no record."""
    seed = np.asarray(h["seed_index"])
    lam = np.asarray(h["sharpness"], np.float64).reshape(len(seed), -1)
    uniq = np.unique(seed)
    top = np.array([np.nanmax(lam[seed == s]) if np.isfinite(lam[seed == s]).any() else np.nan for s in uniq])
    return uniq, top


@protocol.rule("fig4.bound")
def bn_bound(row, results: Results) -> tuple[str, str, str]:
    """"BatchNorm lowers the rate at which a linearisation diverges": the stability bound 2/λ_max(θ_s)
    of the linear model (Sec. 3: gradient descent on it diverges once η > 2/λ_max), compared seed
    by seed through the largest λ_max each seed's runs recorded (:func:`sharpest_per_seed`) at the
    linearisations they trained on (every record but the last step's, on which no step was taken). Per
    seed d = log₁₀(λ_max with BN / λ_max without); decided by the 95 % t interval of the mean of d
    over the seeds both panels recorded (:func:`iterlin.repro.claims.beyond`): "yes" above 0 (BatchNorm's
    bound lower), "no" below, else undecided; n/a without a record in both panels."""
    rule = ("per seed d = log₁₀ of the largest λ_max recorded along its BN runs over that along its no-BN runs "
            "(every K; only the linearisations trained on: the record at the last step, a linearisation no step "
            "was taken on, is left out; λ_max of the linear model's curvature on the first training images, power "
            "iteration: a lower bound); 'yes' when the 95 % t interval of mean d over seeds lies above 0, 'no' when "
            "below, else undecided")
    if any("sharpness" not in getattr(results, p) for p in PANELS):
        return "no sharpness record", NA, rule
    trained = ({"seed_index": h["seed_index"], "sharpness": np.asarray(h["sharpness"], np.float64)[:, :-1]}
               for h in (results.bn, results.no_bn))  # the record at the last step: never trained on
    (s_b, l_b), (s_n, l_n) = (sharpest_per_seed(h) for h in trained)
    common = np.intersect1d(s_b[np.isfinite(l_b)], s_n[np.isfinite(l_n)])
    if common.size == 0:
        return "no sharpness record in both panels", NA, rule
    lb, ln = l_b[np.isin(s_b, common)], l_n[np.isin(s_n, common)]
    d = np.log10(lb / ln)
    m, _, lo, hi = seed_interval(d)
    lr = _rates(results)
    interval = f"[{lo:+.2f}, {hi:+.2f}]" if np.isfinite(lo) else "(one seed: no interval)"
    measured = (f"largest λ_max per seed, median over {common.size} seeds: BN {np.median(lb):.0f} (lr {lr['bn']}, "
                f"augmented), no BN {np.median(ln):.0f} (lr {lr['no_bn']}); mean log₁₀ ratio {m:+.2f}, "
                f"95 % t interval {interval}, i.e. BN/no BN ×{10 ** m:.2f}")
    return measured, beyond(d, 0.0, above=True), rule


def claims(results: Results) -> list[Claim]:
    """The rows of fig4 in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): large K on par
    with SGD without and with BatchNorm; BatchNorm runs diverge more easily (:func:`bn_divergence`)
    and BatchNorm lowers the linear model's stability bound (:func:`bn_bound`); every run finite;
    each panel's linear model stable."""
    return protocol.claims("fig4", results)


EXPERIMENT = Experiment("fig4", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Top: the network's test accuracy per panel. Middle: the training loss of the network
    (solid) and of the linear model being trained (dashed, large K), on the first n_eval_train
    training images. Mean over seeds ± one standard error; a cross marks a run that diverged (its
    curve stays at its last finite state). Bottom (when the run records the sharpness): the linear
    model's bound 2/λ_max(θ_s) per run against η (:func:`iterlin.repro.plotting.bound_panel`)."""
    titles = {"no_bn": "no BatchNorm, no augmentation",
              "bn": f"BatchNorm ({results.config.bn_mode} statistics) + augmentation"}
    bounds = all("lr_over_bound" in getattr(results, key) for key in titles)
    fig, axes = panels(2, 3 if bounds else 2, squeeze=False,
                       suptitle=f"ResNet-18 on CIFAR-10 ({results.config.scale} scale)")
    for col, (key, title) in enumerate(titles.items()):
        if bounds:
            bound_panel(axes[2, col], getattr(results, key))
        h, top, bottom = getattr(results, key), axes[0, col], axes[1, col]
        lines = plot_sweep(top, h, "net_test_acc", label="K = {K}, lr = {lr:g}: network")
        plot_sweep(bottom, h, "net_train_loss", scale=1, color=lines, label="K = {K}: network",
                   diverged_label=None)
        plot_sweep(bottom, h, "lin_train_loss", scale=1, color=lines, linestyle="--", marker=None,
                   select=lambda k: k > 1, label="K = {K}: linear model", diverged_label=None)
        top.set(title=title, ylabel="test accuracy (%)")
        bottom.set(xlabel="step", ylabel="training loss")
        legend(top)
        legend(bottom)
    plt.show()
