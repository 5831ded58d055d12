"""Where a run's arrays live: a one-axis mesh over the local devices (runs or batch).

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = ["Placement", "resolve_placement", "pad_runs", "unpad_runs", "STEP_RUNS_MIN_PARAMS"]

#: ``vectorise=None`` steps a sweep's runs one after the other on one CPU device when each run has at
#: least this many parameters (the CNN of the CIFAR figures has 227,484, ResNet-18 11 million; the
#: MLPs of Figs. 1 and 9 about 10,000). Such a run's step is bound by its products, which XLA:CPU
#: computes more slowly batched over the runs (``vmap``) than one run at a time; a smaller model's
#: step is bound by dispatch, which one vmapped program pays once for all the runs.
#: ``benchmarks/bench_train.py`` (ratios 3, 3b, 3c) measures both routes.
STEP_RUNS_MIN_PARAMS = 100_000


class Placement(NamedTuple):
    """Where :func:`fit` puts a run's arrays: a one-axis mesh over the chosen devices.

    ``axis`` is ``"runs"`` (a vmapped sweep: the state's and the per-run keys' leading run axis is
    sharded, ``P("runs")``; the data and a shared key are replicated) or ``"batch"`` (one run, data
    parallel: the state, the data and the key are replicated, ``P()``, and each step's batch is
    constrained to ``P("batch")``, its leading example axis split over the devices).
    """

    mesh: Mesh
    axis: str

    @property
    def size(self) -> int:
        return int(self.mesh.devices.size)

    def sharding(self, *spec) -> NamedSharding:
        return NamedSharding(self.mesh, P(*spec))


def _check_devices(devices) -> list:
    """``devices``: None (every local device) or a non-empty sequence of distinct local devices."""
    if devices is None:
        return list(jax.local_devices())
    ok = isinstance(devices, (list, tuple)) and len(devices) > 0 and all(isinstance(d, jax.Device) for d in devices)
    if not ok:
        raise ValueError(f"devices={devices!r} is not allowed: devices must be None (every local device) or a "
                         "non-empty list of jax devices, e.g. jax.local_devices()[:2]")
    local = set(jax.local_devices())
    if len(set(devices)) != len(devices) or any(d not in local for d in devices):
        raise ValueError(f"devices={devices!r} is not allowed: the devices must be distinct and local "
                         f"(among jax.local_devices() = {jax.local_devices()})")
    return list(devices)


def resolve_placement(devices, shard_runs, data_parallel, *, sweep: bool, vectorise, batch_size, n_train: int,
                      params_per_run: int | None = None):
    """Validate ``fit``'s device arguments; return ``(placement or None, vectorise)``.

    ``shard_runs``: None shards a sweep's runs when they are vmapped and there is more than one
    device; True asks for it (and makes ``vectorise=None`` vmap); False never shards.
    ``data_parallel``: one run's batches split over the devices. ``vectorise`` comes back resolved:
    None steps a sweep's runs one after the other where they would run unsharded (one device, or
    ``shard_runs=False``) on a CPU default device and each run has at least
    :data:`STEP_RUNS_MIN_PARAMS` parameters (``params_per_run``; None: unknown), and vmaps them
    everywhere else.
    The mesh is built with ``jax.sharding.Mesh`` (automatic axes: jit propagates the inputs'
    shardings), not ``jax.make_mesh``, whose default axis types differ between JAX versions.
    """
    devices = _check_devices(devices)
    for name, value, allowed in (("shard_runs", shard_runs, (None, True, False)),
                                 ("data_parallel", data_parallel, (True, False)),
                                 ("vectorise", vectorise, (None, True, False))):
        if not any(value is a for a in allowed):
            raise ValueError(f"{name}={value!r} is not allowed: {name} must be one of {allowed}")
    if shard_runs and not sweep:
        raise ValueError("shard_runs=True is not allowed for a single run: it shards a sweep's run axis "
                         "(train_sweep, or fit with sweep=True); for one run use data_parallel=True")
    if shard_runs and vectorise is False:
        raise ValueError("shard_runs=True is not allowed with vectorise=False: runs are sharded where they are "
                         "vmapped together; pass vectorise=True or None")
    if data_parallel and sweep:
        raise ValueError("data_parallel=True is not allowed for a sweep: a sweep spreads its runs over the "
                         "devices (shard_runs); data_parallel splits the batch of a single run (train, or fit "
                         "with sweep=False)")
    if vectorise is None:
        unsharded = shard_runs is False or (shard_runs is None and len(devices) == 1)  # on the default device
        vectorise = not (sweep and unsharded and jax.default_backend() == "cpu" and params_per_run is not None
                         and params_per_run >= STEP_RUNS_MIN_PARAMS)
    if data_parallel:
        n = len(devices)
        examples = n_train if batch_size is None else int(batch_size)
        if examples % n:
            raise ValueError(
                f"batch_size={batch_size!r} is not allowed with data_parallel=True over {n} devices: the batch "
                f"({examples} examples{', the full training set' if batch_size is None else ''}) must split "
                f"evenly over the devices, i.e. be a multiple of {n}"
            )
        return Placement(Mesh(np.asarray(devices, dtype=object), ("batch",)), "batch"), vectorise
    if sweep and vectorise and (shard_runs or (shard_runs is None and len(devices) > 1)):
        return Placement(Mesh(np.asarray(devices, dtype=object), ("runs",)), "runs"), vectorise
    return None, vectorise


def pad_runs(tree, runs: int, padded: int):
    """Lengthen the leading run axis of every leaf from ``runs`` to ``padded`` by repeating the last run."""
    if padded == runs:
        return tree
    idx = np.minimum(np.arange(padded), runs - 1)
    return jax.tree.map(lambda a: a[idx], tree)


def unpad_runs(tree, runs: int, padded: int):
    """The first ``runs`` runs of a padded tree (:func:`pad_runs`' inverse)."""
    return tree if padded == runs else jax.tree.map(lambda a: a[:runs], tree)
