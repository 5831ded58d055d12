"""Fig. 8: every linearisation solved by Adam (a large constant K) against K = 1 (Sec. 4.3).

The paper: iterative linearisation with each linearisation solved to convergence by Adam
(K = 2·10⁵, moments reset at each re-linearisation) generalises worse than K = 1 with SGD
(61.3 % against 69.4 %), and Adam itself is not the cause (Adam at K = 1 exceeds 70 %).

Config keys: ``K`` (the constant period of the Adam-solved run; the paper: 2·10⁵), ``lr_adam``
(Adam's learning rate, for the Adam-solved run and the Adam baseline), ``lr`` (SGD's, K = 1),
``steps``, ``batch_size`` (None: full batch), ``n_train``, ``n_test``, ``seed``, ``n_seeds``,
``n_evals``, ``n_eval_train``.

Three runs per seed (:func:`iterlin.experiments._common.seeds`; each seed its own initialisation
and batches, :func:`~iterlin.experiments._common.seed_keys`, shared by its three runs, so that the
runs are compared seed by seed and on the same test images):

* ``"solved"``: :func:`iterlin.solvers.adam_solve.train_adam_solved` with ``target_acc=None,
  plateau_tol=0``: every linearisation runs exactly K Adam steps (moments reset at each
  re-linearisation), the paper's "large constant K … intended to make sure that it reaches 100 %
  train accuracy with each re-linearisation and that these are spaced regularly". (With the
  default accuracy criterion the run would re-linearise every ``check_every`` steps as soon as the
  network itself fits the training set, i.e. become iterative linearisation with a small K.)
  Whether K was large enough is recorded, not assumed: ``relin_acc``.
* ``"sgd"``: K = 1 with SGD at ``lr``; ``"adam"``: K = 1 with Adam at ``lr_adam``.

The runs are trained one after the other, seed by seed (an Adam-solved run cannot be vmapped: its
convergence check sits under ``lax.cond``). Training metrics are measured on the first
``n_eval_train`` training images (the Adam-solved run's criterion always uses all of them).

Results: :class:`Results`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping, NamedTuple, Sequence

import matplotlib.pyplot as plt
import numpy as np
import optax

from ..solvers.adam_solve import train_adam_solved
from ..repro.claims import EXCEEDS_RULE, NA, Claim, divergence_row, exceeds, fmt_K, verdict
from ..repro.config import Images, Period, Positive, Rate, Steps, TestImages
from ..data import Dataset
from ..models import make_model
from ..repro.plotting import band, legend, mark_steps, panels, plot_sweep
from ..repro.stats import difference, pct
from ..training import History, train
from . import protocol
from ._common import Experiment, Seeds, Sweep, checkpoint_path, eval_points, load_data, network_correct, seed_keys, seeds

__all__ = ["Config", "Results", "SCALES", "EXPERIMENT", "RUNS", "PAPER", "load", "compute", "claims",
           "stack_runs", "relin_points", "kept", "sgd_better", "adam_better", "paper_numbers", "adam_value",
           "converged", "solved_rule", "kept_rule", "finite", "plot"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Seeds):
    """fig8's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "fig8"

    K: Period
    lr_adam: Positive
    lr: Rate
    steps: Steps
    batch_size: Images | None
    n_train: Images | None
    n_test: TestImages | None


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/fig8.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=15, lr_adam=1e-3, lr=0.05, steps=30, batch_size=None, n_train=12, n_test=60, seed=0,
        n_seeds=1, n_evals=4, n_eval_train=None,
    ),
    "cpu": dict(
        K=200, lr_adam=1e-3, lr=0.05, steps=3000, batch_size=100, n_train=500, n_test=None, seed=0,
        n_seeds=3, n_evals=15, n_eval_train=None,
    ),
    "gpu": dict(
        K=2000, lr_adam=1e-3, lr=1e-2, steps=20_000, batch_size=256, n_train=None, n_test=None,
        seed=0, n_seeds=3, n_evals=40, n_eval_train=5000,
    ),
    "paper": dict(  # K = 2e5 (the paper); lr_adam Adam's default, lr as Fig. 2; T = 10 K ours
        K=200_000, lr_adam=1e-3, lr=1e-3, steps=2_000_000, batch_size=256, n_train=50_000,
        n_test=10_000, seed=0, n_seeds=3, n_evals=100, n_eval_train=10_000,
    ),
}


class Results(NamedTuple):
    """fig8's results (:func:`compute`).

    ``solved``, ``sgd`` and ``adam`` are each the S runs of one kind stacked over seeds
    (:func:`stack_runs`): ``step`` (E,); ``n_relin``, ``{net,lin}_{train,test}_{loss,acc}`` (S, E);
    ``diverged``, ``diverged_step``, ``seed``, ``K``, ``lr`` (S,) (``K``: the run's period, 1 for
    the K = 1 runs; ``lr``: its learning rate) and ``seed_index`` (S,) 0..S−1, so that
    :func:`iterlin.repro.plotting.plot_sweep` draws each kind as the mean over seeds;
    ``net_test_correct`` (S, n_test) bool, whether each run's final network classifies each test
    image correctly (:func:`network_correct`, for the paired comparisons of
    :func:`iterlin.repro.stats.difference`).
    """

    #: the Adam-solved runs (K = ``config.K``); besides the layout above ``inner_steps`` (S, E) and
    #: the re-linearisation log (S, J), padded past a run's own J_s entries (−1 for steps, NaN for
    #: accuracies and losses, ``""`` for reasons, :data:`LOG_PAD`): ``relin_step``,
    #: ``relin_inner_steps``, ``relin_acc`` (the linear model's train accuracy at each
    #: re-linearisation, just before it), ``relin_loss``, ``relin_reason``
    solved: Sweep
    sgd: Sweep  #: K = 1 with SGD at ``lr``
    adam: Sweep  #: K = 1 with Adam at ``lr_adam``
    n_test: np.ndarray  #: () int, the test images
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


#: The runs of each seed: :class:`Results` field → its label in the claims and the plots.
RUNS = {"solved": "Adam-solved", "sgd": "K=1 SGD", "adam": "K=1 Adam"}

#: Per-run logs of the Adam-solved run (one entry per re-linearisation) and their padding values.
LOG_PAD = {"relin_step": -1, "relin_inner_steps": -1, "relin_acc": math.nan, "relin_loss": math.nan,
           "relin_reason": ""}

load = load_data


def stack_runs(histories: Sequence[Mapping], steps: Sequence[int]) -> dict:
    """Stack S single-run histories (one per seed) into one history with a leading seed axis.

    Args:
      histories: S histories of :func:`iterlin.training.train` (or ``train_adam_solved``); a run
        that diverged may have stopped before the last evaluation point: its per-point values are
        padded with its last recorded values (its frozen state, which an evaluation would repeat).
      steps: the E evaluation steps every run was scheduled for.

    Returns:
      ``step`` (E,); every per-point key as (S, E) float; ``diverged`` (S,) bool,
      ``diverged_step`` (S,) int; the re-linearisation logs of :data:`LOG_PAD` present in the
      histories as (S, J), J the longest log, padded with :data:`LOG_PAD`'s values.
    """
    E = len(steps)
    out: dict = {"step": np.asarray(steps)}
    skip = {"step", "diverged", "diverged_step", *LOG_PAD}
    for k in [k for k in histories[0] if k not in skip]:
        rows = []
        for h in histories:
            v = np.asarray(h[k], np.float64)
            if v.shape[0] < E:
                v = np.concatenate([v, np.repeat(v[-1:], E - v.shape[0], axis=0)])
            rows.append(v)
        out[k] = np.stack(rows)
    for k, fill in LOG_PAD.items():
        if k not in histories[0]:
            continue
        logs = [np.asarray(h[k]) for h in histories]
        J = max(len(v) for v in logs)
        dtype = str if isinstance(fill, str) else (np.int64 if isinstance(fill, int) else np.float64)
        out[k] = np.asarray([list(v.astype(dtype)) + [fill] * (J - len(v)) for v in logs], dtype=dtype).reshape(
            len(logs), J)
    out["diverged"] = np.asarray([bool(h["diverged"]) for h in histories])
    out["diverged_step"] = np.asarray([int(h["diverged_step"]) for h in histories])
    return out


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """For every seed, the Adam-solved run, K = 1 SGD and K = 1 Adam (see the module docstring and
    :class:`Results`)."""
    train_d, test_d = (data.x_train, data.y_train), (data.x_test, data.y_test)
    ev = eval_points(config.steps, config.n_evals)
    n_eval_train = config.n_eval_train
    eval_train_size = None if n_eval_train is None else min(n_eval_train, data.x_train.shape[0])
    K = config.K
    runs = {name: [] for name in RUNS}
    correct = {name: [] for name in RUNS}
    for s in seeds(config):
        init_key, data_key = seed_keys(s)
        model = make_model("cnn", init_key)
        common = dict(steps=config.steps, batch_size=config.batch_size, key=data_key, eval_data=test_d,
                      eval_steps=ev, eval_train_size=eval_train_size, progress=progress, config=config.to_dict())
        trained = {
            "solved": train_adam_solved(
                model.apply_fn, model.params, train_d, lr=config.lr_adam, K=K, target_acc=None, plateau_tol=0.0,
                check_every=max(1, int(min(K, config.steps))),
                checkpoint=checkpoint_path(checkpoint_dir, f"solved-seed{s}"), **common),
            "sgd": train(model.apply_fn, model.params, train_d, K=1, optimizer=optax.sgd(config.lr),
                         checkpoint=checkpoint_path(checkpoint_dir, f"sgd-seed{s}"), **common),
            "adam": train(model.apply_fn, model.params, train_d, K=1, optimizer=optax.adam(config.lr_adam),
                          checkpoint=checkpoint_path(checkpoint_dir, f"adam-seed{s}"), **common),
        }
        for name, (params, h) in trained.items():
            runs[name].append(h)
            correct[name].append(network_correct(model.apply_fn, params, *test_d))
    S = len(seeds(config))
    out = {name: Sweep(history=History.from_columns(stack_runs(runs[name], ev)),
                       K=np.full(S, float(K) if name == "solved" else 1.0), seed_index=np.arange(S),
                       lr=np.full(S, float(config.lr if name == "sgd" else config.lr_adam)),
                       seed=np.asarray(seeds(config)), net_test_correct=np.stack(correct[name]))
           for name in RUNS}
    return Results(**out, n_test=np.asarray(data.x_test.shape[0]))


def _final(h: Mapping, key: str = "net_test_acc") -> np.ndarray:
    """The final value of the per-point metric ``key`` of each seed, (S,); empty when the history
    does not record it."""
    if key not in h:
        return np.zeros(0)
    return np.asarray(h[key], np.float64).reshape(-1, np.shape(h[key])[-1])[:, -1]


def _diff(a: Mapping, b: Mapping, n_test: int):
    """:func:`iterlin.repro.stats.difference` of B's final network test accuracy against A's, paired by
    seed, and on the test images when both record ``net_test_correct``."""
    pair = {}
    if "net_test_correct" in a and "net_test_correct" in b:
        pair = {"correct_a": np.asarray(a["net_test_correct"]), "correct_b": np.asarray(b["net_test_correct"])}
    return difference(_final(a), _final(b), n_test=n_test, **pair)


def relin_points(h: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """The Adam-solved runs' re-linearisations for plotting: ``(steps (J,), acc (J, S))``, the
    j-th re-linearisation's step (the same for every seed that reached it: the period is constant)
    and each seed's linear-model train accuracy just before it (NaN where a seed has no j-th)."""
    step = np.atleast_2d(np.asarray(h.get("relin_step", np.zeros((1, 0))), np.int64))
    acc = np.atleast_2d(np.asarray(h.get("relin_acc", np.zeros((1, 0))), np.float64))
    return (step.max(axis=0) if step.size else np.zeros(0, np.int64)), acc.T



def kept(h: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """Each re-linearisation of the Adam-solved runs that falls on an evaluation point:
    ``(before, after)``, both (M,): the linear model's train accuracy just before it (on every
    training image, ``relin_acc``) and the network's right after it (``net_train_acc`` at that
    step, on the evaluation's training images). Equal up to sampling when the network at the
    solved parameters θ_s + Δθ is still described by its linearisation at θ_s (Eq. 2); far apart
    when Δθ has left the region where it is."""
    if "net_train_acc" not in h or "relin_step" not in h:
        return np.zeros(0), np.zeros(0)
    steps = np.asarray(h["step"], np.int64)
    net = np.atleast_2d(np.asarray(h["net_train_acc"], np.float64))
    relin_step = np.atleast_2d(np.asarray(h["relin_step"], np.int64))
    relin_acc = np.atleast_2d(np.asarray(h["relin_acc"], np.float64))
    before, after = [], []
    for seed in range(relin_step.shape[0]):
        for step, acc in zip(relin_step[seed], relin_acc[seed]):
            at = np.flatnonzero(steps == step)
            if step >= 0 and np.isfinite(acc) and at.size:
                before.append(acc)
                after.append(net[seed, at[0]])
    return np.asarray(before, np.float64), np.asarray(after, np.float64)


def _runs(results: Results) -> dict[str, Mapping]:
    """The histories of :data:`RUNS`, by name."""
    return {name: getattr(results, name) for name in RUNS}


def _mean(results: Results) -> str:
    return "mean over seeds" if _final(results.solved).size > 1 else "1 seed"


def _acc(results: Results) -> dict[str, float]:
    return {name: float(_final(h).mean()) for name, h in _runs(results).items()}


def _fitted(results: Results) -> dict[str, np.ndarray]:
    """Each run's network's final train accuracy per seed (empty where the history records none)."""
    return {name: _final(h, "net_train_acc") for name, h in _runs(results).items()}


def _better(row, results: Results, a: str, b: str, measured: str) -> tuple[str, str, str]:
    """B better than A beyond noise (:func:`~iterlin.repro.claims.exceeds`, paired on the test images),
    n/a unless every run ends at ≥ the row's ``value`` of train accuracy (the paper compares converged
    solutions)."""
    diff = _diff(getattr(results, a), getattr(results, b), int(np.asarray(results.n_test)))
    converged = all(bool(np.all(v >= row.value)) for v in _fitted(results).values() if v.size)
    return (measured + diff.describe(), exceeds(diff) if converged else NA,
            f"Δ = {RUNS[b]} − {RUNS[a]}; {EXCEEDS_RULE}; n/a unless every run ends at ≥ {pct(row.value, 0)} train "
            "accuracy (the paper compares converged solutions; row 'trained to convergence')")


@protocol.rule("fig8.sgd_better", needs=("value",))
def sgd_better(row, results: Results) -> tuple[str, str, str]:
    """K = 1 SGD generalises better than the Adam-solved run (:func:`_better`)."""
    acc = _acc(results)
    return _better(row, results, "solved", "sgd", f"Adam-solved (K={fmt_K(results.config.K)}): {pct(acc['solved'])}; "
                   f"K=1 SGD: {pct(acc['sgd'])} ({_mean(results)}); ")


@protocol.rule("fig8.adam_better", needs=("value",))
def adam_better(row, results: Results) -> tuple[str, str, str]:
    """The optimiser is not the cause: K = 1 Adam generalises better than the Adam-solved run (:func:`_better`)."""
    acc = _acc(results)
    return _better(row, results, "solved", "adam", f"K=1 Adam: {pct(acc['adam'])}; Adam-solved: {pct(acc['solved'])} "
                   f"({_mean(results)}); ")


#: The paper's final test accuracies (Sec. 4.3): the Adam-solved run and K = 1 SGD.
PAPER = {"solved": 0.613, "sgd": 0.694}


@protocol.rule("fig8.paper_numbers", needs=("margin", "judged_at"))
def paper_numbers(row, results: Results) -> tuple[str, str, str]:
    """The Adam-solved run and K = 1 SGD each within the row's margin of the paper's numbers (:data:`PAPER`),
    judged only at scale ``judged_at``."""
    acc = _acc(results)
    return (f"{pct(acc['solved'])} and {pct(acc['sgd'])} ({_mean(results)})",
            verdict(all(abs(acc[k] - v) <= row.margin for k, v in PAPER.items()),
                    applicable=results.config.scale == row.judged_at),
            f"each within {100 * row.margin:g} points; judged only at scale {row.judged_at!r}")


@protocol.rule("fig8.adam_value", needs=("value", "judged_at"))
def adam_value(row, results: Results) -> tuple[str, str, str]:
    """K = 1 Adam's mean final test accuracy above the row's ``value``, judged only at scale ``judged_at``."""
    acc = _acc(results)["adam"]
    return (f"{pct(acc)} ({_mean(results)})", verdict(acc > row.value, applicable=results.config.scale == row.judged_at),
            f"judged only at scale {row.judged_at!r}")


@protocol.rule("fig8.converged", needs=("value",), metrics=("net_train_acc",))
def converged(row, results: Results) -> tuple[str, str, str]:
    """Every run's network ends at ≥ the row's ``value`` of train accuracy; n/a without a record."""
    fitted = _fitted(results)
    rule = f"every run's network at ≥ {pct(row.value, 0)} train accuracy at its last step"
    if not all(v.size for v in fitted.values()):
        return "no train accuracy record", NA, rule
    return ("final train acc. of the network, lowest over seeds: "
            + "; ".join(f"{RUNS[name]} {pct(v.min())}" for name, v in fitted.items()),
            verdict(all(bool(np.all(v >= row.value)) for v in fitted.values())), rule)


@protocol.rule("fig8.solved", needs=("value",), metrics=("relin_acc",))
def solved_rule(row, results: Results) -> tuple[str, str, str]:
    """Every re-linearisation of the Adam-solved runs at ≥ the row's ``value`` of train accuracy."""
    relin_acc = np.asarray(results.solved.get("relin_acc", np.zeros(0)), np.float64)
    relin_acc = relin_acc[np.isfinite(relin_acc)]
    if not relin_acc.size:
        return "no re-linearisation in this run", NA, "needs steps ≥ K"
    return (f"linear model's train acc. at the {relin_acc.size} re-linearisations (all seeds): "
            + ", ".join(pct(v, 0) for v in relin_acc),
            verdict(bool(np.all(relin_acc >= row.value))),
            f"every re-linearisation at ≥ {pct(row.value, 0)} train accuracy (on every training image: no sampling "
            "noise)")


@protocol.rule("fig8.kept", needs=("margin",), metrics=("relin_acc", "net_train_acc"))
def kept_rule(row, results: Results) -> tuple[str, str, str]:
    """The network within the row's margin of the solved linear model at every re-linearisation on an
    evaluation point (:func:`kept`); n/a without one."""
    before, after = kept(results.solved)
    rule = (f"the network within {100 * row.margin:.0f} points of the linear model at every such re-linearisation; "
            "'no' means the solved step left the region where the linearisation describes the network")
    if not before.size:
        return "no re-linearisation on an evaluation point", NA, rule
    return (f"train acc. at the {before.size} re-linearisations on evaluation points (all seeds), linear model just "
            "before → network right after: " + ", ".join(f"{pct(b, 0)} → {pct(x, 0)}" for b, x in zip(before, after)),
            verdict(bool(np.all(after >= before - row.margin))), rule)


@protocol.rule("fig8.finite")
def finite(row, results: Results) -> Claim:
    """Every run of :data:`RUNS` finite (:func:`~iterlin.repro.claims.divergence_row`)."""
    bad = []
    for name, label in RUNS.items():
        h = getattr(results, name)
        div, at = np.atleast_1d(h["diverged"]), np.atleast_1d(h["diverged_step"])
        seed = np.atleast_1d(h.get("seed", np.arange(div.size)))
        bad += [f"{label} (seed {int(seed[i])}) at step {int(at[i])}" for i in np.flatnonzero(div)]
    return divergence_row(bad)


def claims(results: Results) -> list[Claim]:
    """The rows of fig8 in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): solving every
    linearisation generalises worse than K = 1 SGD, and Adam is not the cause (the shared noise rule
    over seeds, paired on the test images; n/a unless every run converged: the paper compares
    converged solutions); the paper's numbers at paper scale; whether every run converged; whether K
    sufficed to solve each linearisation; whether the network kept what each solved linearisation
    learned (:func:`kept`); divergence."""
    return protocol.claims("fig8", results)


EXPERIMENT = Experiment("fig8", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Left: the network's test accuracy of the three runs. Right: the Adam-solved run's training
    accuracy, the network (solid) and the linear model being optimised (dashed), the linear model's
    accuracy on every training image just before each re-linearisation (triangles; dotted
    verticals: the re-linearisations), and K = 1 SGD's network. Mean over seeds ± one standard
    error; a cross marks a run that diverged."""
    s, g, a = results.solved, results.sgd, results.adam
    fig, (left, right) = panels(2)
    for h, label, color in ((s, "K = {K}, each linearisation solved by Adam", "C3"), (g, "K = {K}, SGD", "C0"),
                            (a, "K = {K}, Adam", "C2")):
        plot_sweep(left, h, "net_test_acc", label=label, color=color)
    plot_sweep(right, s, "net_train_acc", label="Adam-solved: network", color="C3", diverged_label=None)
    plot_sweep(right, s, "lin_train_acc", label="Adam-solved: linear model (= network right after re-linearising)",
               color="C3", linestyle="--", marker=".", diverged_label=None)
    relin_step, relin_acc = relin_points(s)
    if relin_step.size:
        band(right, relin_step, relin_acc, axis=1, scale=100, color="C3", linestyle="none", marker="v", ms=9,
             label="linear model just before re-linearising (every training image)")
        mark_steps(right, relin_step, color="C3")
    plot_sweep(right, g, "net_train_acc", label="K = 1 SGD: network", color="C0", diverged_label=None)
    left.set(xlabel="step", ylabel="test accuracy (%)", title=f"CNN on CIFAR-10 ({results.config.scale} scale)")
    right.set(xlabel="step", ylabel="train accuracy (%)", title="training accuracy")
    legend(left)
    legend(right)
    plt.show()
