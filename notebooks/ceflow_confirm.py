# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-papermill,-execution
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The paper's regime for its loss, confirmatory: Figs. 2, 3, 5 and 8 under preregistered rows

# %% tags=["parameters", "hide-cell"]
scale = "smoke"  # "smoke" (CPU, ~1 min), "cpu" (the registered run: CPU, about two hours), "gpu" (the same run), "paper"
n_train = None  # the doubling grid of training-set sizes N (K inf and R n_relin run at each)
n_grid = None  # N of the R grid and of the longer-tau runs (one of n_train; None: the smallest)
total_time = None  # total flow time T in the paper's eta*K units (mean loss, rate eta): 500 is its eta*K
relins = None  # the re-linearisation counts R of the iterated flow (tau: T/R each)
n_relin = None  # R of the scaling runs and of the longer-tau runs
long_taus = None  # the longer times tau per linearisation at R n_relin (each above T/n_relin; Fig. 8)
n_heldout = None  # held-out images scored per image (test images first, then unused training images; None: all)
seed = None  # first seed
n_seeds = None  # seeds: seed, seed + 1, ...
n_check = None  # images of the consistency check against literal full-batch GD
check_time = None  # the time that check covers (eta*K units)
check_relins = None  # R of the small-tau flow in that check
gd_steps = None  # literal GD steps in that check (eta: check_time / gd_steps)
rtol = None  # relative tolerance of the ODE solver (diffrax, float64)
atol = None  # absolute tolerance of the ODE solver

# %% tags=["hide-cell"]
from iterlin.repro.config import describe
from iterlin.experiments import ceflow_confirm, claims, reference, resolve_notebook, run

# Every parameter is checked here, before anything is computed (None: the scale's default);
# a name the notebook does not take (papermill -p step 50) fails here, naming it.
config = resolve_notebook("ceflow_confirm", globals())
print(describe(config))

# %% tags=["remove-input"]
# NBVAL_IGNORE_OUTPUT
# (the committed run, and whether the library changed since, change apart from this notebook)
ref = reference.show("ceflow_confirm", ceflow_confirm.plot, table=False)

# %% [markdown]
# **Above: the registered run** (`results/ceflow_confirm/`, by `make results SCALE=cpu
# NAMES=ceflow_confirm`; it resumes after its last finished run, or re-linearisation, when
# interrupted), committed on 2026-12-06: 100 runs over 10 seeds, 75 minutes of computation on this
# 2-core CPU (about 7.5 minutes per seed). The figure is {doc}`ceflow`'s: held-out accuracy against
# $R$ at a fixed total time, and against $N$.
#
# **What it decided: nothing, by its own rule.** The convergence row reads *no*: one of the 30
# networks of the $R$ grid with $R \ge 2$ ($R = 4$, seed 108) ended at 98.4 % training accuracy, 63
# of its 64 images, under the registered 99 %. Every comparison requires that row, so every one
# reads *undecided*, whatever its interval. The rule stays as it was registered: relaxing it now
# would be a choice made after seeing the data. The rows still print what they measured, marked as
# not counted, and those intervals are exploratory evidence only: $K = \infty$ below $R = 32$
# ([+2.6, +4.1] points); $R = 8$ within a quarter of that gap (±0.84 points) of $R = 32$
# ([-0.5, +0.1]), $R = 4$ not ([-1.2, -0.2]); $K = \infty$ gaining less from $N = 32 \to 128$
# than $R = 8$ ([+1.3, +4.1]); $\tau = 62.5$ above $\tau = 2000$ at $R = 8$ ([+0.1, +0.6]). Each
# points the way the paper says, Fig. 2's large $\tau$ excepted. A criterion that one image of one
# network can fail was too strict for 30 networks; a later registration should fix it on the
# networks' mean or on a count of images, before its run.
#
# **Why this page.** {doc}`ceflow` computes the paper's regime for its own loss: iterated
# linearised gradient flow under cross-entropy, each linearisation flowed for $\tau = \eta K$ up to
# the paper's 500, full batch, trained until the networks fit their training set. Its rows were
# written with its first runs, on two seeds. This page tests the same claims by rows fixed before
# their run (`claims.toml`, ids `ceflow_confirm.*`, listed on {doc}`../protocol`), on the same
# code at a config they name, with the seeds a power analysis of those two seeds asked for:
#
# * **trained networks**: every network of the $R$ grid with $R \ge 2$ must reach 99 % training
#   accuracy (`ceflow_confirm.fits`); the comparisons count only when it reads *yes*;
# * **a margin the run measures**: Fig. 2 (the largest $\tau$ that re-linearises, $R = 4$) and
#   "8–12 feature updates" ($R = 8$) are each on par with the smallest $\tau$ ($R = 32$) within a
#   quarter of the run's own gap between the smallest $\tau$ and $K = \infty$
#   (`ceflow_confirm.gap`, which must read *yes*);
# * **the directional claims**: $K = \infty$ gains less from $N = 32 \to 128$ than $R = 8$
#   (Fig. 5), and at $R = 8$, $\tau = T/R = 62.5$ generalises better than $\tau = 2000$ (Fig. 8),
#   each beyond noise (its 95 % interval above 0);
# * **every held-out image** (the 932 test images and the 4,532 training-batch images no run
#   trains on, 5,464 in all), each comparison paired by seed and image (the two-way seeds × images
#   model of `iterlin.repro.stats.difference`);
# * **new seeds**: 100 to 109; the pilot's seeds 0 and 1 are not reused.
#
# The flow has no step size, so there is no stability row: each linearisation is solved within the
# ODE's tolerances, and a failed or step-limited solve stops the run with an error.
#
# <details>
# <summary>What each scale runs (smoke, cpu, gpu, paper), and the pilot</summary>
#
# From `SCALES` in `iterlin/experiments/ceflow_confirm.py`.
#
# * `smoke` (default, CI): 8 and 16 images, $R \in \{1, 2, 4, 8\}$, two seeds, 200 held-out
#   images: a check that the pipeline works; its rows read n/a (they are registered for the `cpu`
#   run).
# * `cpu`: the registered run (the rows' `config`): {doc}`ceflow`'s `cpu` scale ($N = 32, 64,
#   128$; the $R$ grid at $N = 64$, $T = 500$) with the grid $R \in \{1, 4, 8, 32\}$, $R = 8$ for
#   the scaling and Fig. 8 runs ($\tau = 62.5$ against $\tau = 2000$, a total time of 16,000), and
#   10 seeds. At the pilot's cost, about 10 minutes of this 2-core CPU per seed, so about two hours.
# * `gpu`: the same run (the rows are decided on this config, whichever machine runs it).
# * `paper`: {doc}`ceflow`'s `paper` scale with 10 seeds from 100; its rows read n/a.
#
# **The pilot (exploratory; it never counts)**: {doc}`ceflow`'s committed `cpu` run (seeds 0 and 1,
# the grid $R \in \{1, 2, 4, 8, 16, 32\}$). It set the design: at $T = 500$ the $R = 1$ and $R = 2$
# networks do not fit their 64 images (12–44 % training accuracy) while every $R \ge 4$ does, so
# the grid starts its re-linearising runs at $R = 4$. Its two-way variance components, through
# `iterlin.repro.stats.seeds_needed` (80 % power; for the on-par rows, the true difference at half
# the margin), asked: 10 seeds for the gap (3.4 points in the pilot) at 2 points, 9 for $R = 4$
# and 7 for $R = 8$ on par within a quarter of the pilot's gap (±0.86 points), 7 for Fig. 5's
# gains and 4 for Fig. 8 at 2 points. The rows take 10. Two seeds estimate the seed component with
# one degree of freedom (it came out 0 for two of the comparisons), so these counts may be
# optimistic about the seed term; the interval of each row uses the run's own 10 seeds. The
# analysis and its output: `results/pilots/ceflow-power/`.
#
# </details>

# %% [markdown]
# ## The registered rows' verdicts

# %% tags=["hide-input"]
# NBVAL_IGNORE_OUTPUT
reference.show_claims(ref)

# %% [markdown]
# ## This build's run
#
# The run this build executed, at the scale of the parameters cell (`smoke` in CI: a check of the
# pipeline). The registered rows are decided only on their own run, so at any other config they
# read n/a, naming the knobs that differ.

# %%
# NBVAL_IGNORE_OUTPUT
results = run(config)  # computed once, then read from the cache (.cache/results)

# %%
ceflow_confirm.plot(results)
claims(results)
