"""Shared plotting helpers for the notebooks (one per paper figure).

Compute and plotting stay apart: every helper here takes result arrays (NumPy, as the
experiments return them) and a matplotlib ``Axes`` (or creates a figure) and draws. Nothing
scientific is computed here; the only reduction is :func:`mean_se` (mean and standard error over
a seed axis), which :func:`band` draws and notebooks call instead of computing numbers themselves.
No helper calls ``plt.show()``: the notebook does, once per figure.

Conventions shared by the notebooks:

* Runs: ``values`` is ``(R, E)``: R runs (one per K, learning rate, ...), E evaluation points at
  ``step`` ``(E,)``. A run that diverged is frozen at its last finite state (see
  :func:`iterlin.training.commit_step`); it is drawn to the end and a cross marks the step at which
  it diverged, at its last finite value (:func:`plot_runs`).
* Colours: run i is drawn in ``"C{i}"`` by default, so the same run has the same colour in every
  panel and in every series of one panel (the network solid, its linear model dashed).
* K is written as the paper writes it, with :func:`iterlin.relin.fmt_K` (``∞`` for K = ∞); a K
  axis places K = ∞ at the right edge of a log axis (:func:`set_K_axis`).
* Accuracies are stored as fractions and drawn in percent: :func:`plot_runs` multiplies by
  ``scale=100`` by default (pass ``scale=1`` for losses, norms, kernel distances).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D

from .probes import filters_to_image
from .relin import fmt_K

__all__ = [
    "mean_se",
    "run_colors",
    "plot_runs",
    "seed_groups",
    "plot_sweep",
    "band",
    "seed_points",
    "seed_curve",
    "log_positions",
    "set_log_ticks",
    "set_K_axis",
    "top_ticks",
    "mark_steps",
    "rug",
    "plot_functions",
    "filter_grid",
    "panels",
    "legend",
    "k1_and_largest",
    "accuracy_against_updates",
    "relin_raster",
    "placement_dots",
    "plot_literal",
    "plot_stability_bound",
    "plot_bound",
    "gn_baseline",
    "sweep_colors",
]

#: Marker size of the divergence cross.
CROSS_SIZE = 12


# ------------------------------------------------------------------------------------------------
# argument checks (a bad shape gives a ValueError naming the parameter)


def _bad(name: str, got: str, allowed: str) -> ValueError:
    return ValueError(f"{name} {got} is not allowed: {name} must be {allowed}.")


def _mask(mask, v: np.ndarray, name: str) -> np.ndarray:
    """``mask`` checked to be a boolean array of ``v``'s shape (all True when None)."""
    if mask is None:
        return np.ones(v.shape, bool)
    m = np.asarray(mask)
    if m.shape != v.shape or m.dtype != bool:
        raise _bad(name, f"of shape {m.shape} and dtype {m.dtype}", f"a boolean array of values' shape {v.shape}")
    return m


def _real_array(value: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise _bad(name, f"= {value!r}", "an array of real numbers") from None
    return arr


def _as_1d(value: Any, name: str, length: int | None = None, what: str = "") -> np.ndarray:
    arr = _real_array(value, name)
    if arr.ndim != 1 or (length is not None and arr.shape[0] != length):
        want = f"1-D of length {length}" if length is not None else "1-D"
        raise _bad(name, f"of shape {arr.shape}", want + (f" ({what})" if what else ""))
    return arr


def _as_runs(values: Any, name: str, n_points: int) -> tuple[np.ndarray, bool]:
    """``values`` as ``(R, E)`` with E = n_points; a 1-D ``(E,)`` is one run. Returns (array, was_1d)."""
    arr = _real_array(values, name)
    if arr.ndim == 1:
        arr, one = arr[None, :], True
    else:
        one = False
    if arr.ndim != 2 or arr.shape[1] != n_points:
        raise _bad(name, f"of shape {np.shape(values)}",
                   f"(R, E) or (E,) with E = len(step) = {n_points} evaluation points")
    return arr, one


def _per_run(value: Any, name: str, n_runs: int, dtype=None) -> np.ndarray:
    """A scalar (only when R = 1) or an ``(R,)`` array."""
    arr = np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)
    if arr.ndim == 0 and n_runs == 1:
        arr = arr[None]
    if arr.shape != (n_runs,):
        raise _bad(name, f"of shape {arr.shape}", f"(R,) with R = {n_runs} runs (one entry per run)")
    return arr


def _check_axes(ax: Any, name: str = "ax") -> Axes:
    if not isinstance(ax, Axes):
        raise _bad(name, f"= {ax!r}", "a matplotlib Axes")
    return ax


# ------------------------------------------------------------------------------------------------
# the one reduction: mean and standard error over seeds


def mean_se(values: Any, axis: int = -1, *, where: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error of ``values`` over ``axis`` (the seed axis).

    Args:
      values: array of any shape, e.g. ``(E, S)`` or ``(S, E)``: E points, S seeds.
      axis: the seed axis.
      where: optional boolean array of ``values``' shape: the entries to include (e.g. Fig. 9's
        ``kept`` seeds). Non-finite entries (NaN of a failed seed) are always left out.

    Returns:
      ``(mean, se)``, each of ``values``' shape without ``axis``: the mean over the n included
      entries and the standard error ``std(ddof=1) / sqrt(n)``. ``mean`` is NaN where n = 0 and
      ``se`` is NaN where n < 2 (one seed has no spread to estimate). No warnings.
    """
    v = _real_array(values, "values")
    if v.ndim == 0:
        raise _bad("values", "of shape ()", "an array with a seed axis")
    if not isinstance(axis, (int, np.integer)) or not -v.ndim <= axis < v.ndim:
        raise _bad("axis", f"= {axis!r}", f"an axis of values (shape {v.shape})")
    ok = np.isfinite(v) & _mask(where, v, "where")
    n = ok.sum(axis=axis)
    x = np.where(ok, v, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x.sum(axis=axis) / n
        dev = np.where(ok, v - np.expand_dims(mean, axis), 0.0)
        var = (dev**2).sum(axis=axis) / (n - 1)
        se = np.sqrt(var / n)
    mean = np.where(n > 0, mean, np.nan)
    se = np.where(n > 1, se, np.nan)
    return mean, se


# ------------------------------------------------------------------------------------------------
# curves, one per run


def run_colors(n_runs: int) -> list[str]:
    """The default colour of runs ``0 … n_runs − 1``: ``["C0", "C1", …]`` (cycling after C9)."""
    return [f"C{i % 10}" for i in range(n_runs)]


def _resolve_colors(color: Any, n_runs: int) -> list[Any]:
    if color is None:
        return run_colors(n_runs)
    if isinstance(color, str) or (isinstance(color, tuple) and len(color) in (3, 4)
                                  and all(isinstance(c, (int, float)) for c in color)):
        return [color] * n_runs
    if isinstance(color, Sequence) or isinstance(color, np.ndarray):
        if len(color) != n_runs:
            raise _bad("color", f"of length {len(color)}",
                       f"None, one colour, or one colour (or Line2D) per run: R = {n_runs}")
        return [c.get_color() if isinstance(c, Line2D) else c for c in color]
    raise _bad("color", f"= {color!r}", "None, one colour, or a sequence of colours or Line2D, one per run")


def _per_run_style(value: Any, name: str, n_runs: int) -> list[Any]:
    if value is None or isinstance(value, str):
        return [value] * n_runs
    if (isinstance(value, Sequence) or (isinstance(value, np.ndarray) and value.ndim == 1)) and len(value) == n_runs:
        return list(value)
    raise _bad(name, f"= {value!r}", f"None, one string, or a sequence (or 1-D array) of R = {n_runs} of them")


def _selected(select: Any, n_runs: int) -> np.ndarray:
    if select is None:
        return np.ones(n_runs, bool)
    arr = np.asarray(select)
    if arr.dtype == bool:
        if arr.shape != (n_runs,):
            raise _bad("select", f"of shape {arr.shape}", f"a boolean (R,) mask with R = {n_runs}, or run indices")
        return arr
    if arr.ndim > 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise _bad("select", f"= {select!r}", f"a boolean (R,) mask or run indices in [0, {n_runs})")
    idx = np.atleast_1d(arr).astype(int)
    if np.any((idx < -n_runs) | (idx >= n_runs)):
        raise _bad("select", f"= {select!r}", f"run indices in [0, {n_runs})")
    out = np.zeros(n_runs, bool)
    out[idx] = True
    return out


def _label(template: Any, i: int, k: Any, fields: Mapping[str, Any], **extra) -> str | None:
    if template is None:
        return None
    if callable(template):
        return template(i, k)
    values = {name: arr[i] for name, arr in fields.items()}
    return str(template).format(K=fmt_K(k), i=i, **values, **extra)


def plot_runs(
    ax: Axes,
    step: Any,
    values: Any,
    K: Any,
    *,
    diverged: Any = None,
    diverged_step: Any = None,
    label: str | Callable[[int, float], str] | None = "K = {K}",
    label_args: Mapping[str, Any] | None = None,
    diverged_label: str | None = "K = {K} diverged at step {step:g}",
    linestyle: str | Sequence[str] | None = "-",
    marker: str | Sequence[str] | None = "o",
    color: Any = None,
    scale: float = 100.0,
    step_scale: float = 1.0,
    select: Any = None,
    **plot_kwargs,
) -> list[Line2D | None]:
    """One curve per run, labelled ``K = <fmt_K(k)>``, with a cross where a run diverged.

    Args:
      ax: the Axes to draw on.
      step: ``(E,)`` evaluation points (the x axis: training step, training-set size, σ, ...).
      values: ``(R, E)``: R runs × E points (``(E,)``: one run). Drawn as ``scale * values``.
      K: ``(R,)`` the runs' periods (a scalar when R = 1), for the labels only; ∞ shows ``∞``.
      diverged: None, ``(R,)`` bool (which runs diverged; then ``diverged_step`` ``(R,)`` gives the
        step, −1 where finite), or ``(R, E)`` bool (the points that diverged, e.g. Fig. 5's sizes: a
        cross on each such point). Given ``diverged_step`` alone, a run diverged where it is ≥ 0.
      diverged_step: ``(R,)`` the step at which each run diverged (−1: finite throughout).
      label: template formatted with ``K`` (``fmt_K(K[i])``), ``i`` and ``label_args[name][i]``,
        e.g. ``"K = {K}, lr = {lr:g}: network"``; or ``label(i, K[i]) -> str``; None: no label.
      label_args: per-run ``(R,)`` arrays for the label templates, e.g. ``{"lr": h["lr"]}``.
      diverged_label: template for the cross (``K``, ``i``, ``step`` and ``label_args``); None: the
        cross has no legend entry.
      linestyle, marker: one for every run, or an ``(R,)`` sequence or 1-D array (e.g.
        ``np.where(mask, "--", "-")``).
      color: None (run i in ``"C{i}"``), one colour, or ``(R,)`` colours or Line2D handles (e.g.
        the list a previous call returned, to draw the linear model dashed in matching colours).
      scale: factor on ``values`` (100: fractions drawn as percent; 1: as they are).
      step_scale: factor on ``step`` and ``diverged_step`` (Fig. 2: ``1 / factor``).
      select: which runs to draw: a boolean ``(R,)`` mask or run indices; default all.
      **plot_kwargs: passed to ``ax.plot`` for the curves (``lw``, ``alpha``, ``ms``, ...).

    A diverged run (``diverged`` ``(R,)``) is drawn to the end at its last finite value (trailing
    non-finite values are held at it) and a cross in its colour marks ``(step_scale ·
    diverged_step, scale · last finite value)``.

    Returns:
      ``(R,)`` list: the curve's Line2D for each drawn run, None for runs not selected.
    """
    _check_axes(ax)
    x = _as_1d(step, "step") * float(step_scale)
    v, _ = _as_runs(values, "values", x.shape[0])
    R = v.shape[0]
    Ks = _per_run(K, "K", R)
    fields = {name: _per_run(arr, f"label_args[{name!r}]", R) for name, arr in (label_args or {}).items()}
    colors = _resolve_colors(color, R)
    styles = _per_run_style(linestyle, "linestyle", R)
    markers = _per_run_style(marker, "marker", R)
    chosen = _selected(select, R)

    # divergence: per run (R,) with a step, or per point (R, E)
    div_run = np.zeros(R, bool)
    div_point = np.zeros_like(v, dtype=bool)
    at = np.full(R, -1.0)
    if diverged_step is not None:
        at = _per_run(diverged_step, "diverged_step", R).astype(np.float64)
    if diverged is not None:
        d = np.asarray(diverged)
        if d.dtype != bool:
            raise _bad("diverged", f"of dtype {d.dtype}", "boolean")
        if d.ndim == 2 or (d.ndim == 1 and R == 1 and d.shape == (x.shape[0],) and x.shape[0] != 1):
            d = d.reshape(R, -1) if d.ndim == 1 else d
            if d.shape != v.shape:
                raise _bad("diverged", f"of shape {np.shape(diverged)}", f"(R,) or (R, E) = {v.shape}")
            if diverged_step is not None:
                raise _bad("diverged_step", "given with a per-point (R, E) diverged",
                           "None when diverged marks points")
            div_point = d
        else:
            div_run = _per_run(d, "diverged", R)
            if div_run.any() and diverged_step is None:
                raise _bad("diverged_step", "= None", "given (an (R,) array of steps) when a run diverged")
    elif diverged_step is not None:
        div_run = at >= 0
    if np.any(div_run & (at < 0)):
        raise _bad("diverged_step", f"= {at.tolist()}", "≥ 0 for every run that diverged")

    lines: list[Line2D | None] = [None] * R
    for i in range(R):
        if not chosen[i]:
            continue
        y = scale * v[i]
        finite = np.flatnonzero(np.isfinite(y))
        if div_run[i] and finite.size:  # frozen at its last finite value
            y = y.copy()
            y[finite[-1] + 1:] = y[finite[-1]]
        kw = dict(plot_kwargs)
        lab = _label(label, i, Ks[i], fields)
        if lab is not None:
            kw["label"] = lab
        (line,) = ax.plot(x, y, linestyle=styles[i], marker=markers[i], color=colors[i], **kw)
        lines[i] = line
        c = line.get_color()
        if div_run[i] and finite.size:
            cx, cy = at[i] * float(step_scale), y[finite[-1]]
        elif div_point[i].any():
            cx, cy = x[div_point[i]], y[div_point[i]]
        else:
            continue
        lab = _label(diverged_label, i, Ks[i], fields, step=float(np.atleast_1d(cx)[0]))
        ax.plot(cx, cy, linestyle="none", marker="x", ms=CROSS_SIZE, color=c,
                **({"label": lab} if lab is not None else {}))
    return lines


# ------------------------------------------------------------------------------------------------
# seeds


def seed_groups(h: Mapping[str, Any]) -> list[np.ndarray]:
    """A sweep history's runs grouped over seeds: one index array per (K, lr), in the order of the
    first seed's runs, each holding that setting's run of every seed (``seed_index`` order). A
    history without ``seed_index`` is one seed: every run its own group."""
    K = np.asarray(h["K"], np.float64)
    lr = np.asarray(h["lr"], np.float64) if "lr" in h else np.zeros_like(K)
    seed = np.asarray(h["seed_index"]) if "seed_index" in h else np.zeros(K.shape, int)
    first = np.flatnonzero(seed == seed.min()) if seed.size else np.arange(0)
    return [np.flatnonzero((K == K[i]) & (lr == lr[i])) for i in first]


def plot_sweep(
    ax: Axes,
    h: Mapping[str, Any],
    metric: str = "net_test_acc",
    *,
    label: Any = "K = {K}",
    diverged_label: Any = "K = {K} diverged",
    select: Any = None,
    color: Any = None,
    alpha: float = 0.2,
    **kwargs,
) -> list:
    """A sweep history's ``metric`` against ``step``: one line per (K, lr), the mean over seeds,
    with a band of ± one standard error (:func:`mean_se`) when there are ≥ 2 seeds.

    ``h`` as :func:`iterlin.experiments._common.sweep` returns it (``K``, ``lr``, ``seed_index``,
    ``step``, ``diverged``, ``diverged_step``). A setting is marked diverged (a cross, see
    :func:`plot_runs`) when any of its seeds diverged, at the earliest such step. ``select``:
    which groups (:func:`seed_groups`) to draw, a boolean mask or indices over the groups; ``label``
    templates may use ``{K}`` and ``{lr}``. Other keywords (``scale``, ``step_scale``,
    ``linestyle``, ``marker``, ``lw``, ...) go to :func:`plot_runs`.

    Returns one Line2D per group (None for groups not drawn), as :func:`plot_runs`.
    """
    groups = seed_groups(h)
    v = _real_array(h[metric], metric)
    mean_and_se = [mean_se(v[g], axis=0) for g in groups]
    means = np.stack([m for m, _ in mean_and_se])
    ses = np.stack([e for _, e in mean_and_se])
    K = np.asarray(h["K"], np.float64)[[g[0] for g in groups]]
    lr = np.asarray(h["lr"], np.float64)[[g[0] for g in groups]] if "lr" in h else np.zeros(len(groups))
    div = np.asarray(h["diverged"], bool)
    at = np.asarray(h["diverged_step"], np.float64)
    gdiv = np.asarray([div[g].any() for g in groups])
    gat = np.asarray([at[g][div[g]].min() if div[g].any() else -1.0 for g in groups])
    if callable(select):
        select = np.asarray([bool(select(k)) for k in K], bool)
    lines = plot_runs(ax, h["step"], means, K, diverged=gdiv, diverged_step=gat, label=label,
                      diverged_label=diverged_label, label_args={"lr": lr}, select=select, color=color, **kwargs)
    scale = float(kwargs.get("scale", 100.0))
    x = _as_1d(h["step"], "step") * float(kwargs.get("step_scale", 1.0))
    for i, g in enumerate(groups):
        if lines[i] is not None and len(g) >= 2:
            ax.fill_between(x, scale * (means[i] - ses[i]), scale * (means[i] + ses[i]), color=lines[i].get_color(),
                            alpha=alpha, linewidth=0)
    return lines


def band(
    ax: Axes,
    x: Any,
    values: Any,
    axis: int = -1,
    *,
    where: Any = None,
    color: Any = None,
    label: str | None = None,
    alpha: float = 0.2,
    scale: float = 1.0,
    **plot_kwargs,
):
    """Mean over seeds as a line, with a shaded band of ± one standard error (:func:`mean_se`).

    Args:
      ax: the Axes.
      x: ``(E,)`` positions.
      values: 2-D with a seed axis ``axis`` of S seeds and E points on the other, e.g. ``(E, S)``
        (``axis=1``) or ``(S, E)`` (``axis=0``). Non-finite entries and entries where ``where``
        is False are left out of the mean.
      where: optional boolean array of ``values``' shape (e.g. Fig. 9's ``kept``).
      color: the colour (default: the Axes' next colour).
      scale: factor on the values (default 1; 100 for accuracies as percent).
      **plot_kwargs: passed to ``ax.plot`` for the mean line (``marker``, ``ls``, ...).

    With S ≥ 2 the band spans ``scale · (mean ± se)``; with one seed only the line is drawn.

    Returns:
      ``(line, fill)``: the mean's Line2D and the band's PolyCollection (None for one seed).
    """
    _check_axes(ax)
    v = _real_array(values, "values")
    if v.ndim != 2:
        raise _bad("values", f"of shape {v.shape}", "2-D: (E, S) or (S, E), with the seed axis given by axis")
    if not isinstance(axis, (int, np.integer)) or not -2 <= axis < 2:
        raise _bad("axis", f"= {axis!r}", "0, 1 or -1 (the seed axis of the 2-D values)")
    n_points = v.shape[1 - axis % 2]
    xs = _as_1d(x, "x", n_points, f"one position per point of values {v.shape} off the seed axis {axis}")
    mean, se = mean_se(v, axis, where=where)
    (line,) = ax.plot(xs, scale * mean, color=color, label=label, **plot_kwargs)
    fill = None
    if v.shape[axis] >= 2:
        fill = ax.fill_between(xs, scale * (mean - se), scale * (mean + se), color=line.get_color(),
                               alpha=alpha, linewidth=0)
    return line, fill


def seed_points(
    ax: Axes,
    x: Any,
    values: Any,
    *,
    kept: Any = None,
    jitter: float = 0.0,
    cap: float | None = None,
    color: Any = "grey",
    size: float = 12,
    alpha: float = 0.7,
    rng_seed: int = 0,
    scale: float = 1.0,
):
    """Every seed as a dot at its point's x; seeds not kept (or non-finite) as grey crosses.

    Args:
      x: ``(N,)`` positions of the N points (e.g. :func:`log_positions` of K or λ).
      values: ``(N, S)``: S seeds per point.
      kept: optional ``(N, S)`` bool: seeds drawn as dots; the others, and non-finite values, are
        crosses at ``min(value, cap)`` (NaN at ``cap``) when ``cap`` is given, else not drawn.
      jitter: spread the seeds of a point over x · 10^U(−jitter, jitter) (log axes), reproducibly.
      scale: factor on the values (100 for accuracies as percent; ``cap`` is in drawn units).

    Returns:
      ``(dots, crosses)``: PathCollections (``crosses`` None when none are drawn).
    """
    _check_axes(ax)
    xs = _as_1d(x, "x")
    v = _real_array(values, "values")
    if v.ndim != 2 or v.shape[0] != xs.shape[0]:
        raise _bad("values", f"of shape {v.shape}", f"(N, S) with N = len(x) = {xs.shape[0]}")
    v = float(scale) * v
    ok = np.isfinite(v) & _mask(kept, v, "kept")
    X = np.repeat(xs[:, None], v.shape[1], axis=1)
    if jitter:
        X = X * 10 ** np.random.default_rng(rng_seed).uniform(-jitter, jitter, size=v.shape)
    dots = ax.scatter(X[ok], v[ok], s=size, color=color, alpha=alpha)
    crosses = None
    if cap is not None and (~ok).any():
        y = np.minimum(np.nan_to_num(v[~ok], nan=cap, posinf=cap), cap)
        crosses = ax.scatter(X[~ok], y, marker="x", color="grey")
    return dots, crosses


def seed_curve(
    ax: Axes,
    x: Any,
    values: Any,
    *,
    diverged: Any = None,
    label: str | None = None,
    diverged_label: str | None = None,
    color: Any = None,
    marker: str = "o",
    dots: bool = True,
    scale: float = 100.0,
    alpha: float = 0.2,
    **plot_kwargs,
) -> Line2D:
    """One setting's final values over a grid (K, learning rates): the mean over seeds with a band
    of ± one standard error (:func:`band`), every seed as a dot (:func:`seed_points`) and a cross
    (at the mean) on every point where a seed diverged.

    Args:
      x: ``(N,)`` positions (e.g. :func:`set_K_axis`'s, or learning rates on a log axis).
      values: ``(N, S)``: N points × S seeds (fractions; drawn × ``scale``).
      diverged: optional ``(N,)`` bool: the points where any seed diverged.
      label, diverged_label: legend entries of the line and of the crosses (None: none).
      color: the colour (default: the Axes' next one); marker: the mean's marker.
      dots: draw each seed as a dot (in the line's colour).
      **plot_kwargs: passed to the mean line (``ls``, ``lw``, ``mfc``, ...).

    Returns the mean's Line2D.
    """
    _check_axes(ax)
    xs = _as_1d(x, "x")
    v = _real_array(values, "values")
    if v.ndim != 2 or v.shape[0] != xs.shape[0]:
        raise _bad("values", f"of shape {v.shape}", f"(N, S) with N = len(x) = {xs.shape[0]}")
    line, _ = band(ax, xs, v, axis=1, color=color, label=label, alpha=alpha, scale=scale, marker=marker,
                   **plot_kwargs)
    c = line.get_color()
    if dots:
        seed_points(ax, xs, v, color=c, size=10, alpha=0.5, scale=scale)
    if diverged is not None:
        d = _as_1d(np.asarray(diverged, dtype=bool), "diverged", xs.shape[0], "one flag per point").astype(bool)
        if d.any():
            mean, _ = mean_se(v, axis=1)
            ax.plot(xs[d], scale * mean[d], linestyle="none", marker="x", ms=CROSS_SIZE, color=c,
                    **({"label": diverged_label} if diverged_label is not None else {}))
    return line


# ------------------------------------------------------------------------------------------------
# axes: log axes with ∞ (or 0) at an edge, K ticks, legends


def log_positions(values: Any, *, inf_factor: float = 30.0, zero_factor: float = 10.0) -> np.ndarray:
    """Positions on a log axis for values that may include ∞ and 0 (K grids, λ grids).

    ``values`` ``(N,)`` ≥ 0: finite positive values stay; ∞ goes to ``inf_factor`` × the largest
    finite positive value (the right edge; 1 if there is none); 0 to the smallest finite positive
    value ÷ ``zero_factor`` (the left edge; 1 if there is none). Returns ``(N,)`` floats.
    """
    v = _as_1d(values, "values")
    if np.any(np.isnan(v)) or np.any(v < 0):
        raise _bad("values", f"= {v.tolist()}", "≥ 0 (∞ allowed), never NaN")
    pos = v[np.isfinite(v) & (v > 0)]
    right = pos.max() * inf_factor if pos.size else 1.0
    left = pos.min() / zero_factor if pos.size else 1.0
    return np.where(np.isinf(v), right, np.where(v == 0, left, v))


def set_log_ticks(ax: Axes, positions: Any, labels: Sequence[str] | None = None, *, axis: str = "x") -> None:
    """A log axis with ticks exactly at ``positions`` ``(N,)`` (labels: ``f"{p:g}"`` by default), no minor ticks."""
    _check_axes(ax)
    p = _as_1d(positions, "positions")
    if labels is None:
        labels = [f"{q:g}" for q in p]
    if len(labels) != p.shape[0]:
        raise _bad("labels", f"of length {len(labels)}", f"one label per position ({p.shape[0]})")
    if axis not in ("x", "y"):
        raise _bad("axis", f"= {axis!r}", "'x' or 'y'")
    if axis == "x":
        ax.set_xscale("log")
        ax.set_xticks(p, list(labels))
        ax.xaxis.set_minor_locator(plt.NullLocator())
    else:
        ax.set_yscale("log")
        ax.set_yticks(p, list(labels))
        ax.yaxis.set_minor_locator(plt.NullLocator())


def set_K_axis(
    ax: Axes,
    K: Any,
    *,
    ticks: str = "decades",
    inf_factor: float = 30.0,
    xlabel: str | None = "K (GD steps per linearisation)",
) -> np.ndarray:
    """A log x axis over the K grid ``(N,)`` with K = ∞ at the right edge, labelled ``∞``.

    Ticks at the K that are powers of ten (``ticks="decades"``) or at every K (``"all"``), labelled
    with :func:`~iterlin.relin.fmt_K`, plus ``∞`` when the grid has it. Returns the positions
    ``(N,)`` to draw the grid's values at (:func:`log_positions`).
    """
    _check_axes(ax)
    Ks = _as_1d(K, "K")
    if np.any(np.isnan(Ks)) or np.any(Ks < 1):
        raise _bad("K", f"= {Ks.tolist()}", "≥ 1 (∞ allowed)")
    if ticks not in ("decades", "all"):
        raise _bad("ticks", f"= {ticks!r}", "'decades' or 'all'")
    xs = log_positions(Ks, inf_factor=inf_factor)
    finite = np.isfinite(Ks)
    keep = finite.copy()
    if ticks == "decades":
        keep &= np.isclose(np.log10(np.where(finite, Ks, 1.0)), np.round(np.log10(np.where(finite, Ks, 1.0))))
    tick_K = np.unique(Ks[keep])
    pos = list(tick_K) + ([xs[~finite][0]] if (~finite).any() else [])
    labels = [fmt_K(k) for k in tick_K] + (["∞"] if (~finite).any() else [])
    set_log_ticks(ax, pos, labels)
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    return xs


def top_ticks(ax: Axes, positions: Any, labels: Sequence[str], *, label: str | None = None) -> Axes:
    """A second x axis on top of ``ax`` (same scale and limits) with ticks exactly at ``positions``
    ``(N,)``, labelled ``labels``, no minor ticks: e.g. the number of re-linearisations T/K above a
    K axis (:func:`set_K_axis`). Returns the secondary axis."""
    _check_axes(ax)
    p = _as_1d(positions, "positions")
    if len(labels) != p.shape[0]:
        raise _bad("labels", f"of length {len(labels)}", f"one label per position ({p.shape[0]})")
    top = ax.secondary_xaxis("top")
    top.set_xticks(p, list(labels))
    top.xaxis.set_minor_locator(plt.NullLocator())
    if label is not None:
        top.set_xlabel(label)
    return top


def legend(ax: Axes, *, fontsize: float = 8, **kwargs) -> Legend | None:
    """``ax.legend(fontsize=8)`` when something on ``ax`` has a label; None (and no warning) otherwise."""
    _check_axes(ax)
    handles, _ = ax.get_legend_handles_labels()
    if not handles:
        return None
    return ax.legend(fontsize=fontsize, **kwargs)


def panels(
    ncols: int = 1,
    nrows: int = 1,
    *,
    panel_size: tuple[float, float] = (6.0, 4.0),
    sharey: bool = False,
    suptitle: str | None = None,
    squeeze: bool = True,
) -> tuple[Figure, Any]:
    """A figure of ``nrows × ncols`` panels of ``panel_size`` inches each, constrained layout.

    Returns ``(fig, axes)`` as ``plt.subplots`` (one Axes, a 1-D array, or 2-D with ``squeeze=False``).
    """
    for name, n in (("ncols", ncols), ("nrows", nrows)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise _bad(name, f"= {n!r}", "an integer >= 1")
    w, h = panel_size
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), sharey=sharey, squeeze=squeeze,
                             layout="constrained")
    if suptitle is not None:
        fig.suptitle(suptitle)
    return fig, axes


# ------------------------------------------------------------------------------------------------
# marks


def plot_bound(ax: Axes, record: Any, *, fraction: float | None = 1 / 3, label: str = "K = {K}, lr {lr}",
               select: Callable[[float], bool] | None = None) -> list:
    """The linear model's bound 2/λ_max(θ_s) along training (a :class:`iterlin.stability.BoundRecord`):
    one line per run through its recorded points, coloured by (K, lr) setting (seeds share a
    colour), each rate η as a dashed horizontal line and ``fraction`` of the bound as a dotted one
    at η / ``fraction`` (the margin a reference run keeps); a cross where a run's linear model's loss
    first rose inside a block, on its bound line. ``select(K) -> bool``: which runs to draw (default
    all). Log y axis. Returns one Line2D per setting drawn."""
    _check_axes(ax)
    step = _as_1d(record.step, "step")
    bound = _real_array(record.bound, "bound")
    settings = sorted({(float(k), float(r)) for k, r in zip(record.K, record.lr) if select is None or select(float(k))},
                      key=lambda t: (t[1], t[0]))
    lines = []
    for c, (k, r) in enumerate(settings):
        color = f"C{c}"
        runs = np.flatnonzero((np.asarray(record.K) == k) & (np.asarray(record.lr) == r))
        line = None
        for j, i in enumerate(runs):
            ok = np.isfinite(bound[i])
            (ln,) = ax.plot(step[ok], bound[i, ok], color=color, marker=".", lw=1.0, alpha=0.8,
                            label=label.format(K=fmt_K(k), lr=f"{r:g}") if j == 0 else None)
            line = line or ln
            t = int(record.rose_at[i])
            if t >= 0 and ok.any():
                ax.plot([t], [np.interp(t, step[ok], bound[i, ok])], marker="x", color=color, ms=CROSS_SIZE,
                        mew=2, linestyle="none")
        lines.append(line)
    for r in sorted({r for _, r in settings}):
        ax.axhline(r, color="k", linestyle="--", lw=0.8)
        if fraction:
            ax.axhline(r / fraction, color="k", linestyle=":", lw=0.8)
    ax.set_yscale("log")
    return lines


def mark_steps(ax: Axes, steps: Any, *, color: Any = "gray", linestyle: str = ":", linewidth: float = 0.8,
               label: str | None = None) -> list[Line2D]:
    """A vertical line at each of ``steps`` ``(N,)`` (e.g. the re-linearisation steps); the first carries ``label``."""
    _check_axes(ax)
    s = _as_1d(steps, "steps")
    return [ax.axvline(t, color=color, linestyle=linestyle, linewidth=linewidth,
                       **({"label": label} if label is not None and j == 0 else {}))
            for j, t in enumerate(s)]


def rug(ax: Axes, x: Any, *, y: float | None = None, color: Any = "k", size: float = 12) -> Line2D:
    """Tick marks ``|`` at ``x`` ``(N,)`` (e.g. NTK eigenvalues) at height ``y`` (default: the bottom of the y range)."""
    _check_axes(ax)
    xs = _as_1d(x, "x")
    y0 = ax.get_ylim()[0] if y is None else float(y)
    (line,) = ax.plot(xs, np.full_like(xs, y0), linestyle="none", marker="|", color=color, ms=size)
    return line


def plot_functions(ax: Axes, x: Any, functions: Any, *, y_target: Any = None, x_train: Any = None,
                   y_train: Any = None, lw: float = 1.0, alpha: float = 0.7) -> list[Line2D]:
    """Learnt functions ``(S, N)`` on ``x`` ``(N,)`` (one per seed), with the target ``(N,)`` dashed and the training points.

    Returns the S function lines (target and training points get the labels ``target``, ``train``).
    """
    _check_axes(ax)
    xs = _as_1d(x, "x")
    f, _ = _as_runs(functions, "functions", xs.shape[0])
    lines = [ax.plot(xs, fi, lw=lw, alpha=alpha)[0] for fi in f]
    if y_target is not None:
        ax.plot(xs, _as_1d(y_target, "y_target", xs.shape[0], "the target on x"), "k--", lw=1.5, label="target")
    if (x_train is None) != (y_train is None):
        raise _bad("y_train" if y_train is None else "x_train", "= None", "given together with the other")
    if x_train is not None:
        xt = _as_1d(x_train, "x_train")
        ax.plot(xt, _as_1d(y_train, "y_train", xt.shape[0], "one per training point"), "ko", ms=3, label="train")
    return lines


# ------------------------------------------------------------------------------------------------
# Fig. 7: filter images


def filter_grid(
    delta: Any,
    step: Any,
    K: Any,
    *,
    runs: Sequence[int] | None = None,
    filters: int | Sequence[int] = 3,
    vrange: float | str = 0.5,
    title: str | None = None,
    cell_size: float = 0.8,
    fontsize: float = 7,
) -> tuple[Figure, np.ndarray]:
    """Filter changes as images: a column per evaluation point, a row per (filter, run).

    Args:
      delta: ``(R, E, h, w, C, F)``: R runs × E evaluation points of F filters of ``h × w × C``
        (C = 3 RGB or 1 grey), e.g. Fig. 7's ``filters_delta`` ``W_t − W_0``.
      step: ``(E,)`` the evaluation steps (the bottom row's labels).
      K: ``(R,)`` the runs' periods (row labels, ``fmt_K``).
      runs: the runs to show, in order (default all): for each filter one row per run.
      filters: how many of the first filters (an int), or their indices.
      vrange: ``[−vrange, vrange] → [0, 1]`` (:func:`iterlin.probes.filters_to_image`; grey = no
        change); ``"max"``: the largest ``|change|`` among the drawn images (at least 1e-12).
      title: the figure's title; may use ``{vrange}`` (e.g. ``"range ±{vrange:.3g}"``).

    Returns:
      ``(fig, axes)`` with ``axes`` ``(len(filters) · len(runs), E)``.
    """
    d = _real_array(delta, "delta")
    if d.ndim != 6 or d.shape[4] not in (1, 3):
        raise _bad("delta", f"of shape {d.shape}", "(R, E, h, w, C, F) with C = 3 (RGB) or 1")
    R, E, F = d.shape[0], d.shape[1], d.shape[5]
    st = _as_1d(step, "step", E, "one step per evaluation point of delta")
    Ks = _per_run(K, "K", R)
    run_idx = list(range(R)) if runs is None else [int(r) for r in runs]
    if not run_idx or any(not 0 <= r < R for r in run_idx):
        raise _bad("runs", f"= {runs!r}", f"non-empty run indices in [0, {R})")
    if isinstance(filters, (int, np.integer)) and not isinstance(filters, bool):
        if not 1 <= filters <= F:
            raise _bad("filters", f"= {filters!r}", f"a count in [1, {F}] or filter indices")
        f_idx = list(range(int(filters)))
    else:
        f_idx = [int(f) for f in filters]
        if not f_idx or any(not 0 <= f < F for f in f_idx):
            raise _bad("filters", f"= {filters!r}", f"a count in [1, {F}] or filter indices in [0, {F})")
    shown = d[run_idx][..., f_idx]
    if isinstance(vrange, str):
        if vrange != "max":
            raise _bad("vrange", f"= {vrange!r}", "a number > 0 or 'max'")
        vr = max(float(np.nanmax(np.abs(shown))) if shown.size else 0.0, 1e-12)
    else:
        vr = float(vrange)
        if not math.isfinite(vr) or vr <= 0:
            raise _bad("vrange", f"= {vrange!r}", "a number > 0 or 'max'")
    n_rows = len(f_idx) * len(run_idx)
    fig, axes = plt.subplots(n_rows, E, figsize=(cell_size * E + 1.5, 0.9 * n_rows), squeeze=False)
    for a, f in enumerate(f_idx):
        for b, i in enumerate(run_idx):
            row = a * len(run_idx) + b
            for e in range(E):
                ax = axes[row, e]
                img = filters_to_image(d[i, e, :, :, :, f], vrange=vr)
                if img.shape[-1] == 1:
                    ax.imshow(img[..., 0], cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
                else:
                    ax.imshow(img, interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                if row == n_rows - 1:
                    ax.set_xlabel(f"{st[e]:g}", fontsize=fontsize)
            axes[row, 0].set_ylabel(f"filter {f + 1}\nK = {fmt_K(Ks[i])}", fontsize=fontsize, rotation=0,
                                    ha="right", va="center")
    if title is not None:
        fig.suptitle(title.format(vrange=vr), fontsize=fontsize + 2)
    return fig, axes


# ------------------------------------------------------------------------------------------------
# run selection shared by the K = 1 vs large-K notebooks


def k1_and_largest(K: Any) -> tuple[int, int]:
    """Indices of the K = 1 run and of the run with the largest K in ``K`` ``(R,)`` (the two compared in Figs. 3, 6, 7, NTK)."""
    Ks = _as_1d(K, "K")
    ones = np.flatnonzero(Ks == 1)
    if not ones.size:
        raise _bad("K", f"= {Ks.tolist()}", "a grid containing K = 1")
    return int(ones[0]), int(np.flatnonzero(Ks == Ks.max())[0])


# ------------------------------------------------------------------------------------------------
# when to update features (the adaptive notebook): accuracy against updates, where the updates fall


def accuracy_against_updates(
    ax: Axes,
    relin: Any,
    acc: Any,
    *,
    names: Sequence[str] | None = None,
    diverged: Any = None,
    label: str | None = None,
    color: Any = None,
    marker: str = "o",
    scale: float = 100.0,
    **plot_kwargs,
) -> Line2D:
    """Final accuracy against the number of feature updates (re-linearisations), one point per setting.

    Args:
      relin, acc: ``(N, S)``: per setting (a fixed K, a tolerance) and seed, the re-linearisations
        made and the final accuracy (a fraction; drawn × ``scale``).
      names: optional ``(N,)`` strings written next to each setting's mean (``"K=10"``, ``"tol=0.01"``).
      diverged: optional ``(N,)`` bool: a cross on the settings where a seed diverged.
      label, color, marker, plot_kwargs: of the line of means.

    Each seed is a dot at its own (updates, accuracy); each setting's mean over seeds
    (:func:`mean_se`) a marker at its mean number of updates, with ± one standard error of the
    accuracy, joined in order of updates. The x axis is symlog (0 updates allowed). Returns the
    Line2D of the means.
    """
    _check_axes(ax)
    n = _real_array(relin, "relin")
    v = _real_array(acc, "acc")
    if v.ndim != 2 or n.shape != v.shape:
        raise _bad("acc", f"of shape {v.shape}", f"(N, S), the shape of relin {n.shape}")
    x, _ = mean_se(n, axis=1)
    y, se = mean_se(v, axis=1)
    order = np.argsort(x, kind="stable")
    (line,) = ax.plot(x[order], scale * y[order], marker=marker, color=color, label=label, **plot_kwargs)
    c = line.get_color()
    ax.errorbar(x, scale * y, yerr=scale * se, linestyle="none", color=c, capsize=2)
    ok = np.isfinite(v)
    ax.scatter(n[ok], scale * v[ok], s=10, color=c, alpha=0.5)
    if names is not None:
        if len(names) != x.shape[0]:
            raise _bad("names", f"of length {len(names)}", f"one name per setting ({x.shape[0]})")
        for xi, yi, name in zip(x, y, names):
            ax.annotate(name, (xi, scale * yi), textcoords="offset points", xytext=(4, 4), fontsize=7, color=c)
    if diverged is not None:
        d = _as_1d(np.asarray(diverged, dtype=bool), "diverged", x.shape[0], "one flag per setting").astype(bool)
        if d.any():
            ax.plot(x[d], scale * y[d], linestyle="none", marker="x", ms=CROSS_SIZE, color=c)
    ax.set_xscale("symlog", linthresh=1.0)
    return line


def relin_raster(
    ax: Axes,
    steps: Sequence[Any],
    labels: Sequence[str],
    *,
    T: int,
    colors: Sequence[Any] | None = None,
    marks: Sequence[float] = (0.25, 0.5),
) -> Axes:
    """When each run re-linearised: one row per run (top to bottom), a tick ``|`` at each step.

    Args:
      steps: R arrays ``(n_r,)``: the steps at which run r re-linearised (e.g. ``relin_step``
        without its −1 padding). labels: R row labels. T: the number of steps (the x range [0, T]).
      colors: optional R colours (default black). marks: fractions of T drawn as dotted lines.
    """
    _check_axes(ax)
    if len(steps) != len(labels):
        raise _bad("labels", f"of length {len(labels)}", f"one label per row of steps ({len(steps)})")
    rows = [np.asarray(s, np.float64).ravel() for s in steps]
    offsets = np.arange(len(rows))[::-1]
    if rows:
        ax.eventplot(rows, lineoffsets=offsets, linelengths=0.7, linewidths=1.0,
                     colors=list(colors) if colors is not None else "k")
    for f in marks:
        ax.axvline(f * T, color="gray", linestyle=":", linewidth=0.8)
    ax.set_xlim(0, T)
    ax.set_yticks(offsets, list(labels), fontsize=7)
    ax.set_xlabel("step")
    return ax


def placement_dots(
    ax: Axes,
    early: Any,
    even: Any,
    fractions: Sequence[float],
    names: Sequence[str],
    *,
    scale: float = 100.0,
) -> Axes:
    """Where runs put their updates: for each fraction f of training (a group on the x axis) and
    each setting i (a column in the group, colour ``C{i+2}``), the share of its updates made by f·T,
    one filled dot per seed (``early``), beside the share an even placement of the same number of
    updates makes (``even``, open circles).

    Args:
      early, even: ``(N, S, F)`` shares (fractions; drawn × ``scale``): N settings, S seeds, F fractions.
      fractions: ``(F,)``. names: N labels of the settings (the legend).
    """
    _check_axes(ax)
    e, v = _real_array(early, "early"), _real_array(even, "even")
    if e.ndim != 3 or v.shape != e.shape:
        raise _bad("even", f"of shape {v.shape}", f"(N, S, F), the shape of early {e.shape}")
    N, S, F = e.shape
    if len(fractions) != F or len(names) != N:
        raise _bad("fractions, names", f"of lengths {len(fractions)}, {len(names)}", f"{F} and {N}")
    for j in range(F):
        for i in range(N):
            x = np.full(S, j * (N + 1) + i, np.float64)
            ax.plot(x, scale * e[i, :, j], "o", color=f"C{i + 2}", label=names[i] if j == 0 else None)
            ax.plot(x, scale * v[i, :, j], "o", mfc="none", color=f"C{i + 2}")
    ax.set_xticks([j * (N + 1) + (N - 1) / 2 for j in range(F)], [f"by {f:g}·T" for f in fractions])
    return ax


# ------------------------------------------------------------------------------------------------
# Fig. 1: literal gradient descent at large K beside its closed form, and the stability bound


def plot_literal(ax: Axes, literal: Mapping[str, Any] | None, *, colors: Sequence[Any] = ("C4", "C5"),
                 marker: str = "^") -> list:
    """Literal GD at large K (``results["literal"]`` of ``iterlin.experiments.fig1.literal_runs``) on a K axis.

    For each rate lr' (``literal["lr"]`` (NR,), colour ``colors[r]``): the literal runs' final test RMSE
    (``net_test_rmse`` (NR, NL, S)), mean over the seeds that stayed finite ± one standard error, filled
    ``marker`` at K (``literal["K"]`` (NL,)), joined by a solid line; the closed form at the same
    (τ = K·lr'/N, R linearisations), ``flow_net_test_rmse``, open markers joined by a dashed line; and
    where seeds diverged (``diverged`` (NR, NL, S)) a red cross at the closed form's mean with
    "d/S diverged". Draws nothing for ``literal`` None or without K (results from before these runs).
    Returns the line handles drawn.
    """
    _check_axes(ax)
    if literal is None or np.asarray(literal.get("K", [])).size == 0:
        return []
    Ks = _as_1d(literal["K"], "literal['K']")
    rates = _as_1d(literal["lr"], "literal['lr']")
    div = np.asarray(literal["diverged"], bool)
    net = np.where(div, np.nan, _real_array(literal["net_test_rmse"], "literal['net_test_rmse']"))
    flow = _real_array(literal["flow_net_test_rmse"], "literal['flow_net_test_rmse']")
    S = div.shape[-1]
    handles = []
    for r, rate in enumerate(rates):
        c = colors[r % len(colors)]
        m, se = mean_se(net[r], axis=-1)
        fm, _ = mean_se(flow[r], axis=-1)
        handles.append(ax.errorbar(Ks, m, yerr=np.nan_to_num(se), fmt=marker + "-", ms=7, color=c, capsize=2,
                                   label=f"literal GD, lr = {rate:g}")[0])
        handles += ax.plot(Ks, fm, marker, ls="--", ms=7, color=c, mfc="white",
                           label=f"its closed form (same τ = K·lr/N, T/K linearisations), lr = {rate:g}")
        for j in np.flatnonzero(div[r].any(axis=-1)):
            ax.plot(Ks[j], fm[j], "x", ms=12, mew=2, color="red")
            ax.annotate(f"{int(div[r, j].sum())}/{S} diverged", (Ks[j], fm[j]), textcoords="offset points",
                        xytext=(6, -12 - 10 * r), fontsize=7, color=c)
    return handles


def plot_stability_bound(ax: Axes, literal: Mapping[str, Any] | None, *, colors: Sequence[Any] = ("C4", "C5"),
                         linestyles: Sequence[str] = ("-", "--", ":", "-.")) -> list:
    """The stability bound 2/λ_max(G(θ_s)) of the literal runs' current linearisation against the step.

    ``literal["bound"]`` (NR, NL, S, E) at ``bound_step`` (E,): the median over seeds per rate (colour) and
    K (line style), with each rate lr' as a horizontal line of its colour: GD on a linearisation diverges
    where the bound falls below its rate. Red crosses: each diverged run, at (``diverged_step``, lr').
    Log y axis. Draws nothing for ``literal`` None or without a bound. Returns the line handles drawn.
    """
    _check_axes(ax)
    if literal is None or "bound" not in literal or np.asarray(literal.get("K", [])).size == 0:
        return []
    Ks = _as_1d(literal["K"], "literal['K']")
    rates = _as_1d(literal["lr"], "literal['lr']")
    steps = _as_1d(literal["bound_step"], "literal['bound_step']")
    bound = _real_array(literal["bound"], "literal['bound']")
    div = np.asarray(literal["diverged"], bool)
    div_step = np.asarray(literal["diverged_step"])
    handles = []
    with np.errstate(invalid="ignore"):
        med = np.nanmedian(np.where(bound > 0, bound, np.nan), axis=2)  # (NR, NL, E)
    for r, rate in enumerate(rates):
        c = colors[r % len(colors)]
        for j, K in enumerate(Ks):
            handles += ax.plot(steps, med[r, j], color=c, ls=linestyles[j % len(linestyles)], lw=1.5,
                               label=f"lr = {rate:g}, K = {fmt_K(K)}")
        ax.axhline(rate, color=c, lw=0.8, alpha=0.7)
        d = div_step[r][div[r]]
        if d.size:
            ax.plot(d, np.full(d.shape, rate), "x", color="red", ms=8, mew=1.5, linestyle="none")
    top = np.nanmax(med) if np.isfinite(med).any() else rates.max()
    # a diverged run's last linearisation lies far out (bound ~0): clip the axis to 2 decades under the rates
    ax.set(yscale="log", xlabel="step", ylabel="2/λ_max(G(θ_s)) (median over seeds)",
           ylim=(rates.min() / 100, max(top, rates.max()) * 3))
    return handles


# ------------------------------------------------------------------------------------------------
# The damped Gauss–Newton baseline (iterlin.experiments.gn)


def gn_baseline(ax: Axes, K_equiv: Any, acc: Any, *, damping: Any = None, diverged: Any = None,
                offset: float = 1.12, color: Any = "C2",
                label: str | None = "damped Gauss–Newton at K(λ) = B/(λη)") -> Line2D | None:
    """Damped Gauss–Newton runs on a K axis (:func:`set_K_axis`): at their equivalent K(λ) = B/(λη)
    ``K_equiv`` ``(L,)`` finite > 0, × ``offset`` (drawn just right of the K run they match),
    the final test accuracy ``acc`` ``(L, S)`` (fractions) as :func:`seed_curve` (mean ± one s.e.
    over seeds, each seed a dot, diamonds), each point labelled ``λ=…`` when ``damping`` ``(L,)`` is
    given; ``diverged`` ``(L,)`` marks points where a seed diverged. Returns the mean's Line2D, or
    None when L = 0 (nothing drawn)."""
    _check_axes(ax)
    Ks = _as_1d(K_equiv, "K_equiv")
    if Ks.size == 0:
        return None
    if not np.all(np.isfinite(Ks)) or np.any(Ks <= 0):
        raise _bad("K_equiv", f"= {Ks.tolist()}", "finite and > 0 (λ > 0)")
    values = _real_array(acc, "acc")
    if values.ndim != 2 or values.shape[0] != Ks.size:
        raise _bad("acc", f"of shape {values.shape}", f"(L, S) with L = len(K_equiv) = {Ks.size}")
    xs = Ks * float(offset)
    line = seed_curve(ax, xs, values, diverged=diverged, color=color, marker="D", ms=7, label=label,
                      diverged_label=None)
    if damping is not None:
        lam = _as_1d(damping, "damping", Ks.size)
        for x, y, v in zip(xs, 100.0 * np.nanmean(values, axis=1), lam):
            ax.annotate(f"λ={v:.3g}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7, color=color)
    return line


def sweep_colors(h: Mapping[str, Any], lines: Sequence[Any], K: Any) -> list[Any]:
    """The colours of :func:`plot_sweep`'s ``lines`` (one per group of the sweep history ``h``,
    :func:`seed_groups`) at each period of ``K`` ``(M,)``, so that another method's lines match the
    K run they correspond to; a K the sweep does not have gets ``"gray"``."""
    groups = seed_groups(h)
    gK = np.asarray(h["K"], np.float64)[[g[0] for g in groups]]
    out = []
    for k in _as_1d(K, "K"):
        i = np.flatnonzero(gK == k)
        line = lines[i[0]] if i.size and i[0] < len(lines) else None
        out.append(line.get_color() if isinstance(line, Line2D) else "gray")
    return out
