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
# # Figure 8: solving every linearisation with Adam generalises worse

# %% tags=["parameters", "hide-cell"]
scale = "smoke"  # "smoke" (CPU, ~1 min), "cpu" (CPU, ~3 h; one H100, ~1 min), "gpu" (one H100, ~10 min), "paper"
K = None  # the constant period of the Adam-solved run (the paper: 2e5)
lr = None  # SGD learning rate of the plain-SGD run (K 1)
lr_adam = None  # Adam learning rate (the Adam-solved run and the Adam baseline)
steps = None  # steps T of every run
seed = None  # first seed (initialisation and batch order)
n_seeds = None  # seeds seed, seed + 1, ...: each its own initialisation and batches
n_train = None  # training images ("all": every installed image)
n_test = None  # test images
batch_size = None  # mini-batch size (at most n_train); None: full batch
n_eval_train = None  # training images the training metrics are measured on ("all": every one)
n_evals = None  # evaluation points along training (each a full pass over the training and test metrics)

# %% tags=["hide-cell"]
from iterlin.repro.config import describe
from iterlin.experiments import claims, fig8, reference, resolve_notebook, run

# Every parameter is checked here, before anything is computed (None: the scale's default);
# a name the notebook does not take (papermill -p step 50) fails here, naming it.
config = resolve_notebook("fig8", globals())
print(describe(config))

# %% tags=["remove-input"]
# NBVAL_IGNORE_OUTPUT
# (the committed run, and whether the library changed since, change apart from this notebook)
ref = reference.show("fig8", fig8.plot, table=False)

# %% [markdown]
# **Above: the reference run.** The committed run at the largest scale this project could afford (`results/fig8/`, regenerated
# by `make results SCALE=cpu`), plotted by the same code as this build's run below, with its
# provenance and its claims. Lines: the mean over seeds; bands: ± one standard error over seeds; a
# cross marks a run that diverged.
#
# **What the figure shows.** Sec. 3.1 shows that iterative linearisation with each linearisation
# solved exactly is (generalised) Gauss–Newton. Sec. 4.3 runs that algorithm on the paper's CNN on
# CIFAR-10 with softmax cross-entropy, where the convex problem of each linearisation has no closed
# form: it is solved numerically with Adam (moments reset at every re-linearisation), for a large
# constant $K$, then the model is re-linearised. It is compared with $K = 1$ SGD (ordinary
# training) and with an Adam baseline ($K = 1$ with Adam). Left: test accuracy over training.
# Right: training accuracy of the network and of the linear model being optimised.
#
# **What the paper claims** (Sec. 4.3). The Adam-solved run "converges to a solution which
# generalises much less well with 61.3 % accuracy vs 69.4 % for $K = 1$"; "Adam by itself achieves
# over 70 % on this task so the reduction in performance is due to fully optimising the linearised
# model and not due to swapping the optimiser": "the network has achieved a low enough train loss
# before it has a chance to learn features". The paper uses $K = 2 \cdot 10^5$, "a large constant $K$
# rather than a varying $K$, intended to make sure that it reaches 100 % train accuracy with each
# re-linearisation and that these are spaced regularly in the graph".
#
# **Our choice of the re-linearisation rule.** `iterlin.solvers.adam_solve.train_adam_solved` can also
# re-linearise as soon as the linear model reaches 100 % train accuracy (its default). We use the
# paper's constant $K$ (`target_acc=None, plateau_tol=0`): with the accuracy rule, once the
# *network* itself classifies the training set, every new linear model starts at 100 % and the
# run would re-linearise at its first check, i.e. turn into iterative linearisation with a small
# $K$, the opposite of "fully solved". Whether $K$ was large enough is checked, not assumed: the
# claims report the linear model's train accuracy (on every training image) just before each
# re-linearisation.
#
# <details>
# <summary>What each scale runs (smoke, cpu, gpu, paper)</summary>
#
# From `SCALES` in `iterlin/experiments/fig8.py`.
#
# * `smoke` (default; a 2-core CPU, about a minute): 12 real CIFAR-10 training images and 60 test
#   images, full batch, 30 steps; $K = 15$ (two linearisations), Adam learning rate 1e-3 (Adam's
#   default), SGD learning rate 0.05, one seed. Far too few images for meaningful test accuracies
#   (chance is 10 %, and 60 test images give about ±6 points of noise): this scale shows the
#   mechanism on the training set (each linear model reaches 100 % while the network lags far
#   behind) and checks the pipeline; the test-accuracy comparisons read "undecided".
# * `cpu` (the setting of the reference run at the top of this page, which ran it on one H100 in
#   53 s; about 2.8 hours of a 2-core CPU by the earlier runs' 1 s per step): the first 500
#   training images and every installed test image (932), 3 seeds, 3,000 steps of 100 for each of
#   the three runs, $K = 200$ (15 linearisations of 40 epochs each, Adam at 1e-3), SGD at 0.05;
#   evaluated at every re-linearisation. **Why 500 images:** the paper's "solved" means 100 % train
#   accuracy before each re-linearisation. A one-seed probe of this setting (400 steps) measured
#   99.8 % and 100 % before its two re-linearisations; on every installed image (4,660) the earlier
#   cpu run's $K = 80$ left the linear model at 46–61 %, so it did not test the paper's question.
#   **Why 3,000 steps:** the paper compares converged solutions. A first 3-seed run of 800 steps
#   (2,360 s) ended with the Adam-solved *network* at 52–60 % train accuracy and still rising; the
#   next, 2,400 steps (3,019 s of the CPU, commit c7690da), at 99.6, 99.6 and 98.6 %: one
#   seed under the 99 % that the convergence row asks. At 3,000 steps it ends at 99.0, 98.8 and
#   98.8 %: the Adam-solved network hovers at 97–100 % train accuracy right after each late
#   re-linearisation (97.4–99.8 % at steps 2,600–3,000) instead of settling, so two seeds are under
#   99 % and by that rule, fixed before the runs, the comparisons read *n/a* again. Fewer images
#   do not make it settle: a trial on 250 images (3,000 steps, $K = 200$, so 80 epochs per
#   linearisation; the 2-core CPU, about 40 minutes a seed; stopped after seed 0's three runs and
#   seed 1's Adam-solved one, since one run under 99 % already decides the row) hovered the same
#   way, seed 0's Adam-solved network at 93.6–99.2 % train accuracy after its late
#   re-linearisations and 98.0 % at step 3,000, seed 1's at 94.4–100 % and 100 % (seed 0's test
#   accuracy: Adam-solved 27.8 %, $K = 1$ SGD 28.2 %, Adam 28.8 %). What they
#   measured: the Adam-solved run at 34.0 % against 34.4 % for $K = 1$ SGD (Δ +0.4 points, 95 % t
#   interval [−2.5, +3.3], 3 seeds, paired test images) and 34.1 % for Adam at $K = 1$ (Δ +0.1,
#   [−3.3, +3.5]), against the paper's 8.1 and about 9 points: both intervals exclude gaps that
#   large. What the scale changes: 500 images cap every run's test accuracy far below the paper's
#   (about 34 % for $K = 1$ here), and each linearisation is solved
#   in 200 steps instead of $2 \cdot 10^5$. The row "the network keeps what each solved
#   linearisation learned" measures how far the solved parameters left the region where the
#   linearisation describes the network: right after the first three re-linearisations the
#   network is at 11–36 % train accuracy (11 % is chance), after the fourth and fifth at 52–79 %,
#   and from the seventh on at 95–100 %, against 100 % for the linear model just before each.
# * `gpu` (one H100; not measured): every installed image, 3 seeds, batches of 256, 20 000 steps,
#   $K = 2000$ (10 linearisations), SGD at 0.01; about $1.5 \cdot 10^{15}$ FLOP per seed.
# * `paper`: $K = 2 \cdot 10^5$ (the paper's); the paper states neither the learning rates nor the
#   number of steps: we use Adam's default 1e-3, SGD at 1e-3 (as Fig. 2) and $T = 10K$; 3 seeds.
#
# Shared details: CNN of Appendix C, Flax default initialisation, softmax cross-entropy on the
# linearised logits (the loss is not linearised); the three runs of one seed start from the same
# initialisation and see the same batches, so they are compared seed by seed and on the same test
# images (the claims' noise rule, `iterlin.repro.stats.difference`).
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
fig8.plot(results)
claims(results)
