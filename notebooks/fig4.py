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
# # Figure 4: ResNet-18, without and with BatchNorm, K = 1 against a large K
#
# **What the figure shows.** Iterative linearisation (Algorithm 1) on a deeper network: the usual
# CIFAR variant of ResNet-18 (3×3 stem, no max-pooling, four stages of two basic blocks, global
# average pooling). Between re-linearisations the linear model
# $f^{\mathrm{lin}}_{s}(\theta) = f_{\theta_s} + \nabla_\theta f_{\theta_s}^\top (\theta - \theta_s)$
# is trained with SGD; every $K$ steps $\theta_s \leftarrow \theta$; $K = 1$ is ordinary SGD. Left:
# ResNet-18 without BatchNorm and without data augmentation. Right: with BatchNorm and data
# augmentation (random flips and 4-pixel crops). Solid lines: the network's test accuracy; dashed:
# the linear model being trained (large $K$).
#
# **What the paper claims** (Sec. 4.1, Fig. 4, Appendix C). Large-$K$ iterative linearisation
# "again achieves similar test performance to SGD"; without BatchNorm at learning rate
# $7\cdot10^{-7}$ and $K = 10^6$, with BatchNorm and augmentation at $10^{-5}$ and $K = 10^5$.
# "Runs with BatchNorm are far more likely to diverge due to linearising the BatchNorm layer
# hence why $K$ is much smaller for that run." The paper gives no accuracy numbers for this figure.
#
# **BatchNorm under linearisation** (`bn_mode`). The paper linearises the BatchNorm layers with
# the rest of the network. `bn_mode="batch"` (default) does that: each batch is normalised by its
# own statistics inside $f(\theta, x)$, and the statistics are linearised too (evaluation
# normalises each chunk of up to 1000 images by its own statistics). `bn_mode="frozen"` is our
# alternative: the statistics are constants frozen at $\theta_s$ and re-estimated from the current
# batch at each re-linearisation (`iterlin.models.make_model(..., bn_mode="frozen")`, whose
# `refresh` is passed to the training loop). Divergence (a NaN or exploding loss) is a result: a diverged run is
# frozen at its last finite state, marked with a cross, and counted in the claims.
#
# **What each scale runs** (`SCALES` in `iterlin/experiments/fig4.py`).
#
# * `smoke` (default; a 2-core CPU, about a minute of wall time and a minute and a half of CPU,
#   two thirds of it JAX start-up, ResNet-18 initialisation and compiling the four runs: see
#   `notebooks/README.md`): 16 real CIFAR-10 training images and 16 test images, 4 SGD steps with
#   batches of 4 at learning rate 0.01 in both panels, and $K = 2$ instead of $10^6$ / $10^5$
#   (2 re-linearisations). **This only demonstrates the pipeline** (both models, both BatchNorm
#   modes, linearised training, evaluation, divergence bookkeeping): 4 steps on 16 images say
#   nothing about the claims, and 16 test images cannot tell two accuracies apart (the claims read
#   "n/a at this scale").
# * `gpu` (one H100, about ten minutes by a FLOP estimate, not measured: no GPU was available
#   when this was written): every installed image, 4000 steps of 128, $K = 400$
#   (10 re-linearisations) in both panels, learning rates 1e-3 (no BatchNorm) and 1e-2 (BatchNorm),
#   our choices, not tuned.
# * `paper`: the paper's $K$ and learning rates; the number of steps ($10^7$: 10 re-linearisations
#   of the no-BatchNorm run) and batches of 256 are ours. Far beyond a CPU.
#
# Shared details: Flax default initialisation, softmax cross-entropy on the linearised logits (the
# loss is not linearised), plain SGD; in each panel every run starts from the same initialisation
# and sees the same batches. The runs are trained one after the other (on a CPU, a vmapped pair of
# ResNet-18 steps costs more than two single ones).

# %% tags=["parameters"]
scale = "smoke"  # "smoke" (CPU, ~1 min), "gpu" (one H100, ~10 min), "paper" (the paper's settings)
K = None  # no-BatchNorm panel: the large period compared with plain SGD (K 1 always runs); e.g. 1e6, or inf
lr = None  # no-BatchNorm panel: SGD learning rate
K_bn = None  # BatchNorm panel: the large period (K 1 always runs); e.g. 1e5
lr_bn = None  # BatchNorm panel: SGD learning rate
bn_mode = None  # "batch" (statistics of each batch, linearised) or "frozen" (frozen at θ_s, refreshed)
steps = None  # number of SGD steps T (both panels)
seed = None  # initialisation and batch order
n_train = None  # training images ("all": every installed image)
n_test = None  # test images
batch_size = None  # mini-batch size (at most n_train)

# %%
import matplotlib.pyplot as plt

from iterlin.config import describe
from iterlin.experiments import claims, resolve_notebook, run
from iterlin.experiments.fig4 import divergence_report
from iterlin.plotting import legend, panels, plot_runs

# Every parameter is checked here, before anything is computed (None: the scale's default);
# a name the notebook does not take (papermill -p step 50) fails here, naming it.
config = resolve_notebook("fig4", globals())
print(describe(config))

# %%
# NBVAL_IGNORE_OUTPUT
results = run(config)  # computed once, then read from the cache (.cache/results)

# %% [markdown]
# Test accuracy over training. Solid lines: the network $f_\theta$; dashed: the linear model
# $f^{\mathrm{lin}}_s(\theta)$ being trained (large $K$); a cross marks a run that diverged (its
# curve stays at its last finite state).

# %%
titles = {"no_bn": "no BatchNorm, no augmentation",
          "bn": f"BatchNorm ({config['bn_mode']} statistics) + augmentation"}
fig, axes = panels(2, sharey=True, suptitle=f"ResNet-18 on CIFAR-10 ({config['scale']} scale)")
for ax, (key, title) in zip(axes, titles.items()):
    h = results[key]
    lines = plot_runs(ax, h["step"], h["net_test_acc"], h["K"], diverged=h["diverged"],
                      diverged_step=h["diverged_step"], label="K = {K}, lr = {lr:g}: network",
                      label_args={"lr": h["lr"]})
    plot_runs(ax, h["step"], h["lin_test_acc"], h["K"], linestyle="--", marker=None, color=lines,
              select=h["K"] > 1, label="K = {K}: linearised model")
    ax.set(xlabel="step", title=title)
    legend(ax)
axes[0].set_ylabel("test accuracy (%)")
plt.show()

# %% [markdown]
# Divergence per run (the paper: BatchNorm runs "are far more likely to diverge").

# %%
print(divergence_report(results, titles))

# %% [markdown]
# ## Claims
#
# The paper's claim, the paper's number, what this run measured and whether it holds at this
# scale, by the rule in the last column. "≈ SGD" is only decided when the test set is large
# enough to resolve a 2-point difference.

# %%
print(claims(results))
