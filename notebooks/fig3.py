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
# # Figure 3: SGD with data augmentation, K = 1 against a very large K

# %% tags=["parameters", "hide-cell"]
scale = "smoke"  # "smoke" (CPU, minutes), "cpu" (CPU, ~55 min), "gpu" (one H100, minutes), "paper" (the paper's settings)
K = None  # the large period compared with plain SGD (K 1 always runs too); e.g. 5e6, or inf (never)
lr = None  # SGD learning rate
steps = None  # number of SGD steps T
seed = None  # first seed (initialisation and batch order)
n_seeds = None  # seeds seed, seed + 1, ...: each its own initialisation and batches
n_train = None  # training images ("all": every installed image)
n_test = None  # test images
batch_size = None  # mini-batch size (at most n_train)
n_eval_train = None  # training images the training metrics are measured on ("all": every one)
n_sharpness = None  # training images lambda_max of the linear model is measured on (the first ones)
sharpness_iters = None  # power iterations per measurement (warm-started; at most)
sharpness_every = None  # record lambda_max every this many steps (at evaluation points)
augment = None  # random flips and crops of each training batch (True) or none (False)
n_evals = None  # evaluation points along training (each a full pass over the training and test metrics)

# %% tags=["hide-cell"]
from iterlin.repro.config import describe
from iterlin.experiments import claims, fig3, reference, resolve_notebook, run

# Every parameter is checked here, before anything is computed (None: the scale's default);
# a name the notebook does not take (papermill -p step 50) fails here, naming it.
config = resolve_notebook("fig3", globals())
print(describe(config))

# %% tags=["remove-input"]
# NBVAL_IGNORE_OUTPUT
# (the committed run, and whether the library changed since, change apart from this notebook)
ref = reference.show("fig3", fig3.plot, table=False)

# %% [markdown]
# **Above: the reference run.** The committed run at the `cpu` scale (`results/fig3/`, regenerated
# by `make results SCALE=cpu NAMES=fig3`), plotted by the same code as this build's run below, with its
# provenance and its claims. Solid lines: the network $f_\theta$; dashed: the linear model
# $f^{\mathrm{lin}}_s(\theta)$ trained between re-linearisations; bands: ± one standard error over
# seeds; a cross marks a run that diverged.
#
# **What the figure shows.** The paper's CNN is trained on CIFAR-10 with mini-batch SGD and data
# augmentation (random horizontal flips and random crops of the 4-pixel-padded image) by iterative
# linearisation (Algorithm 1): the linear model
# $f^{\mathrm{lin}}_{s}(\theta) = f_{\theta_s} + \nabla_\theta f_{\theta_s}^\top (\theta - \theta_s)$
# is trained, and every $K$ steps it is re-linearised, $\theta_s \leftarrow \theta$. $K = 1$ is
# ordinary SGD. The plot shows the test accuracy of the network $f_\theta$ for $K = 1$ and for a
# large $K$, and the test accuracy of the linear model being trained for the large $K$ (it drops
# back to the network's at each re-linearisation).
#
# **What the paper claims** (Sec. 4.1). With augmentation the final test accuracies differ by
# under one point: 82.3 % for $K = 1$ and 81.4 % for $K = 5 \cdot 10^6$; "we get enough feature
# learning in 8–12 feature updates to achieve comparable generalisation to hundreds of thousands
# of feature updates when $K = 1$".
#
# <details>
# <summary>What each scale runs (smoke, cpu, gpu, paper)</summary>
#
# From `SCALES` in `iterlin/experiments/fig3.py`.
#
# * `smoke` (default; a 2-core CPU, a few minutes: see `notebooks/README.md`): 256 real CIFAR-10
#   training images and 200 test images, 24 steps of SGD with batches of 32 and learning rate
#   0.05 (the paper's rates would show nothing in 24 steps), and $K = 3$ instead of
#   $5 \cdot 10^6$, so that the large-$K$ run makes 8 re-linearisations, as many feature updates
#   as the paper's. Both runs are still at the very start of training, where the large-$K$ run
#   typically lags (the paper's large-$K$ runs need "enough time to train"): this scale checks
#   that the pipeline works; it does not reproduce 82.3 %.
# * `cpu` (the committed reference run, shown at the top of this page; 3,170 s of a 2-core CPU):
#   the setting where the linear model stays stable to the end. 1,000 training images (the first
#   of the shared subset) and every test image (932), 3 seeds, 3,200 steps of 100 at learning rate
#   0.001 with augmentation (320 epochs), $K = 320$ (10 re-linearisations, the paper's "8–12
#   feature updates"); evaluations every 80 steps (four inside each block, so that a rise of the
#   linear model's training loss within a block shows) and $\lambda_{\max}$ of the linear model's
#   curvature on 256 training images at every re-linearisation, drawn on the right as the bound
#   $2/\lambda_{\max}(\theta_s)$ beside $\eta$. Why this setting: a network trained at rate $\eta$
#   sharpens until $\lambda_{\max}$ nears $2/\eta$ (measured along $K = 1$ on every image: at
#   $\eta = 0.01$ it reached $2/\eta$ by step 300, where this page's earlier $K = 50$ runs fell
#   apart; at $\eta = 0.002$ it kept rising, past a third of the bound by step 2,000), and a fixed
#   linearisation cannot follow it there. On 1,000 images $\lambda_{\max}$ follows the progress
#   $\eta t$, not the step (a pilot at 0.00125 against 0.002, seeds 0 and 1), so half the rate for
#   twice the steps reaches the same accuracy at half of $\eta\lambda_{\max}/2$. What it measured:
#   $\eta\lambda_{\max}/2$ stayed at or under 0.15 along $K = 320$ and 0.19 along $K = 1$, still
#   rising at the last step (under a third, so the stability row reads *yes*), and no linear model's
#   loss rose within a block. $K = 320$ lags $K = 1$ by 2–3 points for the first half (−3.4 at step
#   320, −2.4 at step 1,600) and ends at 36.0 % against 36.6 % (Δ −0.6, 95 % t interval [−1.7, +0.4]
#   over 3 seeds and the 932 paired test images; per seed −0.6, −0.9 and −0.4). So "8–12 feature
#   updates suffice" holds (the interval lies inside the shared ±2 points of "on par", the paper's
#   "comparable generalisation"; the $K$ sweep judges the same claim so), and "under one point" is
#   undecided, and the 932 test images, not the three seeds, set the interval's width: the spread
#   of the per-seed differences is 5 % of its variance, the test images 95 %, so its quantile is
#   1.96 (Welch–Satterthwaite: 671 degrees of freedom), not $t(2) = 4.30$; more seeds would barely
#   narrow it, more held-out images would. What it changes: fewer
#   images and a shorter horizon give lower accuracies (about 36–37 %) than every image would, and
#   the networks reach only 42–46 % training accuracy on the 1,000 images, so this is not the end of
#   training; the question, large $K$ against $K = 1$ after about ten feature updates with
#   augmentation, is the paper's.
# * `gpu`: the `cpu` setting with 24 seeds, which narrows the seed term of the interval
#   ($t(23)/\sqrt{24}$ = 0.42 against $t(2)/\sqrt{3}$ = 2.48 standard deviations) but not its
#   test-image term, the larger at `cpu` (above). Not yet run at
#   this rate. The earlier 24-seed run at twice the rate for half the steps (lr 0.002, 1,600 steps,
#   $K = 160$; 278 s of one H100 with JAX 0.11.2, commit d24333b) measured Δ −0.7, 95 % t interval
#   [−1.2, −0.1] (per seed from −2.8 to +1.4): "under one point" undecided there too, the lag real
#   but small; its $\eta\lambda_{\max}/2$ reached 0.48 in seed 4 (over a third in 3 of the 24
#   seeds), half-way to the bound, which is why the rate was halved. The paper's own gap is 0.9
#   points.
# * `paper`: $K = 5 \cdot 10^6$ as in the paper; the paper states neither the learning rate nor the
#   number of steps for this figure: we use 1e-4 (its mini-batch rate of Fig. 2) and
#   $T = 12K = 6 \cdot 10^7$ steps (12 feature updates). Far beyond a CPU.
#
# Model and training details shared by all scales: CNN of Appendix C (two 5×5 convolutions with 50
# channels, 2×2 max-pooling, dense 120 and 84), Flax default initialisation, softmax
# cross-entropy on the linearised logits (the loss is not linearised), plain SGD; the runs of one
# seed start from the same initialisation and see the same batches, so $K = 1$ and large $K$ are
# compared seed by seed and on the same test images (the claims' noise rule,
# `iterlin.repro.stats.difference`).
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
# the pipeline works, not a reproduction), then its claims: the paper's claim, the paper's number,
# what this run measured and whether it holds at this scale, by the rule in the last column
# (absolute numbers of the paper are only judged at the `paper` scale).

# %%
# NBVAL_IGNORE_OUTPUT
results = run(config)  # computed once, then read from the cache (.cache/results)

# %%
fig3.plot(results)
claims(results)
