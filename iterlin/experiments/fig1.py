"""Fig. 1: the spectrum of K, from gradient descent to Gauss–Newton (Sec. 3.1, 3.3).

In the paper Fig. 1 is a schematic ("for small values of K, it is close enough to (stochastic)
gradient descent that it achieves comparable performance, and for very large K, it will train
until convergence for each linearisation giving the same results for all larger K"). Here it is
measured on the paper's 1-d regression of Fig. 9 (quintic, MLP 5×50, MSE, full batch), where the
K → ∞ end is exactly Gauss–Newton: final test RMSE against K on a log grid from 1 to ∞, every run
trained to convergence, with gradient descent (K = 1), Gauss–Newton (λ = 0, Eq. 5) and a damped
Gauss–Newton run (Eq. 6) marked; plus the K ↔ λ bridge of Sec. 3.3 on the model's own NTK
spectrum (:func:`iterlin.closed_form.residual_spectrum`, ``gd_filter``, ``gn_filter``,
``equivalent_damping``). Every value of the setting is ours (the paper has no experiment for
this figure); the model's initialisation and float64 are explained in :mod:`iterlin.experiments.fig9`.

Iterative linearisation in the small-learning-rate limit
---------------------------------------------------------
With MSE and full batch, K steps of gradient descent with step η on one linearisation act on the
NTK eigen-directions as the filter φ_K(σ) = (1 − (1 − ησ)^K)/σ (:func:`iterlin.closed_form.gd_filter`);
for ησ ≪ 1 this is gradient flow for the time τ = Kη, φ(σ) = (1 − e^{−στ})/σ (Eq. 18), and for
τ → ∞ the minimum-norm solution of the linearised problem, i.e. exactly the Gauss–Newton step
(Eq. 5, 19). :func:`iterlin.gauss_newton.gauss_newton_train` with ``filter="flow"`` performs one
such linearisation per step in closed form (one Jacobian and one N×N eigendecomposition, whatever
K), so "each linearisation trained for K steps" costs the same for K = 10 and K = 10⁷ and can
never overshoot. Literal gradient descent at a fixed learning rate is different at large K: the
NTK's top eigenvalue grows as the network moves (progressive sharpening; measured here from 30 at
initialisation to > 2000 within a few thousand steps), and once ησ_max > 2 the linear model
diverges within its K steps, while plain GD (K = 1) survives at the edge of stability. Small K,
where the closed form would need more than ``max_relin`` linearisations (:func:`plan`), is
trained literally with :func:`iterlin.training.train_sweep`.

Losses in the Gauss–Newton steps are summed over examples (Eq. 6 literally); the gradient-descent
learning rate ``lr`` is for the MEAN loss (as :func:`iterlin.training.train`), i.e. the summed-loss
step is η = lr / N.


Config keys: ``K`` (list of periods; ∞ = never re-linearise), ``lr`` (GD learning rate for the
mean loss; η = lr/N), ``steps`` (T, literal GD steps), ``n_relin`` (R, the least number of
linearisations of a closed-form run), ``max_relin`` (see :func:`plan`), ``damping`` (λ of
the damped Gauss–Newton run), ``gn_steps`` (Gauss–Newton steps), ``seed`` and ``n_seeds``
(seeds ``seed, …, seed + n_seeds − 1``), ``n_train``, ``n_test``, ``n_evals``, ``x64``.

Results:
  ``K`` (NK,), ``method`` (NK,) str (``"gd"``/``"flow"``/``"kernel"``), ``n_relin`` (NK,)
  linearisations per run, ``time`` (NK,) training time in units of the summed-loss flow (Tη or
  Rτ; ∞ for ``"kernel"``); ``{net,lin}_{train,test}_rmse`` (NK, S) at the end and
  ``net_train_rmse_mid`` (NK, S) half-way (to judge convergence); ``diverged`` (NK, S).
  For K = ∞ the network row is f(θ_∞), the linear row the converged linear model.
  ``gn``: ``damping`` (2,) = [0, λ], ``equiv_K`` (2,) = [∞, 1/(λη)] (the K whose GD filter
  switches where 1/(σ + λ) does, ``equivalent_damping``'s scale rule), ``net_{train,test}_rmse``
  (2, S), ``net_train_rmse_mid`` (2, S), ``diverged`` (2, S).
  ``bridge``: ``eta``, ``sigma`` (N,) NTK eigenvalues at θ₀ (first seed), ``coeffs`` (N,)
  residual coordinates, ``K`` (M,) = :data:`BRIDGE_K`, ``damping`` (M,) = 1/(Kη), ``damping_fit`` (M,) the λ whose
  residual filter best matches K GD steps on this spectrum (weights c²), ``sigma_grid`` (G,),
  ``gd_filter``/``gn_filter``/``gn_filter_fit`` (M, G).
  ``x_test``, ``y_test`` (n_test,), ``seeds`` (S,).
"""

from __future__ import annotations

import math
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..claims import Claim, divergence_row, fmt_K, num, verdict
from ..closed_form import equivalent_damping, gd_filter, gn_filter, gradient_flow_limit, residual_spectrum
from ..data import Dataset
from ..gauss_newton import gauss_newton_train
from ..linearise import linearised_apply
from ..models import quintic_model
from ..precision import x64
from ..training import train_sweep
from ..tree import tree_index
from ._common import Experiment, checkpoint_path, eval_points, index_of_K, load_quintic, rmse

__all__ = [
    "SCALES", "EXPERIMENT", "BRIDGE_K", "load", "compute", "claims", "plan", "converged", "summary",
    "seed_rmse", "diverged_K", "bridge_curves",
]

INF = math.inf

SCALES = {
    "smoke": dict(
        K=[1, 3, 10, 30, 100, 300, 1000, 10**4, 10**5, 10**6, 10**7, 10**8, 10**9, INF], lr=0.02,
        steps=10_000, n_relin=500, max_relin=1000, damping=10.0, gn_steps=500, seed=0, n_seeds=1,
        n_train=20, n_test=1000, n_evals=10, x64=True,
    ),
    "gpu": dict(
        K=[1, 3, 10, 30, 100, 300, 1000, 3000, 10**4, 10**5, 10**6, 10**7, 10**8, 10**9, INF], lr=0.02,
        steps=20_000, n_relin=1000, max_relin=2000, damping=10.0, gn_steps=2000, seed=0, n_seeds=10,
        n_train=20, n_test=1000, n_evals=20, x64=True,
    ),
    "paper": dict(
        K=[1, 3, 10, 30, 100, 300, 1000, 3000, 10**4, 10**5, 10**6, 10**7, 10**8, 10**9, INF], lr=0.02,
        steps=20_000, n_relin=1000, max_relin=2000, damping=10.0, gn_steps=2000, seed=0, n_seeds=30,
        n_train=20, n_test=1000, n_evals=20, x64=True,
    ),
}

#: The periods K drawn in the K ↔ λ panel.
BRIDGE_K = (10, 100, 1000, 10_000)

load = load_quintic


def plan(config: Mapping) -> list[dict]:
    """How each K of Fig. 1 is trained: a list of ``{"K", "method", "n_relin", "steps"}``.

    With T = ``steps``, R = ``n_relin`` and R_max = ``max_relin``:

    * ``"gd"``: literal gradient descent (Algorithm 1, :func:`iterlin.training.train_sweep`) for T
      steps at ``lr``, for every finite K with ⌈T/K⌉ > R_max (the closed form would need more than
      R_max linearisations to cover the same time);
    * ``"flow"``: max(R, ⌈T/K⌉) linearisations, each trained for K steps at η = lr/N in the
      small-learning-rate limit (gradient flow for time τ = Kη, in closed form), so the total
      training time is at least that of the literal runs, Tη;
    * ``"kernel"``: K = ∞, never re-linearise: the linearisation at θ₀ trained to convergence,
      exactly (its minimum-norm solution, Eq. 19 = one Gauss–Newton step from θ₀).
    """
    T, R, R_max = config["steps"], config["n_relin"], config["max_relin"]
    plan = []
    for K in config["K"]:
        if math.isinf(K):
            plan.append({"K": math.inf, "method": "kernel", "n_relin": 0, "steps": 0})
        elif math.ceil(T / K) > R_max:
            plan.append({"K": float(K), "method": "gd", "n_relin": int(T // K), "steps": T})
        else:
            r = max(R, math.ceil(T / K))
            plan.append({"K": float(K), "method": "flow", "n_relin": r, "steps": r})
    return plan


def _bridge(apply_fn, params0, data, config) -> dict:
    """The K ↔ λ bridge of Sec. 3.3 on the NTK spectrum of the first seed at θ₀."""
    eta = config["lr"] / data.x_train.shape[0]
    sigma, coeffs = (np.asarray(a, np.float64) for a in residual_spectrum(
        apply_fn, params0, data.x_train, data.y_train))
    pos = sigma[sigma > sigma.max() * 1e-12]
    grid = np.logspace(np.log10(pos.min()) - 1, np.log10(sigma.max()) + 0.5, 200)
    Ks = list(BRIDGE_K)
    lam = np.asarray([equivalent_damping(k, eta) for k in Ks])
    lam_fit = np.asarray([equivalent_damping(k, eta, sigma, weights=coeffs**2) for k in Ks])
    return {
        "eta": np.asarray(eta),
        "sigma": sigma,
        "coeffs": coeffs,
        "K": np.asarray(Ks, np.float64),
        "damping": lam,
        "damping_fit": lam_fit,
        "sigma_grid": grid,
        "gd_filter": np.stack([np.asarray(gd_filter(grid, k, eta)) for k in Ks]),
        "gn_filter": np.stack([np.asarray(gn_filter(grid, v)) for v in lam]),
        "gn_filter_fit": np.stack([np.asarray(gn_filter(grid, v)) for v in lam_fit]),
    }


def compute(config: Mapping, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Every K of :func:`plan`, the Gauss–Newton runs and the bridge (see the module docstring)."""
    seeds = list(range(config["seed"], config["seed"] + config["n_seeds"]))
    S = len(seeds)
    runs = plan(config)
    with x64(config["x64"]):
        dtype = jnp.float64 if config["x64"] else jnp.float32
        apply_fn, params = quintic_model(seeds, dtype)
        train_d, test_d = (data.x_train, data.y_train), (data.x_test, data.y_test)
        N = data.x_train.shape[0]
        eta = config["lr"] / N
        NK = len(runs)
        rows = {k: np.full((NK, S), np.nan) for k in (
            "net_train_rmse", "net_test_rmse", "lin_train_rmse", "lin_test_rmse", "net_train_rmse_mid")}
        diverged = np.zeros((NK, S), bool)
        common = dict(eval_data=test_d, progress=progress, config=config)

        def store(idx, history, reps):
            # history arrays (len(idx)·S, E), run order: K-major, then seeds
            E = len(history["step"])
            mid = int(np.searchsorted(history["step"], history["step"][-1] / 2))
            for key in ("net_train_rmse", "net_test_rmse", "lin_train_rmse", "lin_test_rmse"):
                rows[key][idx] = np.asarray(history[key]).reshape(reps, S, E)[..., -1]
            rows["net_train_rmse_mid"][idx] = np.asarray(history["net_train_rmse"]).reshape(reps, S, E)[..., mid]
            diverged[idx] = np.asarray(history["diverged"]).reshape(reps, S)

        def repeat(n):  # params for n values × S seeds, K-major
            return jax.tree.map(lambda a: jnp.concatenate([a] * n), params)

        # Literal gradient descent: one train_sweep over every "gd" K and every seed.
        gd = [i for i, p in enumerate(runs) if p["method"] == "gd"]
        if gd:
            Ks = [runs[i]["K"] for i in gd for _ in seeds]
            _, h = train_sweep(apply_fn, repeat(len(gd)), train_d, K=Ks, steps=config["steps"],
                               optimizer=optax.sgd(config["lr"]), loss="mse",
                               eval_steps=eval_points(config["steps"], config["n_evals"]),
                               checkpoint=checkpoint_path(checkpoint_dir, "gd"), **common)
            store(gd, h, len(gd))

        # Closed-form linearisations (small-lr limit): one fit per distinct number of linearisations.
        flow = [i for i, p in enumerate(runs) if p["method"] == "flow"]
        for r in sorted({runs[i]["n_relin"] for i in flow}):
            idx = [i for i in flow if runs[i]["n_relin"] == r]
            taus = [runs[i]["K"] * eta for i in idx for _ in seeds]
            _, h = gauss_newton_train(apply_fn, repeat(len(idx)), train_d, damping=taus, filter="flow", steps=r,
                                      loss="mse", solver="kernel", eval_steps=eval_points(r, config["n_evals"]),
                                      checkpoint=checkpoint_path(checkpoint_dir, f"flow{r}"), **common)
            store(idx, h, len(idx))

        # K = ∞: the linearisation at θ₀ solved exactly (minimum-norm solution, Eq. 19).
        for i, p in enumerate(runs):
            if p["method"] != "kernel":
                continue
            for j in range(S):
                p0 = tree_index(params, j)
                p_inf = gradient_flow_limit(apply_fn, p0, *train_d)
                rows["net_train_rmse"][i, j] = rmse(apply_fn(p_inf, train_d[0]), train_d[1])
                rows["net_test_rmse"][i, j] = rmse(apply_fn(p_inf, test_d[0]), test_d[1])
                rows["lin_train_rmse"][i, j] = rmse(linearised_apply(apply_fn, p0, p_inf, train_d[0]), train_d[1])
                rows["lin_test_rmse"][i, j] = rmse(linearised_apply(apply_fn, p0, p_inf, test_d[0]), test_d[1])
                diverged[i, j] = not np.isfinite(rows["lin_test_rmse"][i, j])

        # The Gauss–Newton end (λ = 0, Eq. 5) and a damped run (Eq. 6), by the library's step.
        gn_lams = [0.0, config["damping"]]
        gn = {k: np.full((2, S), np.nan) for k in ("net_train_rmse", "net_test_rmse", "net_train_rmse_mid")}
        gn_div = np.zeros((2, S), bool)
        for a, lam in enumerate(gn_lams):
            _, h = gauss_newton_train(apply_fn, params, train_d, damping=[lam] * S, steps=config["gn_steps"],
                                      loss="mse", eval_steps=eval_points(config["gn_steps"], config["n_evals"]),
                                      checkpoint=checkpoint_path(checkpoint_dir, f"gn{a}"), **common)
            mid = int(np.searchsorted(h["step"], h["step"][-1] / 2))
            gn["net_train_rmse"][a] = np.asarray(h["net_train_rmse"])[:, -1]
            gn["net_test_rmse"][a] = np.asarray(h["net_test_rmse"])[:, -1]
            gn["net_train_rmse_mid"][a] = np.asarray(h["net_train_rmse"])[:, mid]
            gn_div[a] = np.asarray(h["diverged"])
        gn["damping"] = np.asarray(gn_lams)
        gn["equiv_K"] = np.asarray([math.inf, math.inf if config["damping"] == 0 else 1.0 / (config["damping"] * eta)])
        gn["diverged"] = gn_div

        bridge = _bridge(apply_fn, tree_index(params, 0), data, config)

    time_ = [p["steps"] * eta if p["method"] == "gd" else (p["n_relin"] * p["K"] * eta if p["method"] == "flow"
             else math.inf) for p in runs]
    return {
        "K": np.asarray([p["K"] for p in runs], np.float64),
        "method": np.asarray([p["method"] for p in runs]),
        "n_relin": np.asarray([p["n_relin"] for p in runs]),
        "time": np.asarray(time_, np.float64),
        **rows,
        "diverged": diverged,
        "gn": gn,
        "bridge": bridge,
        "x_test": np.asarray(data.x_test, np.float64).ravel(),
        "y_test": np.asarray(data.y_test, np.float64).ravel(),
        "seeds": np.asarray(seeds),
    }


#: A run counts as converged when its final train RMSE is at most this (about 1.5 % of the spread
#: of the quintic's values) ...
CONVERGED_RMSE = 0.02
#: ... or when it changed by at most this fraction over the second half of its training (a plateau).
PLATEAU_REL = 0.1


def summary(results: Mapping) -> dict:
    """The numbers the figure draws beside the runs.

    ``sigma_min``: the smallest non-zero NTK eigenvalue at θ₀ (first seed; eigenvalues below
    N·ε·σ_max count as zero); ``solved_from``: 10/(η σ_min), the K from which every linearisation is
    solved to convergence (Kη·σ_min ≥ 10); ``net_mean`` (NK,): mean final test RMSE over seeds of
    the network (the linear model for K = ∞); ``gn_mean`` (2,): of the Gauss–Newton runs [λ = 0, λ].
    """
    b = results["bridge"]
    sigma = np.asarray(b["sigma"], np.float64)
    sigma_min = float(sigma[sigma > sigma.max() * len(sigma) * np.finfo(np.float64).eps].min())
    kernel = np.asarray(results["method"]).astype(str) == "kernel"
    net = np.where(kernel[:, None], np.asarray(results["lin_test_rmse"], np.float64),
                   np.asarray(results["net_test_rmse"], np.float64))
    with np.errstate(invalid="ignore"):
        return {
            "sigma_min": np.asarray(sigma_min),
            "solved_from": np.asarray(10.0 / (float(b["eta"]) * sigma_min)),
            "net_mean": np.nanmean(net, axis=1),
            "gn_mean": np.nanmean(np.asarray(results["gn"]["net_test_rmse"], np.float64), axis=1),
        }


def converged(results: Mapping) -> np.ndarray:
    final = np.asarray(results["net_train_rmse"], np.float64)
    mid = np.asarray(results["net_train_rmse_mid"], np.float64)
    with np.errstate(invalid="ignore"):
        return (final <= CONVERGED_RMSE) | (np.abs(mid - final) <= PLATEAU_REL * final)


def claims(results: Mapping) -> list[Claim]:
    """Small K ≈ GD; large K → Gauss–Newton, all larger K the same; the K ↔ λ bridge."""
    K = np.asarray(results["K"], np.float64)
    method = np.asarray(results["method"]).astype(str)
    with np.errstate(invalid="ignore"):
        net = np.nanmean(np.asarray(results["net_test_rmse"], np.float64), axis=1)
    gn = results["gn"]
    gn_test = np.nanmean(np.asarray(gn["net_test_rmse"], np.float64), axis=1)
    b = results["bridge"]
    eta = float(b["eta"])
    sigma_min = float(summary(results)["sigma_min"])
    fmt = lambda i: f"K={fmt_K(K[i])}: {num(net[i], 3)}"  # noqa: E731
    rows = []

    i1 = index_of_K(K, 1)
    small = [i for i in range(len(K)) if 1 < K[i] <= 10]
    if small:
        worst = max(abs(net[i] - net[i1]) / net[i1] for i in small)
        rows.append(Claim(
            "small K ≈ (stochastic) gradient descent", "schematic: the K = 1 level at small K",
            "test RMSE " + ", ".join(fmt(i) for i in [i1, *small]),
            verdict(worst <= 0.2), "every 1 < K ≤ 10 within 20 % of K = 1's test RMSE (mean over seeds)",
        ))
    finite = [i for i in range(len(K)) if np.isfinite(K[i])]
    top = finite[-1]
    rows.append(Claim(
        "large K → Gauss–Newton (each linearisation solved, Eq. 5)", "schematic: the GN level at large K",
        f"{fmt(top)}; Gauss–Newton (λ = 0): {num(gn_test[0], 3)}",
        verdict(abs(net[top] - gn_test[0]) <= 0.05 * gn_test[0]),
        "largest finite K within 5 % of gauss_newton_train with λ = 0",
    ))
    solved = [i for i in finite if K[i] * eta * sigma_min >= 10]
    if solved:
        spread = max(abs(net[i] - gn_test[0]) for i in solved) / gn_test[0]
        rows.append(Claim(
            "all larger K give the same result", "schematic: flat beyond some K",
            "; ".join(fmt(i) for i in solved) + f"; GN {num(gn_test[0], 3)}",
            verdict(spread <= 0.05),
            f"every K with Kη·σ_min(θ₀) ≥ 10 (each linearisation converged; σ_min = {sigma_min:.1e}) "
            "within 5 % of GN",
        ))
    else:
        rows.append(Claim("all larger K give the same result", "schematic: flat beyond some K",
                          "no K in the grid solves a linearisation (Kη·σ_min ≥ 10)", verdict(None),
                          "needs K ≥ 10 / (η σ_min)"))
    mid = [i for i in finite if 10 < K[i] and i not in solved]
    if mid:
        rows.append(Claim(
            "in between: re-linearising before convergence", "(not stated)",
            "; ".join(fmt(i) for i in mid), verdict(None),
            "reported only: partially solved linearisations (10 < K, Kη·σ_min < 10)",
        ))
    kinf = [i for i in range(len(K)) if method[i] == "kernel"]
    if kinf:
        j = kinf[0]
        lin = float(np.nanmean(np.asarray(results["lin_test_rmse"], np.float64)[j]))
        rows.append(Claim(
            "K = ∞ (no feature learning) generalises worse than K = 1", "Sec. 4.2 (Fig. 5)",
            f"K=∞ linear model: {num(lin, 3)}; K=1: {num(net[i1], 3)}", verdict(lin > net[i1]),
            "test RMSE of the converged linearisation at θ₀ > K = 1's",
        ))
    lam = float(gn["damping"][1])
    k_eq = float(gn["equiv_K"][1])
    if lam > 0 and finite:
        j = min(finite, key=lambda i: abs(math.log(K[i]) - math.log(k_eq)))
        rows.append(Claim(
            "damping λ plays the role of K ≈ 1/(λη) (Sec. 3.3)", "informal (Sec. 3.3)",
            f"damped GN λ={lam:g}: {num(gn_test[1], 3)}; {fmt(j)} (1/(λη) = {fmt_K(round(k_eq))})",
            verdict(abs(gn_test[1] - net[j]) <= 0.05), "|Δ test RMSE| ≤ 0.05 against the K nearest 1/(λη)",
        ))
    fit, scale = np.asarray(b["damping_fit"], np.float64), np.asarray(b["damping"], np.float64)
    ratio = fit / scale
    rows.append(Claim(
        "K GD steps act on the residual like damping λ = 1/(Kη)", "informal (Sec. 3.3)",
        "best-fit λ / (1/(Kη)) on the NTK spectrum at θ₀: "
        + ", ".join(f"K={fmt_K(k)}: {num(r)}" for k, r in zip(b["K"], ratio)),
        verdict(bool(np.all((ratio > 1 / 3) & (ratio < 3)))), "within a factor 3 for every K drawn",
    ))
    conv = converged(results)
    trained = method != "kernel"
    n_ok = int(conv[trained].sum())
    gn_conv = converged({"net_train_rmse": gn["net_train_rmse"], "net_train_rmse_mid": gn["net_train_rmse_mid"]})
    bad = [f"K={fmt_K(K[i])}" for i in np.flatnonzero(trained) if not conv[i].all()]
    bad += [f"GN λ={v:g}" for v, c in zip(gn["damping"], gn_conv) if not c.all()]
    rows.append(Claim(
        "every run is trained to convergence", "schematic: always trained to convergence",
        f"{n_ok + int(gn_conv.sum())}/{int(trained.sum()) * conv.shape[1] + gn_conv.size} runs converged"
        + (f" (not: {', '.join(bad)})" if bad else ""),
        verdict(not bad),
        f"final train RMSE ≤ {CONVERGED_RMSE:g}, or changed by ≤ {PLATEAU_REL:.0%} over the second half",
    ))
    div = np.asarray(results["diverged"], bool)
    gdiv = np.asarray(gn["diverged"], bool)
    seeds = np.asarray(results["seeds"])
    bad_div = [f"K={fmt_K(K[i])} seed {int(seeds[j])}" for i, j in zip(*np.nonzero(div))]
    bad_div += [f"GN λ={gn['damping'][i]:g} seed {int(seeds[j])}" for i, j in zip(*np.nonzero(gdiv))]
    rows.append(divergence_row(bad_div))
    return rows


EXPERIMENT = Experiment("fig1", SCALES, load, compute, claims, __name__)


# ------------------------------------------------------------------------------------------------
# What the notebook draws: pure functions of the results (nothing here is part of ``compute``).


def seed_rmse(results: Mapping) -> np.ndarray:
    """(NK, S) the final test RMSE drawn at each K, per seed.

    The network's, except for K = ∞ (``method == "kernel"``): the converged linear model at θ₀
    (the values whose mean over seeds is :func:`summary`'s ``net_mean``).
    """
    kernel = np.asarray(results["method"]).astype(str) == "kernel"
    return np.where(kernel[:, None], np.asarray(results["lin_test_rmse"], np.float64),
                    np.asarray(results["net_test_rmse"], np.float64))


def diverged_K(results: Mapping) -> np.ndarray:
    """(NK,) bool: at least one seed of this K diverged."""
    return np.asarray(results["diverged"], bool).any(axis=1)


def bridge_curves(results: Mapping) -> dict:
    """The K ↔ λ panels' curves on the bridge's ``sigma_grid`` (G,), for the M periods ``K``.

    ``gd_filter``, ``gn_filter``, ``gn_filter_fit`` (M, G): the spectral filters φ(σ) (as in
    ``results["bridge"]``); ``gn0_filter`` (G,): 1/σ, the Gauss–Newton filter (λ = 0); and the
    fraction of the residual removed along an eigen-direction, σ·φ(σ): ``gd_fraction``,
    ``gn_fraction``, ``gn_fraction_fit`` (M, G).
    """
    b = results["bridge"]
    grid = np.asarray(b["sigma_grid"], np.float64)
    out = {"sigma_grid": grid, "gn0_filter": 1.0 / grid}
    for key in ("gd_filter", "gn_filter", "gn_filter_fit"):
        phi = np.asarray(b[key], np.float64)
        out[key] = phi
        out[key.replace("filter", "fraction")] = grid * phi
    return out


