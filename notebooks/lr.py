# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-papermill,-execution
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Beyond the paper: learning rates

# %% tags=["parameters", "hide-cell"]
scale = "smoke"  # "smoke" (CPU, a minute), "cpu" (CPU, ~30 min), "gpu" (one H100, ~10 min), "paper" (the paper's settings)
K = None  # the large period compared with plain SGD (K 1 always runs too)
lr = None  # learning rates: a list, or one rate r meaning [r/10, 0.3 r, r]
steps = None  # number of SGD steps T, the same for every run
seed = None  # first seed (initialisation and batch order)
n_seeds = None  # seeds seed, seed + 1, ...: each its own initialisation and batches
n_train = None  # training images ("all": every installed image)
n_test = None  # test images
batch_size = None  # mini-batch size (at most n_train)
n_sharpness = None  # training images the bound 2/lambda_max is measured on (at initialisation and along training)
sharpness_iters = None  # power iterations per measurement
sharpness_every = None  # record lambda_max along training every this many steps (at evaluation points)
n_eval_train = None  # training images the training metrics are measured on ("all": every one)

# %% tags=["hide-cell"]
import matplotlib.pyplot as plt

from iterlin.claims import fmt_K
from iterlin.config import describe
from iterlin.experiments import claims, reference, resolve_notebook, run
from iterlin.experiments.lr import by_lr, timing
from iterlin.plotting import legend, panels, plot_bound, plot_sweep, run_colors, seed_curve, set_log_ticks
from iterlin.stability import bound_record

# Every parameter is checked here, before anything is computed (None: the scale's default);
# a name the notebook does not take (papermill -p step 50) fails here, naming it.
config = resolve_notebook("lr", globals())
print(describe(config))


def plot(results):
    """Top: final test accuracy (left) and final test loss (right, log scale) against the learning
    rate, one line per K: the mean over seeds ± one standard error, each seed a dot, a cross where a
    seed diverged (frozen at its last finite state); the dotted line is the linear model's stability
    bound 2/λ_max at initialisation. Middle: test accuracy over training at each rate, for K = 1
    (left) and the large K (right); a cross marks a run that diverged. Bottom (when the run recorded
    it): the linear model's bound 2/λ_max(θ_s) along training, each seed a line, one colour per rate;
    dashed: the rates η; a cross where a large-K run's linear model's loss rose inside a block."""
    acc, loss = by_lr(results), by_lr(results, "net_test_loss")  # (K, lr, seed) arrays and the bound
    h = results["runs"]
    recorded = "lr_over_bound" in h
    fig, axes = panels(2, 3 if recorded else 2, panel_size=(6, 4), squeeze=False,
                       suptitle=f"CNN on CIFAR-10: learning rates ({results['config']['scale']} scale, "
                                f"T = {results['config']['steps']} steps, {int(results['n_runs'])} runs)")
    for ax, s, scale_, what in ((axes[0, 0], acc, 100, "final test accuracy (%)"),
                                (axes[0, 1], loss, 1, "final test loss")):
        for i, k in enumerate(s["K"]):
            seed_curve(ax, s["lr"], s["values"][i], diverged=s["diverged"][i], scale=scale_, color=f"C{i}",
                       label=f"K = {fmt_K(k)}", diverged_label=f"K = {fmt_K(k)}: a seed diverged")
        ax.axvline(s["bound"], color="k", linestyle=":", label=f"2/λ_max(θ_0) = {s['bound']:.3g}")
        set_log_ticks(ax, s["lr"])  # a tick at every rate of the grid
        ax.set(xlabel="learning rate", ylabel=what)
        legend(ax)
    axes[0, 1].set_yscale("log")
    colors = run_colors(len(acc["lr"])) * len(acc["K"])  # one colour per rate, the same for every K
    for ax, k in ((axes[1, 0], acc["K"][0]), (axes[1, 1], acc["K"][-1])):
        plot_sweep(ax, h, "net_test_acc", select=lambda kk, k=k: kk == k, color=colors, marker=None,
                   label="lr {lr:g}", diverged_label="lr {lr:g} diverged")
        ax.set(xlabel="step", ylabel="test accuracy (%)", title=f"K = {fmt_K(k)} over training")
        legend(ax)
    if recorded:
        record = bound_record(h)
        for ax, k in ((axes[2, 0], acc["K"][0]), (axes[2, 1], acc["K"][-1])):
            plot_bound(ax, record, select=lambda kk, k=k: kk == k, fraction=None, label="lr {lr}")
            ax.set(xlabel="step", ylabel="2 / λ_max(θ_s)", title=f"K = {fmt_K(k)}: the linear model's bound")
            legend(ax)
    plt.show()


# %% tags=["remove-input"]
# NBVAL_IGNORE_OUTPUT
# (the committed run, and whether the library changed since, change apart from this notebook)
ref = reference.show("lr", plot, table=False)

# %% [markdown]
# **Above: the reference run.** The committed run at the largest scale this project could afford (`results/lr/`, regenerated by
# `make results SCALE=cpu NAMES=lr`), plotted by the same code as this build's run below, with its
# provenance and its claims.
#
# **What the reviewers asked.** The paper trains with small learning rates (1e-5 to 1e-3) and finds
# large $K$ on par with $K = 1$. Its reviewers asked whether that survives larger rates. There is a
# reason to expect it may not: between re-linearisations the linear model
# $f^{\mathrm{lin}}_{s}(\theta) = f_{\theta_s} + \nabla_\theta f_{\theta_s}^\top (\theta - \theta_s)$
# is trained by gradient descent on a loss whose Hessian is the Gauss–Newton matrix $G$ at
# $\theta_s$, which is stable only for $\eta < 2/\lambda_{\max}(G)$ (`iterlin.stability`), while
# the network itself ($K = 1$) is not bound that way and can train at rates where the linear model
# diverges.
#
# **What this notebook runs.** The paper's CNN is trained on CIFAR-10 with $K = 1$ and one large $K$
# at each learning rate of a grid spanning at least an order of magnitude, every $(K, \eta)$ and seed
# in one sweep (the runs of one seed share the initialisation and the batches), for the same number
# of steps. It also measures the bound $2/\lambda_{\max}(G)$ at each seed's initialisation on a few
# training images (power iteration), drawn as a vertical line. A run that diverges (a non-finite or
# exploding loss) is frozen at its last finite state and marked with a cross; a run that blows up
# without tripping that guard shows in its accuracy and loss.
#
# **The questions**, decided in the claims by the shared noise rule (paired on seeds and test
# images, on par within 2 points): does large $K$ need a smaller learning rate than $K = 1$ (on par at
# one rate, worse or diverged at a larger one at which $K = 1$ still trains)? Is it on par at the rates
# below the bound, as the paper's far smaller rates are, and at the rates above it?
#
# <details>
# <summary>What each scale runs (smoke, cpu, gpu, paper)</summary>
#
# From `SCALES` in `iterlin/experiments/lr.py`.
#
# * `smoke` (default; a 2-core CPU, about a minute): 256 real CIFAR-10 training images and 200 test
#   images, 24 steps of batches of 16, $K \in \{1, 3\}$ (8 re-linearisations) at rates 0.01, 0.03 and
#   0.1, one seed; $\lambda_{\max}$ on 32 images with 10 power iterations. A check that the pipeline
#   works, not a result.
# * `cpu` (the reference run, about 45 minutes of a 2-core CPU): every installed image (4,660
#   training and 932 test images), 3 seeds, 300 steps of 128 without augmentation,
#   $K \in \{1, 50\}$ (6 re-linearisations) at 0.01, 0.03 and 0.1 (the rates of Fig. 3's earlier
#   reference run, which saw $K = 50$ on par at 0.01 for 375 steps, blown up at 0.03 and diverged
#   at 0.1 while $K = 1$ trained at all three); evaluations every 12–13 steps (four inside each
#   block) and $\lambda_{\max}$ of the linear model's curvature on 256 training images at every
#   re-linearisation (the bottom row of the figure), so that each failure can be set against
#   $\eta$ and the bound $2/\lambda_{\max}(\theta_s)$ of the block it happened in.
# * `gpu` (one H100, about ten minutes: an estimate, not measured): 3 seeds, $10^4$ steps of 256,
#   $K \in \{1, 1000\}$ at five rates from 0.003 to 0.3.
# * `paper`: all of CIFAR-10, $K \in \{1, 10^5\}$ at the paper's rates 1e-5, 1e-4, 1e-3 and at 1e-2,
#   $10^6$ steps of 256 (our choices).
#
# Shared details: CNN of Appendix C, Flax default initialisation, softmax cross-entropy on the
# linearised logits, plain SGD; the final test accuracy is the network's $f_{\theta_T}$ (the linear
# model's for $K = \infty$).
#
# </details>

# %% [markdown]
# ## The reference run's claims
#
# The claims table of the reference run above, by the rules in its last column.

# %% tags=["hide-input"]
# NBVAL_IGNORE_OUTPUT
reference.show_claims(ref)

# %% [markdown]
# ## This build's run
#
# The run this build executed, at the scale of the parameters cell (`smoke` in CI: a check that
# the pipeline works, not a result), with the number of runs and the wall time of the computation
# that produced it, then its claims: the question, what the paper says, what this run measured and
# whether it holds at this scale, by the rule in the last column.

# %%
# NBVAL_IGNORE_OUTPUT
results = run(config)  # computed once, then read from the cache (.cache/results)
print(timing(results))  # the number of runs and the wall time of the computation

# %%
plot(results)
claims(results)
