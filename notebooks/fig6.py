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
# # Figure 6: linear probes on the first two layers' features, K = 1 against a large K
#
# **What the figure shows.** How useful the features of the paper's CNN are for the task while it
# is trained by iterative linearisation (Algorithm 1; $K = 1$ is ordinary SGD, a large $K$ updates
# the features only every $K$ steps). At each evaluation point a *linear probe* (Alain and Bengio,
# 2017), a linear classifier, is fitted on the activations of the first convolutional layer
# (after ReLU and pooling, 14×14×50 = 9800 features) and, separately, of the second (5×5×50 = 1250
# features) of the network $f_{\theta_t}$, and its test accuracy is plotted: left layer 1, right
# layer 2.
#
# **What the paper claims** (Sec. 4.1, Fig. 6). "As training progresses, the linear separability
# of the feature representations learnt at these layers improves, with the large $K$ features
# improving slower and levelling off at a lower point", for $K = 5\cdot10^6$ against $K = 1$:
# "increasing $K$ reduces the amount of feature learning, not simply the frequency". The paper
# gives no numbers for this figure.
#
# **The probe** (the paper does not describe its own; ours: `iterlin.probes`). Ridge regression
# onto one-hot labels, closed form, on features standardised with the training mean and standard
# deviation; the ridge penalty is chosen from $10^{-4}, \dots, 10^2$ by accuracy on a held-out
# fifth of the probe's training images, then the probe is refitted on all of them. Deterministic:
# no inner optimisation to tune. Fitted on the first `n_probe` training images (default: all of
# them), scored on the test images.
#
# **What each scale runs** (`SCALES` in `iterlin/experiments/fig6.py`).
#
# * `smoke` (default; a 2-core CPU, about a minute: see `notebooks/README.md`): 256 real CIFAR-10
#   training images and 200 test images, 24 SGD steps with batches of 32 at learning rate 0.05
#   (the paper's rates would show nothing in 24 steps), no augmentation, and $K = 8$ instead of
#   $5\cdot10^6$ (3 feature updates); probes at 7 points. 24 steps barely move the features, and
#   200 test images measure a probe's accuracy to about ±6 points: at this scale the probes show the
#   pipeline and the claims are decided only when $K = 1$'s probes gain more than that noise.
# * `gpu` (one H100, about ten minutes by an estimate, not measured: no GPU was available when this
#   was written): every installed image, 10 000 steps of 256 at 0.01 with augmentation,
#   $K = 1000$ (10 feature updates), probes fitted on 5000 images at 21 points.
# * `paper`: $K = 5\cdot10^6$ (the paper's); learning rate 1e-4, $6\cdot10^7$ steps of 256 with
#   augmentation (12 feature updates) as our Fig. 3 `paper` settings: we assume Fig. 6 probes the
#   runs of Fig. 3, which the paper does not say. Probes on 10 000 training images.
#
# Shared details: CNN of Appendix C (2×2 max-pooling after each convolution), Flax default
# initialisation, softmax cross-entropy on the linearised logits, plain SGD; both runs start from
# the same initialisation and see the same batches. The probes read the *network*'s hidden
# activations at $\theta_t$ (not the linear model's), as the paper: "this measure of features looks
# at hidden layer activations rather than the Jacobian of the network".

# %% tags=["parameters"]
scale = "smoke"  # "smoke" (CPU, ~1 min), "gpu" (one H100, ~10 min), "paper" (the paper's settings)
K = None  # the large period compared with plain SGD (K 1 always runs too); e.g. 5e6, or inf (never)
lr = None  # SGD learning rate
steps = None  # number of SGD steps T
seed = None  # initialisation, batch order and the probes' held-out split
n_train = None  # training images ("all": every installed image)
n_test = None  # test images (the probes are scored on them)
batch_size = None  # mini-batch size (at most n_train)
n_probe = None  # training images the probes are fitted on (the first ones; "all": every one)

# %%
import matplotlib.pyplot as plt

from iterlin.config import describe
from iterlin.experiments import claims, resolve_notebook, run
from iterlin.experiments.fig6 import probe_table
from iterlin.plotting import legend, panels, plot_runs

# Every parameter is checked here, before anything is computed (None: the scale's default);
# a name the notebook does not take (papermill -p step 50) fails here, naming it.
config = resolve_notebook("fig6", globals())
print(describe(config))

# %%
# NBVAL_IGNORE_OUTPUT
results = run(config)  # computed once, then read from the cache (.cache/results)

# %% [markdown]
# Test accuracy of the linear probes over training; a cross marks a run that diverged (its probes
# then read its last finite state). Chance is 10 %.

# %%
h = results["runs"]
fig, axes = panels(2, sharey=True,
                   suptitle=f"CNN on CIFAR-10, {int(results['n_probe'])} probe images, {int(results['n_test'])} test "
                            f"images ({config['scale']} scale)")
for ax, layer, title in zip(axes, ("layer1", "layer2"), ("first-layer features", "second-layer features")):
    plot_runs(ax, h["step"], h[f"probe_{layer}_test_acc"], h["K"], diverged=h["diverged"],
              diverged_step=h["diverged_step"], diverged_label="K = {K} diverged")
    ax.set(xlabel="step", title=f"linear probe on {title}")
    legend(ax)
axes[0].set_ylabel("probe test accuracy (%)")
plt.show()

# %% [markdown]
# The probes' test accuracy at the start and the end of training, and averaged over the evaluation
# points after step 0 (a lower average for the same end point means slower improvement).

# %%
print(probe_table(results))

# %% [markdown]
# ## Claims
#
# The paper's claim, the paper's number, what this run measured and whether it holds at this
# scale, by the rule in the last column.

# %%
print(claims(results))
