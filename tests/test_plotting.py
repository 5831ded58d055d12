"""The plotting helpers the figures share (``iterlin.repro.plotting``), drawn with the Agg backend."""

import math
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from iterlin.repro.plotting import (  # noqa: E402
    accuracy_against_K,
    as_1d,
    as_runs,
    bad_argument,
    band,
    bound_panel,
    check_axes,
    per_run,
    plot_bound,
    real_array,
    k1_and_largest,
    legend,
    log_positions,
    mark_steps,
    mean_se,
    panels,
    plot_runs,
    rug,
    seed_curve,
    seed_points,
    set_K_axis,
    top_ticks,
)


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


@pytest.fixture(autouse=True)
def _close_all():
    yield
    plt.close("all")


STEP = np.array([0, 10, 20, 30])
ACC = np.array([[0.1, 0.3, 0.5, 0.6],
                [0.1, 0.2, 0.4, 0.5],
                [0.1, 0.25, 0.25, 0.25]])  # run 2 diverged at step 15: frozen afterwards
KS = np.array([1.0, 100.0, math.inf])


def _crosses(ax):
    return [ln for ln in ax.lines if ln.get_marker() == "x"]


# ----------------------------------------------------------------------------------------------
# plot_runs


def test_plot_runs_one_line_per_run_labelled_with_fmt_K(ax):
    lines = plot_runs(ax, STEP, ACC, KS)
    assert len(lines) == 3 and len(ax.lines) == 3  # nothing diverged: no cross
    assert [ln.get_label() for ln in lines] == ["K = 1", "K = 100", "K = ∞"]
    for i, ln in enumerate(lines):
        np.testing.assert_allclose(ln.get_xdata(), STEP)
        np.testing.assert_allclose(ln.get_ydata(), 100 * ACC[i])  # default scale: percent
        assert to_rgba(ln.get_color()) == to_rgba(f"C{i}")


def test_plot_runs_cross_at_divergence_step_with_frozen_value(ax):
    values = ACC.copy()
    values[2, 3] = np.nan  # a non-finite trailing value is held at the last finite one
    lines = plot_runs(ax, STEP, values, KS, diverged=np.array([False, False, True]),
                      diverged_step=np.array([-1, -1, 15]))
    crosses = _crosses(ax)
    assert len(ax.lines) == 4 and len(crosses) == 1
    (cross,) = crosses
    np.testing.assert_allclose(cross.get_xdata(), [15])
    np.testing.assert_allclose(cross.get_ydata(), [25.0])
    assert to_rgba(cross.get_color()) == to_rgba(lines[2].get_color())
    assert cross.get_label() == "K = ∞ diverged at step 15"
    np.testing.assert_allclose(lines[2].get_ydata(), [10, 25, 25, 25])  # stays at its last finite value


def test_plot_runs_diverged_from_step_alone_and_step_scale(ax):
    lines = plot_runs(ax, STEP, ACC, KS, diverged_step=np.array([-1, 12, -1]), step_scale=0.5, scale=1,
                      diverged_label=None)
    (cross,) = _crosses(ax)
    np.testing.assert_allclose(cross.get_xdata(), [6])
    np.testing.assert_allclose(cross.get_ydata(), [ACC[1, -1]])
    assert cross.get_label().startswith("_")  # no legend entry
    np.testing.assert_allclose(lines[0].get_xdata(), STEP / 2)


def test_plot_runs_per_point_divergence_mask(ax):
    mask = np.zeros(ACC.shape, bool)
    mask[0, [1, 3]] = True
    plot_runs(ax, STEP, ACC, KS, diverged=mask)
    (cross,) = _crosses(ax)
    np.testing.assert_allclose(cross.get_xdata(), [10, 30])
    np.testing.assert_allclose(cross.get_ydata(), [30, 60])


def test_plot_runs_second_series_matches_colours_and_select(ax):
    net = plot_runs(ax, STEP, ACC, KS, color=["red", "green", "blue"])
    lin = plot_runs(ax, STEP, ACC / 2, KS, linestyle="--", color=net, select=KS > 1, label="K = {K}: linear")
    assert lin[0] is None and len(ax.lines) == 5
    for a, b in zip(net[1:], lin[1:]):
        assert to_rgba(a.get_color()) == to_rgba(b.get_color())
        assert b.get_linestyle() == "--"
    assert lin[2].get_label() == "K = ∞: linear"


def test_plot_runs_default_colour_is_the_run_index_in_every_series(ax):
    first = plot_runs(ax, STEP, ACC, KS)
    second = plot_runs(ax, STEP, ACC / 2, KS, linestyle=":")  # same axes: colours follow the run, not the cycle
    for i, (a, b) in enumerate(zip(first, second)):
        assert to_rgba(a.get_color()) == to_rgba(b.get_color()) == to_rgba(f"C{i}")


def test_plot_runs_label_args_and_one_run(ax):
    (line,) = plot_runs(ax, STEP, ACC[0], 1, label="K = {K}, lr = {lr:g}", label_args={"lr": [0.05]},
                        diverged=True, diverged_step=20, color="C3")
    assert line.get_label() == "K = 1, lr = 0.05"
    (cross,) = _crosses(ax)
    np.testing.assert_allclose([cross.get_xdata()[0], cross.get_ydata()[0]], [20, 60])


def test_plot_runs_per_run_styles_from_an_array(ax):
    lines = plot_runs(ax, STEP, ACC, KS, linestyle=np.where(KS > 1, "--", "-"), marker=np.array(["o", "s", "^"]))
    assert [ln.get_linestyle() for ln in lines] == ["-", "--", "--"]
    assert [ln.get_marker() for ln in lines] == ["o", "s", "^"]


@pytest.mark.parametrize("kwargs, name", [
    (dict(values=np.zeros((3, 5))), "values"),
    (dict(values=np.zeros((2, 3, 4))), "values"),
    (dict(K=[1, 2]), "K"),
    (dict(step=np.zeros((4, 1))), "step"),
    (dict(diverged=np.array([True, False])), "diverged"),
    (dict(diverged=np.array([False, True, False])), "diverged_step"),
    (dict(diverged_step=[0, 1]), "diverged_step"),
    (dict(color=["C0", "C1"]), "color"),
    (dict(linestyle=["-", "--"]), "linestyle"),
    (dict(linestyle=np.array(["-", "--"])), "linestyle"),
    (dict(marker=np.array([["o"] * 3])), "marker"),
    (dict(select=[5]), "select"),
    (dict(label_args={"lr": [1, 2]}), "label_args['lr']"),
])
def test_plot_runs_bad_shapes_name_the_parameter(ax, kwargs, name):
    args = dict(step=STEP, values=ACC, K=KS) | kwargs
    with pytest.raises(ValueError, match="^" + re.escape(name) + " "):
        plot_runs(ax, args.pop("step"), args.pop("values"), args.pop("K"), **args)


# ----------------------------------------------------------------------------------------------
# mean_se and band


def test_mean_se_matches_independent_computation():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(5, 4))
    mean, se = mean_se(v, axis=1)
    for e in range(5):
        row = list(v[e])
        m = sum(row) / 4
        s = math.sqrt(sum((r - m) ** 2 for r in row) / 3) / 2
        assert mean[e] == pytest.approx(m) and se[e] == pytest.approx(s)
    m0, s0 = mean_se(v.T, axis=0)
    np.testing.assert_allclose(m0, mean)
    np.testing.assert_allclose(s0, se)


def test_mean_se_leaves_out_nan_and_masked_entries():
    v = np.array([[1.0, 3.0, np.nan], [2.0, 4.0, 100.0], [5.0, np.nan, np.nan]])
    where = np.array([[True, True, True], [True, True, False], [True, True, True]])
    with np.errstate(all="raise"):
        mean, se = mean_se(v, axis=1, where=where)
    np.testing.assert_allclose(mean, [2.0, 3.0, 5.0])
    np.testing.assert_allclose(se[:2], [1.0, 1.0])
    assert np.isnan(se[2])  # one seed: no standard error


def test_mean_se_bad_arguments():
    with pytest.raises(ValueError, match="^axis "):
        mean_se(np.zeros((2, 3)), axis=2)
    with pytest.raises(ValueError, match="^where "):
        mean_se(np.zeros((2, 3)), where=np.ones((3, 2), bool))


def test_band_is_mean_plus_minus_standard_error(ax):
    rng = np.random.default_rng(1)
    x = np.array([1.0, 2.0, 3.0])
    v = rng.normal(size=(3, 6))  # (E, S)
    mean = v.mean(axis=1)
    se = v.std(axis=1, ddof=1) / np.sqrt(6)
    line, fill = band(ax, x, v, axis=1, label="mean", scale=100)
    np.testing.assert_allclose(line.get_ydata(), 100 * mean)
    verts = fill.get_paths()[0].vertices
    for xe, lo, hi in zip(x, 100 * (mean - se), 100 * (mean + se)):
        ys = verts[np.isclose(verts[:, 0], xe), 1]
        assert ys.min() == pytest.approx(lo) and ys.max() == pytest.approx(hi)
    assert to_rgba(fill.get_facecolor()[0], 1) == to_rgba(line.get_color(), 1)


def test_band_seed_axis_first(ax):
    v = np.array([[1.0, 2.0], [3.0, 6.0]])  # (S, E)
    line, fill = band(ax, [0, 1], v, axis=0)
    np.testing.assert_allclose(line.get_ydata(), [2.0, 4.0])
    assert fill is not None


def test_band_single_seed_draws_only_the_line(ax):
    v = np.array([[0.2], [0.4], [0.3]])  # (E, S = 1)
    line, fill = band(ax, [1, 2, 3], v, axis=1)
    assert fill is None and len(ax.collections) == 0 and len(ax.lines) == 1
    np.testing.assert_allclose(line.get_ydata(), [0.2, 0.4, 0.3])


def test_band_bad_shapes_name_the_parameter(ax):
    with pytest.raises(ValueError, match="^x "):
        band(ax, [1, 2], np.zeros((3, 4)), axis=1)
    with pytest.raises(ValueError, match="^values "):
        band(ax, [1, 2], np.zeros(2), axis=0)
    with pytest.raises(ValueError, match="^axis "):
        band(ax, [1, 2], np.zeros((2, 2)), axis=2)


def test_seed_points_kept_dots_and_capped_crosses(ax):
    v = np.array([[1.0, 2.0, np.nan], [3.0, 5e4, 4.0]])
    kept = np.array([[True, True, True], [True, False, True]])
    dots, crosses = seed_points(ax, [1.0, 10.0], v, kept=kept, jitter=0.05, cap=1e3)
    assert len(dots.get_offsets()) == 4
    np.testing.assert_allclose(np.sort(np.asarray(crosses.get_offsets())[:, 1]), [1e3, 1e3])
    with pytest.raises(ValueError, match="^values "):
        seed_points(ax, [1.0], v)


def test_seed_points_scale(ax):
    dots, _ = seed_points(ax, [1.0, 10.0], np.array([[0.1, 0.2], [0.3, 0.4]]), scale=100)
    np.testing.assert_allclose(np.sort(np.asarray(dots.get_offsets())[:, 1]), [10, 20, 30, 40])


def test_seed_curve_mean_band_dots_and_crosses_at_diverged_points(ax):
    v = np.array([[0.1, 0.3], [0.2, 0.4], [0.5, 0.5]])  # 3 points × 2 seeds
    line = seed_curve(ax, [1.0, 3.0, 10.0], v, diverged=[False, False, True], color="C2", label="K = 1",
                      diverged_label="diverged")
    np.testing.assert_allclose(line.get_ydata(), [20, 30, 50])  # the mean, in percent
    assert line.get_label() == "K = 1" and to_rgba(line.get_color()) == to_rgba("C2")
    assert len(ax.collections) == 2  # the band and the seeds' dots
    np.testing.assert_allclose(np.sort(np.asarray(ax.collections[1].get_offsets())[:, 1]), [10, 20, 30, 40, 50, 50])
    cross = [ln for ln in ax.lines if ln.get_marker() == "x"]
    assert len(cross) == 1 and cross[0].get_label() == "diverged"
    np.testing.assert_allclose(cross[0].get_xdata(), [10.0]) and np.testing.assert_allclose(cross[0].get_ydata(), [50])
    line = seed_curve(ax, [1.0], np.array([[2.0]]), scale=1, dots=False)  # one seed: no band, no dots
    np.testing.assert_allclose(line.get_ydata(), [2.0]) and len(ax.collections) == 2
    with pytest.raises(ValueError, match="^values "):
        seed_curve(ax, [1.0, 2.0], v)
    with pytest.raises(ValueError, match="^diverged "):
        seed_curve(ax, [1.0, 3.0, 10.0], v, diverged=[True])


# ----------------------------------------------------------------------------------------------
# axes


def test_top_ticks_label_a_second_axis(ax):
    xs = set_K_axis(ax, [1, 10, math.inf])
    top = top_ticks(ax, xs, ["100", "10", "0"], label="re-linearisations T/K")
    np.testing.assert_allclose(top.get_xticks(), xs)
    assert [t.get_text() for t in top.get_xticklabels()] == ["100", "10", "0"]
    assert top.get_xlabel() == "re-linearisations T/K"
    with pytest.raises(ValueError, match="^labels "):
        top_ticks(ax, xs, ["1"])


def test_log_positions_put_inf_and_zero_at_the_edges():
    np.testing.assert_allclose(log_positions([1, 10, math.inf]), [1, 10, 300])
    np.testing.assert_allclose(log_positions([0, 0.1, 1]), [0.01, 0.1, 1])
    with pytest.raises(ValueError, match="^values "):
        log_positions([-1, 1])


def test_set_K_axis_ticks_decades_and_infinity(ax):
    K = np.array([1, 3, 10, 1e4, math.inf])
    xs = set_K_axis(ax, K)
    np.testing.assert_allclose(xs, [1, 3, 10, 1e4, 3e5])
    assert ax.get_xscale() == "log"
    np.testing.assert_allclose(ax.get_xticks(), [1, 10, 1e4, 3e5])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "10", "1e4", "∞"]
    xs_all = set_K_axis(ax, K, ticks="all", xlabel=None)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "3", "10", "1e4", "∞"]
    np.testing.assert_allclose(xs_all, xs)
    with pytest.raises(ValueError, match="^K "):
        set_K_axis(ax, [0.5, 2])


def test_legend_only_with_labels(ax):
    ax.plot([0, 1], [0, 1])
    assert legend(ax) is None and ax.get_legend() is None
    ax.plot([0, 1], [1, 0], label="a")
    assert legend(ax) is ax.get_legend() is not None


def test_panels_and_marks():
    fig, axes = panels(3, panel_size=(5, 4), sharey=True, suptitle="t")
    assert axes.shape == (3,) and tuple(fig.get_size_inches()) == (15, 4)
    lines = mark_steps(axes[0], [5, 10], label="re-linearised")
    assert len(lines) == 2 and lines[0].get_label() == "re-linearised" and lines[1].get_label().startswith("_")
    axes[1].set_ylim(1e-3, 1)
    r = rug(axes[1], [1.0, 2.0])
    np.testing.assert_allclose(r.get_ydata(), [1e-3, 1e-3])
    with pytest.raises(ValueError, match="^ncols "):
        panels(0)


def test_k1_and_largest():
    assert k1_and_largest([8.0, 1.0, math.inf, 2.0]) == (1, 2)
    with pytest.raises(ValueError, match="^K "):
        k1_and_largest([2, 3])


def test_plot_bound_one_line_per_run_the_rates_and_the_rises(ax):
    from iterlin.analysis.stability import BoundRecord

    nan = np.nan
    rec = BoundRecord(np.array([0, 2, 4]), np.array([[0.2, nan, 0.4], [0.4, nan, 0.1], [0.3, nan, 0.3]]),
                      np.array([0.1, 0.1, 0.1]), np.array([1.0, 2.0, 2.0]), np.array([-1, 3, -1]))
    lines = plot_bound(ax, rec)
    assert len(lines) == 2 and lines[0].get_label() == "K = 1, lr 0.1"  # seeds of one setting share a colour
    runs = [ln for ln in ax.get_lines() if ln.get_marker() == "."]
    assert len(runs) == 3 and runs[1].get_color() == runs[2].get_color() != runs[0].get_color()
    np.testing.assert_allclose(runs[1].get_xydata(), [[0, 0.4], [4, 0.1]])  # the recorded points only
    (cross,) = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    np.testing.assert_allclose(cross.get_xydata(), [[3, 0.175]])  # on the run's line at the rise
    levels = sorted(ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_linestyle() in ("--", ":"))
    assert levels == pytest.approx([0.1, 0.3])  # η and η / (1/3)
    assert ax.get_yscale() == "log"
    _, ax2 = plt.subplots()
    assert len(plot_bound(ax2, rec, select=lambda k: k > 1, fraction=None)) == 1


def test_bound_panel_draws_a_history_s_record_with_its_labels(ax):
    """Figs. 2, 3 and 7's panel: the bound η / lr_over_bound of each K along the recorded steps,
    the axes named, and the title saying what the dashed and dotted lines are."""
    h = {"step": np.array([0, 2, 4]), "K": np.array([1.0, 4.0]), "lr": np.array([0.1, 0.1]),
         "lr_over_bound": np.array([[0.05, 0.1, 0.2], [0.05, 0.2, 0.25]])}
    lines = bound_panel(ax, h, title="mini-batch: ")
    assert [ln.get_label() for ln in lines] == ["K = 1", "K = 4"]
    np.testing.assert_allclose(lines[1].get_xydata(), [[0, 2.0], [2, 0.5], [4, 0.4]])  # 0.1 / ratio
    assert ax.get_title() == "mini-batch: the linear model's bound (dashed: η; dotted: 3η)"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("step", "2 / λ_max(θ_s)") and ax.get_legend() is not None


def test_argument_checks_the_figures_share_name_the_parameter(ax):
    assert str(bad_argument("x", "= 3", "a list")) == "x = 3 is not allowed: x must be a list."
    assert check_axes(ax) is ax
    with pytest.raises(ValueError, match="^ax = None is not allowed: ax must be a matplotlib Axes"):
        check_axes(None)
    with pytest.raises(ValueError, match="^v = 'a' is not allowed"):
        real_array("a", "v")
    np.testing.assert_array_equal(as_1d([1, 2], "x", 2), [1.0, 2.0])
    message = "x of shape (3,) is not allowed: x must be 1-D of length 2 (one per run)"
    with pytest.raises(ValueError, match=re.escape(message)):
        as_1d([1, 2, 3], "x", 2, "one per run")
    runs, one = as_runs([1, 2], "v", 2)
    assert runs.shape == (1, 2) and one
    with pytest.raises(ValueError, match="^v of shape"):
        as_runs(np.zeros((2, 3)), "v", 2)
    np.testing.assert_array_equal(per_run(5, "K", 1), [5])  # a scalar only for one run
    with pytest.raises(ValueError, match=r"^K of shape \(\) is not allowed"):
        per_run(5, "K", 2)



def test_accuracy_against_K_draws_finite_K_infinity_and_the_updates(ax):
    K = np.array([1.0, 10.0, math.inf])
    acc = np.array([[0.40, 0.42], [0.38, 0.40], [0.30, 0.31]])
    xs = accuracy_against_K(ax, K, acc, np.array([False, True, False]), [100, 10, 0], finite_label="finite",
                            inf_label="inf")
    assert xs.shape == (3,) and xs[2] > xs[1] > xs[0]  # ∞ at the right edge
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert "finite" in labels and "inf" in labels and "a seed diverged" in labels
    assert ax.get_ylabel() == "final test accuracy (%)"
