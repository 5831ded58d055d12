"""Plotting helpers shared by the figures (each figure's ``plot`` in ``iterlin/experiments/<name>.py``).

Compute and plotting stay apart: every helper here takes result arrays (NumPy, as the
experiments return them) and a matplotlib ``Axes`` (or creates a figure) and draws. Nothing
scientific is computed here; the only reduction is :func:`mean_se` (mean and standard error over
a seed axis), which :func:`band` draws and plots call instead of computing numbers themselves.
No helper calls ``plt.show()``: a figure's ``plot`` does, once per figure. A helper that only one
figure draws lives in that figure's module, beside its ``plot``; the argument checks here
(:func:`check_axes`, :func:`as_1d`, ... raising :func:`bad_argument`'s error) are shared with them.

Conventions shared by the figures:

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D

from ..relin import fmt_K
from ..analysis.stability import STABLE_FRACTION, bound_record

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
    "panels",
    "legend",
    "k1_and_largest",
    "plot_bound",
    "bound_panel",
    "accuracy_against_K",
    "bad_argument",
    "check_axes",
    "real_array",
    "as_1d",
    "as_runs",
    "per_run",
    "figure_summary",
    "show_summaries",
]

#: Marker size of the divergence cross.
CROSS_SIZE = 12


# ------------------------------------------------------------------------------------------------
# argument checks (a bad shape gives a ValueError naming the parameter), shared with the figures' plots


def bad_argument(name: str, got: str, allowed: str) -> ValueError:
    """The error for argument ``name``: ``"<name> <got> is not allowed: <name> must be <allowed>."``
    (returned, for the caller to raise)."""
    return ValueError(f"{name} {got} is not allowed: {name} must be {allowed}.")


def _mask(mask, v: np.ndarray, name: str) -> np.ndarray:
    """``mask`` checked to be a boolean array of ``v``'s shape (all True when None)."""
    if mask is None:
        return np.ones(v.shape, bool)
    m = np.asarray(mask)
    if m.shape != v.shape or m.dtype != bool:
        raise bad_argument(name, f"of shape {m.shape} and dtype {m.dtype}",
                           f"a boolean array of values' shape {v.shape}")
    return m


def real_array(value: Any, name: str) -> np.ndarray:
    """``value`` as a float64 array of any shape; :func:`bad_argument` naming ``name`` if it is not real numbers."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise bad_argument(name, f"= {value!r}", "an array of real numbers") from None
    return arr


def as_1d(value: Any, name: str, length: int | None = None, what: str = "") -> np.ndarray:
    """``value`` as a 1-D float64 array (of ``length``, when given; ``what`` says why in the error)."""
    arr = real_array(value, name)
    if arr.ndim != 1 or (length is not None and arr.shape[0] != length):
        want = f"1-D of length {length}" if length is not None else "1-D"
        raise bad_argument(name, f"of shape {arr.shape}", want + (f" ({what})" if what else ""))
    return arr


def as_runs(values: Any, name: str, n_points: int) -> tuple[np.ndarray, bool]:
    """``values`` as ``(R, E)`` with E = n_points; a 1-D ``(E,)`` is one run. Returns (array, was_1d)."""
    arr = real_array(values, name)
    if arr.ndim == 1:
        arr, one = arr[None, :], True
    else:
        one = False
    if arr.ndim != 2 or arr.shape[1] != n_points:
        raise bad_argument(name, f"of shape {np.shape(values)}",
                           f"(R, E) or (E,) with E = len(step) = {n_points} evaluation points")
    return arr, one


def per_run(value: Any, name: str, n_runs: int, dtype=None) -> np.ndarray:
    """``value`` as an ``(R,)`` array, R = ``n_runs`` (a scalar allowed when R = 1)."""
    arr = np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)
    if arr.ndim == 0 and n_runs == 1:
        arr = arr[None]
    if arr.shape != (n_runs,):
        raise bad_argument(name, f"of shape {arr.shape}", f"(R,) with R = {n_runs} runs (one entry per run)")
    return arr


def check_axes(ax: Any, name: str = "ax") -> Axes:
    """``ax`` itself, checked to be a matplotlib ``Axes``."""
    if not isinstance(ax, Axes):
        raise bad_argument(name, f"= {ax!r}", "a matplotlib Axes")
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
    v = real_array(values, "values")
    if v.ndim == 0:
        raise bad_argument("values", "of shape ()", "an array with a seed axis")
    if not isinstance(axis, (int, np.integer)) or not -v.ndim <= axis < v.ndim:
        raise bad_argument("axis", f"= {axis!r}", f"an axis of values (shape {v.shape})")
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
            raise bad_argument("color", f"of length {len(color)}",
                               f"None, one colour, or one colour (or Line2D) per run: R = {n_runs}")
        return [c.get_color() if isinstance(c, Line2D) else c for c in color]
    raise bad_argument("color", f"= {color!r}", "None, one colour, or a sequence of colours or Line2D, one per run")


def _per_run_style(value: Any, name: str, n_runs: int) -> list[Any]:
    if value is None or isinstance(value, str):
        return [value] * n_runs
    if (isinstance(value, Sequence) or (isinstance(value, np.ndarray) and value.ndim == 1)) and len(value) == n_runs:
        return list(value)
    raise bad_argument(name, f"= {value!r}", f"None, one string, or a sequence (or 1-D array) of R = {n_runs} of them")


def _selected(select: Any, n_runs: int) -> np.ndarray:
    if select is None:
        return np.ones(n_runs, bool)
    arr = np.asarray(select)
    if arr.dtype == bool:
        if arr.shape != (n_runs,):
            raise bad_argument("select", f"of shape {arr.shape}",
                               f"a boolean (R,) mask with R = {n_runs}, or run indices")
        return arr
    if arr.ndim > 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise bad_argument("select", f"= {select!r}", f"a boolean (R,) mask or run indices in [0, {n_runs})")
    idx = np.atleast_1d(arr).astype(int)
    if np.any((idx < -n_runs) | (idx >= n_runs)):
        raise bad_argument("select", f"= {select!r}", f"run indices in [0, {n_runs})")
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
    check_axes(ax)
    x = as_1d(step, "step") * float(step_scale)
    v, _ = as_runs(values, "values", x.shape[0])
    R = v.shape[0]
    Ks = per_run(K, "K", R)
    fields = {name: per_run(arr, f"label_args[{name!r}]", R) for name, arr in (label_args or {}).items()}
    colors = _resolve_colors(color, R)
    styles = _per_run_style(linestyle, "linestyle", R)
    markers = _per_run_style(marker, "marker", R)
    chosen = _selected(select, R)

    # divergence: per run (R,) with a step, or per point (R, E)
    div_run = np.zeros(R, bool)
    div_point = np.zeros_like(v, dtype=bool)
    at = np.full(R, -1.0)
    if diverged_step is not None:
        at = per_run(diverged_step, "diverged_step", R).astype(np.float64)
    if diverged is not None:
        d = np.asarray(diverged)
        if d.dtype != bool:
            raise bad_argument("diverged", f"of dtype {d.dtype}", "boolean")
        if d.ndim == 2 or (d.ndim == 1 and R == 1 and d.shape == (x.shape[0],) and x.shape[0] != 1):
            d = d.reshape(R, -1) if d.ndim == 1 else d
            if d.shape != v.shape:
                raise bad_argument("diverged", f"of shape {np.shape(diverged)}", f"(R,) or (R, E) = {v.shape}")
            if diverged_step is not None:
                raise bad_argument("diverged_step", "given with a per-point (R, E) diverged",
                                   "None when diverged marks points")
            div_point = d
        else:
            div_run = per_run(d, "diverged", R)
            if div_run.any() and diverged_step is None:
                raise bad_argument("diverged_step", "= None", "given (an (R,) array of steps) when a run diverged")
    elif diverged_step is not None:
        div_run = at >= 0
    if np.any(div_run & (at < 0)):
        raise bad_argument("diverged_step", f"= {at.tolist()}", "≥ 0 for every run that diverged")

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
    v = real_array(h[metric], metric)
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
    x = as_1d(h["step"], "step") * float(kwargs.get("step_scale", 1.0))
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
    check_axes(ax)
    v = real_array(values, "values")
    if v.ndim != 2:
        raise bad_argument("values", f"of shape {v.shape}", "2-D: (E, S) or (S, E), with the seed axis given by axis")
    if not isinstance(axis, (int, np.integer)) or not -2 <= axis < 2:
        raise bad_argument("axis", f"= {axis!r}", "0, 1 or -1 (the seed axis of the 2-D values)")
    n_points = v.shape[1 - axis % 2]
    xs = as_1d(x, "x", n_points, f"one position per point of values {v.shape} off the seed axis {axis}")
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
    check_axes(ax)
    xs = as_1d(x, "x")
    v = real_array(values, "values")
    if v.ndim != 2 or v.shape[0] != xs.shape[0]:
        raise bad_argument("values", f"of shape {v.shape}", f"(N, S) with N = len(x) = {xs.shape[0]}")
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
    check_axes(ax)
    xs = as_1d(x, "x")
    v = real_array(values, "values")
    if v.ndim != 2 or v.shape[0] != xs.shape[0]:
        raise bad_argument("values", f"of shape {v.shape}", f"(N, S) with N = len(x) = {xs.shape[0]}")
    line, _ = band(ax, xs, v, axis=1, color=color, label=label, alpha=alpha, scale=scale, marker=marker,
                   **plot_kwargs)
    c = line.get_color()
    if dots:
        seed_points(ax, xs, v, color=c, size=10, alpha=0.5, scale=scale)
    if diverged is not None:
        d = as_1d(np.asarray(diverged, dtype=bool), "diverged", xs.shape[0], "one flag per point").astype(bool)
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
    v = as_1d(values, "values")
    if np.any(np.isnan(v)) or np.any(v < 0):
        raise bad_argument("values", f"= {v.tolist()}", "≥ 0 (∞ allowed), never NaN")
    pos = v[np.isfinite(v) & (v > 0)]
    right = pos.max() * inf_factor if pos.size else 1.0
    left = pos.min() / zero_factor if pos.size else 1.0
    return np.where(np.isinf(v), right, np.where(v == 0, left, v))


def set_log_ticks(ax: Axes, positions: Any, labels: Sequence[str] | None = None, *, axis: str = "x") -> None:
    """A log axis with ticks exactly at ``positions`` ``(N,)`` (labels: ``f"{p:g}"`` by default), no minor ticks."""
    check_axes(ax)
    p = as_1d(positions, "positions")
    if labels is None:
        labels = [f"{q:g}" for q in p]
    if len(labels) != p.shape[0]:
        raise bad_argument("labels", f"of length {len(labels)}", f"one label per position ({p.shape[0]})")
    if axis not in ("x", "y"):
        raise bad_argument("axis", f"= {axis!r}", "'x' or 'y'")
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
    check_axes(ax)
    Ks = as_1d(K, "K")
    if np.any(np.isnan(Ks)) or np.any(Ks < 1):
        raise bad_argument("K", f"= {Ks.tolist()}", "≥ 1 (∞ allowed)")
    if ticks not in ("decades", "all"):
        raise bad_argument("ticks", f"= {ticks!r}", "'decades' or 'all'")
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
    check_axes(ax)
    p = as_1d(positions, "positions")
    if len(labels) != p.shape[0]:
        raise bad_argument("labels", f"of length {len(labels)}", f"one label per position ({p.shape[0]})")
    top = ax.secondary_xaxis("top")
    top.set_xticks(p, list(labels))
    top.xaxis.set_minor_locator(plt.NullLocator())
    if label is not None:
        top.set_xlabel(label)
    return top


def legend(ax: Axes, *, fontsize: float = 8, **kwargs) -> Legend | None:
    """``ax.legend(fontsize=8)`` when something on ``ax`` has a label; None (and no warning) otherwise."""
    check_axes(ax)
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
            raise bad_argument(name, f"= {n!r}", "an integer >= 1")
    w, h = panel_size
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), sharey=sharey, squeeze=squeeze,
                             layout="constrained")
    if suptitle is not None:
        fig.suptitle(suptitle)
    return fig, axes


# ------------------------------------------------------------------------------------------------
# marks


def accuracy_against_K(ax: Axes, K: Any, acc: Any, diverged: Any, relin: Sequence[Any], *, finite_label: str,
                       inf_label: str) -> np.ndarray:
    """Final test accuracy against K on a K axis (:func:`set_K_axis`, K = ∞ at the right edge): the
    finite K as one :func:`seed_curve` (circles), K = ∞ as a red square, both the mean over seeds ±
    one standard error with each seed a dot and a cross where a seed diverged; the top axis gives
    the re-linearisations ``relin`` (one per K). ``K`` (M,), ``acc`` (M, S), ``diverged`` (M,).
    Returns the x positions of the K (for more series on the same axis)."""
    K = as_1d(K, "K")
    xs = set_K_axis(ax, K, ticks="all")
    inf = np.isinf(K)
    acc, diverged = np.asarray(acc, np.float64), np.asarray(diverged, bool)
    seed_curve(ax, xs[~inf], acc[~inf], diverged=diverged[~inf], color="C0", label=finite_label,
               diverged_label="a seed diverged")
    if inf.any():
        seed_curve(ax, xs[inf], acc[inf], diverged=diverged[inf], color="C3", marker="s", ms=8, label=inf_label,
                   diverged_label=None)
    top_ticks(ax, xs, [str(r) for r in relin], label="re-linearisations T/K")
    ax.set(ylabel="final test accuracy (%)")
    return xs


def plot_bound(ax: Axes, record: Any, *, fraction: float | None = STABLE_FRACTION, label: str = "K = {K}, lr {lr}",
               select: Callable[[float], bool] | None = None) -> list:
    """The linear model's bound 2/λ_max(θ_s) along training (a :class:`iterlin.analysis.stability.BoundRecord`):
    one line per run through its recorded points, coloured by (K, lr) setting (seeds share a
    colour; the settings in the order of the runs, as :func:`plot_sweep` colours them), each rate
    η as a dashed horizontal line and ``fraction`` of the bound as a dotted one at η / ``fraction``
    (the margin a reference run keeps); a cross where a run's linear model's loss first rose inside
    a block, on its bound line. ``select(K) -> bool``: which runs to draw (default
    all). Log y axis. Returns one Line2D per setting drawn."""
    check_axes(ax)
    step = as_1d(record.step, "step")
    bound = real_array(record.bound, "bound")
    # the settings in the order the runs first show them, so that colours follow plot_sweep's
    settings = list(dict.fromkeys((float(k), float(r)) for k, r in zip(record.K, record.lr)
                                  if select is None or select(float(k))))
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


def bound_panel(ax: Axes, history: Mapping, *, title: str = "", label: str = "K = {K}") -> list:
    """:func:`plot_bound` of a sweep history that records the sharpness (``lr_over_bound``,
    :func:`iterlin.analysis.stability.bound_record`), one line per run, labelled by ``label`` (a template of
    :func:`plot_bound`'s; ``"K = {K}, lr {lr}"`` where the runs differ in rate), with the axes
    labelled and the title ``"<title>the linear model's bound (dashed: η; dotted: 3η)"`` (the dotted
    line: η over :data:`~iterlin.analysis.stability.STABLE_FRACTION`). The panel that Figs. 2, 3 and 7 draw
    beside their accuracies."""
    lines = plot_bound(ax, bound_record(history), label=label)
    ax.set(xlabel="step", ylabel="2 / λ_max(θ_s)",
           title=f"{title}the linear model's bound (dashed: η; dotted: {1 / STABLE_FRACTION:.0f}η)")
    legend(ax)
    return lines


def mark_steps(ax: Axes, steps: Any, *, color: Any = "gray", linestyle: str = ":", linewidth: float = 0.8,
               label: str | None = None) -> list[Line2D]:
    """A vertical line at each of ``steps`` ``(N,)`` (e.g. the re-linearisation steps); the first carries ``label``."""
    check_axes(ax)
    s = as_1d(steps, "steps")
    return [ax.axvline(t, color=color, linestyle=linestyle, linewidth=linewidth,
                       **({"label": label} if label is not None and j == 0 else {}))
            for j, t in enumerate(s)]


def rug(ax: Axes, x: Any, *, y: float | None = None, color: Any = "k", size: float = 12) -> Line2D:
    """Tick marks ``|`` at ``x`` ``(N,)`` (e.g. NTK eigenvalues) at height ``y`` (default: the bottom of the y range)."""
    check_axes(ax)
    xs = as_1d(x, "x")
    y0 = ax.get_ylim()[0] if y is None else float(y)
    (line,) = ax.plot(xs, np.full_like(xs, y0), linestyle="none", marker="|", color=color, ms=size)
    return line


# ------------------------------------------------------------------------------------------------
# run selection shared by the K = 1 vs large-K notebooks


def k1_and_largest(K: Any) -> tuple[int, int]:
    """Indices of the K = 1 run and of the run with the largest K in ``K`` ``(R,)`` (the two compared in Figs. 3, 6, 7, NTK)."""
    Ks = as_1d(K, "K")
    ones = np.flatnonzero(Ks == 1)
    if not ones.size:
        raise bad_argument("K", f"= {Ks.tolist()}", "a grid containing K = 1")
    return int(ones[0]), int(np.flatnonzero(Ks == Ks.max())[0])


# ------------------------------------------------------------------------------------------------
# What a figure draws, as text (what nbval compares: it compares no image)
# ------------------------------------------------------------------------------------------------


def _finite_points(xy: Any) -> tuple[int, int]:
    """(points, points with a finite x and y) of an (n, 2) array of coordinates."""
    a = np.asarray(xy, dtype=float).reshape(-1, 2) if np.size(xy) else np.zeros((0, 2))
    return len(a), int(np.isfinite(a).all(axis=1).sum())


def figure_summary(fig: Figure) -> str:
    """One line of what ``fig`` draws, the same on any machine for the same code and config:
    matplotlib's ``<Figure size WxH with N Axes>`` followed by, per panel, its curves (Line2D), each
    as finite/all points, and its marker sets (scatter), each as finite/all points, e.g.
    ``<Figure size 1280x400 with 2 Axes: [1] 3 curves 7/7 7/7 4/7; [2] 1 curve 7/7, 1 marker set 3/3>``.

    A lost panel, a lost curve, a curve cut short or gone NaN change it; the values drawn do not
    (they differ between CPUs at a smoke run's scale). Labels and titles are left out: they may
    carry measured numbers."""
    parts = []
    for i, ax in enumerate(fig.axes, 1):
        lines = [_finite_points(ln.get_xydata()) for ln in ax.get_lines()]
        marks = [_finite_points(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets")
                 and type(c).__name__ == "PathCollection"]
        part = f"[{i}] {len(lines)} curve{'s' * (len(lines) != 1)}" + "".join(f" {f}/{n}" for n, f in lines)
        if marks:
            part += f", {len(marks)} marker set{'s' * (len(marks) != 1)}" + "".join(f" {f}/{n}" for n, f in marks)
        parts.append(part)
    w, h = (fig.get_size_inches() * fig.dpi).round().astype(int)
    head = f"<Figure size {w}x{h} with {len(fig.axes)} Axes"
    return head + (": " + "; ".join(parts) if parts else "") + ">"


def show_summaries() -> bool:
    """Make IPython print :func:`figure_summary` as a figure's plain-text form (beside its image),
    so that a notebook's stored outputs, and nbval comparing them, see what each figure draws.
    Done on import of this module, in an IPython shell only (returns whether there was one): it
    gives ``Figure`` a ``_repr_pretty_`` (IPython's pretty printer reads it; a type printer would
    not last, as IPython removes every formatter's entry for ``Figure`` when the inline backend
    starts), which changes nothing outside IPython's display."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a notebook dependency
        return False
    if get_ipython() is None:
        return False
    Figure._repr_pretty_ = lambda fig, printer, cycle: printer.text(figure_summary(fig))
    return True


show_summaries()
