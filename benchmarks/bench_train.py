"""Training-speed benchmark: ratios measured in one run, on one device, with one batch.

1. Step time of one linearised step (iterlin's ``make_step``: forward + jvp + transposed jvp at θ_s)
   over one plain SGD step (``value_and_grad`` of the network), CNN of the paper, batch 256.
   Target ≤ 1.5 (the FLOP ratio is about 1.67).
2. Training throughput (images/s) of ``iterlin.train`` (dataset on device, batches drawn and
   steps run inside one compiled loop) against the way most reproductions are written: a
   per-step-jitted Flax/Optax step fed host-side NumPy batches. Both exclude compilation: the time
   of ``steps`` is the difference between runs of 2·steps and steps.

Usage: ``python benchmarks/bench_train.py [--batch 256] [--steps 40] [--n-train 4096]``
(real CIFAR-10 images from ``$ITERLIN_CIFAR10`` when available, random images otherwise: speed does
not depend on pixel values).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import iterlin
from iterlin.models import make_model
from iterlin.training import init_state, make_step


def _median_time(fn, *args, reps):
    jax.block_until_ready(fn(*args))  # compile and warm up
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def step_ratio(model, x, y, reps):
    opt = optax.sgd(1e-3)
    lin_step = jax.jit(make_step(model.apply_fn, opt, "ce"))
    state = init_state(model.params, opt, math.inf)

    def sgd_step(params, opt_state, x, y):
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply_fn(p, x), y).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    sgd = jax.jit(sgd_step)
    t_lin = _median_time(lin_step, state, (x, y), reps=reps)
    t_sgd = _median_time(sgd, model.params, opt.init(model.params), x, y, reps=reps)
    return t_lin, t_sgd


def host_loop(model, x_np, y_np, batch, steps, seed=0):
    """The usual reproduction: jitted step, NumPy shuffling and slicing on the host every step."""
    opt = optax.sgd(1e-3)

    @jax.jit
    def step(params, opt_state, x, y):
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply_fn(p, x), y).mean()

        grads = jax.grad(loss)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    params, opt_state = model.params, opt.init(model.params)
    rng = np.random.default_rng(seed)
    per_epoch = len(x_np) // batch
    perm = rng.permutation(len(x_np))
    for t in range(steps):
        if t % per_epoch == 0:
            perm = rng.permutation(len(x_np))
        idx = perm[(t % per_epoch) * batch : (t % per_epoch + 1) * batch]
        params, opt_state = step(params, opt_state, x_np[idx], y_np[idx])
    jax.block_until_ready(params)


def iterlin_loop(model, x, y, batch, steps):
    params, _ = iterlin.train(model.apply_fn, model.params, (x, y), K=math.inf, steps=steps,
                              optimizer=optax.sgd(1e-3), batch_size=batch, eval_steps=[], eval_batch_size=batch)
    jax.block_until_ready(params)


def _steady_time(run, steps):
    """Seconds per ``steps`` steps without compilation: T(2·steps) − T(steps)."""
    def timed(n):
        t = time.perf_counter()
        run(n)
        return time.perf_counter() - t

    timed(steps)  # warm caches (first compilations, allocator)
    return timed(2 * steps) - timed(steps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--n-train", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()

    try:
        data = iterlin.data.load_cifar10(n_train=args.n_train, n_test=1)
        x_np, y_np, source = data.x_train, data.y_train, "CIFAR-10 ($ITERLIN_CIFAR10)"
    except Exception as e:  # noqa: BLE001 - speed does not depend on the pixels
        rng = np.random.default_rng(0)
        x_np = rng.standard_normal((args.n_train, 32, 32, 3), dtype=np.float32)
        y_np = rng.integers(0, 10, args.n_train).astype(np.int32)
        source = f"random images ({type(e).__name__})"
    model = make_model("cnn", jax.random.PRNGKey(0))
    xb, yb = jnp.asarray(x_np[: args.batch]), jnp.asarray(y_np[: args.batch])

    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}")
    print(f"model: CNN of the paper, batch {args.batch}, data: {source}, n_train {len(x_np)}")
    t_lin, t_sgd = step_ratio(model, xb, yb, args.reps)
    print(f"step time: linearised {t_lin * 1e3:.2f} ms, SGD {t_sgd * 1e3:.2f} ms, "
          f"ratio {t_lin / t_sgd:.2f} (target <= 1.5; FLOP ratio ~1.67)")

    x_dev, y_dev = jnp.asarray(x_np), jnp.asarray(y_np)
    t_iter = _steady_time(lambda n: iterlin_loop(model, x_dev, y_dev, args.batch, n), args.steps)
    t_host = _steady_time(lambda n: host_loop(model, x_np, y_np, args.batch, n), args.steps)
    ips_iter = args.steps * args.batch / t_iter
    ips_host = args.steps * args.batch / t_host
    print(f"throughput: iterlin.train (linearised, on-device loop) {ips_iter:.0f} img/s, "
          f"per-step-jitted Flax/Optax SGD with host batches {ips_host:.0f} img/s, ratio {ips_iter / ips_host:.2f}")


if __name__ == "__main__":
    main()
