# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -papermill,-execution
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
# # Beyond the paper: when to update features
#
# **The question.** The paper re-linearises on a clock: every $K$ steps (Algorithm 1, Eq. 4), and
# counts feature updates as $T/K$ (Definition 1). Its finding is that a few feature updates
# suffice to reach plain SGD's accuracy. But a clock spends its updates evenly, whether or not
# the features have moved. Would a rule that updates the features *when the linear model has
# drifted from the network* reach $K = 1$'s accuracy with fewer updates than the fixed period
# that does, and where in training does it put them?
#
# **What this notebook runs.** The paper's CNN on CIFAR-10, trained by iterative linearisation
# (the linear model
# $f^{\mathrm{lin}}_{s}(\theta) = f_{\theta_s} + \nabla_\theta f_{\theta_s}^\top (\theta - \theta_s)$
# is trained with SGD and re-linearised, $\theta_s \leftarrow \theta$) for the same $T$ steps
# under two rules:
#
# * a fixed period $K$ (the paper's rule; $K = 1$ is plain SGD), for several $K$;
# * the adaptive rule of `iterlin.relin.adaptive(tol)`: re-linearise after step $t$ when, on the
#   step's batch $X_t$, $|L(f^{\mathrm{lin}}_{s}(\theta_t)) - L(f_{\theta_t})| > \mathrm{tol}\cdot
#   L(f_{\theta_t})$, for several tolerances.
#
# Each rule is one sweep (one compiled, vmapped program) over its settings and the seeds; the runs
# of one seed, in both sweeps, start from the same initialisation and see the same batches, so
# every comparison is paired by seed and by test image. Every run is scored by its network
# $f_{\theta_T}$; its number of feature updates is the number of re-linearisations it made.
#
# **The claim, stated before the run.** *Adaptive placement reaches $K = 1$'s accuracy (within
# 2 points by the shared noise rule) with fewer feature updates than the fixed period that does.*
# Let $n$ be a setting's number of re-linearisations (the most over seeds). The claim holds
# ("yes") when some tolerance is on par with $K = 1$ and has $n$ below that of every fixed $K > 1$
# that is on par or undecided; it fails ("no") when every tolerance is either not on par or makes
# at least as many updates as a fixed $K$ that is on par; otherwise it is undecided. A diverged
# run is not on par. A second row measures where the adaptive runs put their updates: the share
# made in the first half of training, against $\lfloor n/2 \rfloor / n$ for $n$ updates spread
# evenly (as a fixed period spreads them), decided over seeds.
#
# **What each scale runs** (`SCALES` in `iterlin/experiments/adaptive.py`).
#
# * `smoke` (default; a 2-core CPU, about a minute): 256 real CIFAR-10 training images and 200 test
#   images, 24 steps of SGD with batches of 16 at learning rate 0.05, $K \in \{1, 3, 8\}$ and
#   tolerances $\{0.003, 0.01, 0.03\}$, one seed. A check that the pipeline works, not a result.
# * `cpu` (the reference run, about 30 minutes of a 2-core CPU by an estimate from measured step
#   costs; see the module): every installed image (4,660 training and 932 test images of the shared
#   subset), 2 seeds, $T = 200$ steps of 128 at learning rate 0.01, $K \in \{1, 10, 30, 100\}$
#   (200, 20, 6 and 2 updates) and tolerances $\{0.003, 0.01, 0.03\}$, chosen from a measured short
#   run so that the adaptive runs span a range of update counts.
# * `gpu` (one H100, about ten minutes: an estimate, not measured): 3 seeds, $T = 10^4$ steps of
#   256, $K$ from 1 to 1000 and seven tolerances from 0.001 to 1.
# * `paper`: all of CIFAR-10 at the paper's mini-batch rate 1e-4 and batch 256, $T = 10^6$ steps
#   (our choice: the paper ran no adaptive rule).
#
# Shared details: CNN of Appendix C (two 5×5 convolutions with 50 channels, 2×2 max-pooling, dense
# 120 and 84), Flax default initialisation, softmax cross-entropy on the linearised logits, plain SGD.

# %% tags=["parameters"]
scale = "smoke"  # "smoke" (CPU, a minute), "cpu" (CPU, ~30 min), "gpu" (one H100, ~10 min), "paper" (the paper's settings)
K = None  # the fixed periods: a list (K 1 is always added), or one K meaning [1, K]
tol = None  # the adaptive tolerances on the relative gap |L_lin - L_net| / L_net: a list of finite numbers > 0
lr = None  # SGD learning rate, the same for every run
steps = None  # number of SGD steps T, the same for every run
seed = None  # first seed (initialisation and batch order)
n_seeds = None  # seeds seed, seed + 1, ...: each its own initialisation and batches
n_train = None  # training images ("all": every installed image)
n_test = None  # test images
batch_size = None  # mini-batch size (at most n_train)
n_eval_train = None  # training images the training metrics are measured on ("all": every one)

# %%
import matplotlib.pyplot as plt

from iterlin.config import describe
from iterlin.experiments import claims, reference, resolve_notebook, run
from iterlin.experiments.adaptive import by_policy, placement, raster, timing
from iterlin.plotting import accuracy_against_updates, legend, panels, placement_dots, relin_raster

# Every parameter is checked here, before anything is computed (None: the scale's default);
# a name the notebook does not take (papermill -p step 50) fails here, naming it.
config = resolve_notebook("adaptive", globals())
print(describe(config))


def plot(results):
    """Left: final test accuracy against the number of feature updates (re-linearisations, symlog
    axis), each setting's mean over seeds ± one standard error, each seed a dot: the fixed periods
    K (blue circles) and the adaptive tolerances (orange triangles); a cross marks a diverged
    seed. Middle: when each run re-linearised (a tick per update), the fixed periods on top, then
    every adaptive run; dotted lines at T/4 and T/2. Right: the share of each adaptive run's
    updates made by T/4 and T/2 (dots, per seed) against the even placement of the same number
    of updates (open circles)."""
    s = by_policy(results)  # per setting and seed: updates made and final test accuracy
    labels, rows = raster(results)  # the steps of each run's re-linearisations
    p = placement(results)  # the shares made early, and the even placement's
    fig, (left, mid, right) = panels(3, panel_size=(5.2, 4.2),
                                     suptitle=f"CNN on CIFAR-10: when to update features ({results['config']['scale']} "
                                              f"scale, T = {s['steps']} steps, {int(results['n_runs'])} runs)")
    accuracy_against_updates(left, s["K_relin"], s["K_acc"], names=[f"K={k:g}" for k in s["K"]],
                             diverged=s["K_diverged"], label="fixed period K", color="C0")
    accuracy_against_updates(left, s["tol_relin"], s["tol_acc"], names=[f"tol={t:g}" for t in s["tol"]],
                             diverged=s["tol_diverged"], label="adaptive (tol)", color="C1", marker="^")
    left.set(xlabel="feature updates (re-linearisations)", ylabel="final test accuracy (%)")
    legend(left)
    colors = ["C0" if label.startswith("K=") else "C1" for label in labels]
    relin_raster(mid, rows, labels, T=p["steps"], colors=colors)
    mid.set(title="when each run re-linearised")
    placement_dots(right, p["early"], p["even"], p["fractions"], [f"tol={t:g}" for t in p["tol"]])
    right.set(ylabel="share of the run's updates (%)", title="made early (dots) vs evenly (circles)")
    legend(right)
    plt.show()


# %% [markdown]
# ## The reference run
#
# The committed run at the largest scale this project could afford (`results/adaptive/`,
# regenerated by `make results SCALE=cpu NAMES=adaptive`), plotted by the same code as this build's
# run below, with its provenance and its claims.

# %%
# NBVAL_IGNORE_OUTPUT
# (the committed run, and whether the library changed since, change apart from this notebook)
ref = reference.show("adaptive", plot)

# %% [markdown]
# ## This build's run
#
# The run this build executed, at the scale of the parameters cell (`smoke` in CI: a check that
# the pipeline works, not a result), with the number of runs and the wall time of the computation
# that produced it, then its claims: what was claimed before the run, what this run measured and
# whether it holds at this scale, by the rule in the last column.

# %%
# NBVAL_IGNORE_OUTPUT
results = run(config)  # computed once, then read from the cache (.cache/results)
print(timing(results))  # the number of runs and the wall time of the sweeps when it was computed

# %%
plot(results)
claims(results)
