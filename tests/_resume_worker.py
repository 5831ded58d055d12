"""Subprocess worker for ``tests/test_resume.py``: one small training run, killable on cue.

Usage::

    python tests/_resume_worker.py MODE OUT [CHECKPOINT]

MODE is ``single`` (``iterlin.train``, K = 3) or ``sweep`` (``iterlin.train_sweep``, K = [1, 3, inf],
three initialisations stacked). The run is a two-layer tanh MLP (plain JAX, nested-dict params) on
a fixed synthetic 3-class problem, trained with Adam on mini-batches (several epochs, so the batch
order, the re-linearisation point θ_s and the optimizer moments all have to survive a resume),
evaluated every 4 of 24 steps on a train and a test split, with a callback whose values go into
the history. With CHECKPOINT the run saves/resumes there (``checkpoint=CHECKPOINT``).

At the end it writes ``OUT/params.npz`` (the leaves of θ_T, ``leaf_<i>``) and ``OUT/history.npz``.
Every callback call appends ``"<pid> <step>"`` to ``OUT/callbacks.log`` (so the test can see where
a rerun picked up).

A deliberate pause lets the parent kill the process at a known point. ``ITERLIN_TEST_PAUSE``:

* ``callback:<step>``: inside the callback at evaluation step <step>, i.e. after the checkpoint of
  the previous evaluation point was written and before the one for <step> is;
* ``write:<n>``: during this process's n-th checkpoint write, inside the temporary-file phase of
  :func:`iterlin.checkpoint.atomic_write_bytes` after half of the bytes were written (so the
  temporary file is truncated and the old checkpoint is still in place).

On reaching the pause the worker creates ``OUT/paused`` (holding the reason) and sleeps; the
parent waits for that file and sends SIGKILL.
"""

from __future__ import annotations

import io
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import iterlin.checkpoint as checkpoint_module
from iterlin.training import train, train_sweep
from iterlin.tree import tree_stack

STEPS = 24
EVAL_EVERY = 4
BATCH_SIZE = 16
K_SINGLE = 3
K_SWEEP = [1, 3, math.inf]


def pause(out: str, reason: str) -> None:
    """Tell the parent we are at the agreed point (atomically), then wait to be killed."""
    tmp = os.path.join(out, "paused.part")
    with open(tmp, "w") as f:
        f.write(reason)
    os.replace(tmp, os.path.join(out, "paused"))
    while True:
        time.sleep(60)


def install_write_pause(out: str, n_pause: int) -> None:
    """Pause inside the temp-file phase of the n-th checkpoint write of this process."""
    original = checkpoint_module.atomic_write_bytes
    calls = [0]

    def atomic_write_bytes(path, write):
        calls[0] += 1
        if calls[0] != n_pause:
            return original(path, write)

        def half_then_pause(f):
            buf = io.BytesIO()
            write(buf)
            data = buf.getvalue()
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
            pause(out, f"write:{n_pause}")

        return original(path, half_then_pause)

    checkpoint_module.atomic_write_bytes = atomic_write_bytes  # save_checkpoint looks it up here


def init_mlp(key, d_in=6, width=12, d_out=3):
    k1, k2 = jax.random.split(key)
    return {
        "dense0": {"kernel": jax.random.normal(k1, (d_in, width)) / math.sqrt(d_in), "bias": jnp.zeros(width)},
        "out": {"kernel": jax.random.normal(k2, (width, d_out)) / math.sqrt(width), "bias": jnp.zeros(d_out)},
    }


def apply_fn(params, x):
    h = jnp.tanh(x @ params["dense0"]["kernel"] + params["dense0"]["bias"])
    return h @ params["out"]["kernel"] + params["out"]["bias"]


def make_data():
    kx, kt, kw = jax.random.split(jax.random.PRNGKey(42), 3)
    x = jax.random.normal(kx, (48, 6))
    x_test = jax.random.normal(kt, (16, 6))
    w = jax.random.normal(kw, (6, 3))
    return (x, jnp.argmax(x @ w, -1)), (x_test, jnp.argmax(x_test @ w, -1))


def main(argv):
    mode, out = argv[1], argv[2]
    ckpt = argv[3] if len(argv) > 3 else None
    os.makedirs(out, exist_ok=True)
    where = os.environ.get("ITERLIN_TEST_PAUSE", "")
    kind, _, arg = where.partition(":")
    if kind == "write":
        install_write_pause(out, int(arg))

    def callback(step, state):
        with open(os.path.join(out, "callbacks.log"), "a") as f:
            f.write(f"{os.getpid()} {step}\n")
        if kind == "callback" and step == int(arg):
            pause(out, where)
        # ‖θ_t‖ per run: a host-side value that must also survive the resume (it lives in the history).
        leaves = [np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(state.params)]
        if mode == "sweep":
            return {"param_norm": np.sqrt(sum((leaf.reshape(leaf.shape[0], -1) ** 2).sum(1) for leaf in leaves))}
        return {"param_norm": np.sqrt(sum((leaf**2).sum() for leaf in leaves))}

    train_data, test_data = make_data()
    common = dict(
        steps=STEPS, optimizer=optax.adam(3e-2), loss="ce", batch_size=BATCH_SIZE, key=jax.random.PRNGKey(7),
        eval_data=test_data, eval_every=EVAL_EVERY, callback=callback, checkpoint=ckpt,
    )
    if mode == "single":
        params, history = train(apply_fn, init_mlp(jax.random.PRNGKey(0)), train_data, K=K_SINGLE, **common)
    elif mode == "sweep":
        params0 = tree_stack([init_mlp(jax.random.PRNGKey(s)) for s in range(len(K_SWEEP))])
        params, history = train_sweep(apply_fn, params0, train_data, K=K_SWEEP, **common)
    else:
        raise SystemExit(f"unknown MODE {mode!r}: use 'single' or 'sweep'")
    np.savez(os.path.join(out, "params.npz"),
             **{f"leaf_{i}": np.asarray(v) for i, v in enumerate(jax.tree.leaves(params))})
    np.savez(os.path.join(out, "history.npz"), **{k: np.asarray(v) for k, v in history.items()})


if __name__ == "__main__":
    main(sys.argv)
