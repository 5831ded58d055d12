"""What identifies a run in its checkpoint, and the check of a resumed checkpoint's progress.

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, NamedTuple

import jax
import numpy as np

from ..checkpoint import CheckpointError

__all__ = ["data_fingerprint", "RunIdentity", "check_progress"]


def data_fingerprint(*trees) -> str:
    """SHA-256 of the shapes, dtypes and bytes of every leaf: identifies the data and θ_0 of a run."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(trees):
        a = np.asarray(leaf)
        h.update(f"{a.shape}{a.dtype.str};".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _json_default(obj):
    if isinstance(obj, (np.ndarray, np.generic, jax.Array)):
        return np.asarray(obj).tolist()
    raise TypeError(f"{type(obj).__name__} {obj!r} is not JSON-serialisable")


def canonical(meta: dict) -> dict:
    """``meta`` as it reads back from the checkpoint's JSON (tuples → lists, NumPy → Python)."""
    try:
        return json.loads(json.dumps(meta, default=_json_default))
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"config={meta['config']!r} is not allowed: with a checkpoint, config must be JSON-serialisable "
            f"(numbers, strings, bools, None, lists, tuples and dicts of them; NumPy scalars are converted): {e}"
        ) from None


def same_json(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # nan equals nan here


class RunIdentity(NamedTuple):
    """What identifies a run in its checkpoint (stored as the JSON object ``"run"``): a checkpoint
    whose identity differs from the resuming run's in any field is refused (:meth:`mismatches`).

    Every field holds its JSON form (:meth:`of`): ``config`` (the caller's), ``steps``,
    ``batch_size``, the evaluation ``points``, ``augment``, the ``loss``'s name, ``n_train``, the
    PRNG ``key`` data, ``eval_train`` (the training images evaluated), the periods ``K``, and
    :func:`data_fingerprint` of the data (``data``) and of the initial state (``init``).
    """

    config: Any
    steps: int
    batch_size: int | None
    points: list
    augment: bool
    loss: str
    n_train: int
    key: list
    eval_train: int
    K: Any
    data: str
    init: str

    @classmethod
    def of(cls, **fields) -> "RunIdentity":
        """The identity of ``fields`` as they read back from JSON (:func:`canonical`)."""
        return cls(**canonical(fields))

    def mismatches(self, saved: Mapping) -> list[str]:
        """``"field: saved …, now …"`` for every field where the ``saved`` identity differs (an empty
        list: the same run)."""
        now = self._asdict()
        return [f"{k}: saved {json.dumps(saved.get(k))[:80]}, now {json.dumps(now.get(k))[:80]}"
                for k in sorted(set(saved) | set(now)) if not same_json(saved.get(k), now.get(k))]


def check_progress(checkpoint, history, done, state, points) -> None:
    """A resumed checkpoint's progress must agree with its contents, else :class:`CheckpointError`.

    ``done`` (evaluation points recorded) must be in 1 … len(points); every history entry must
    have exactly ``done`` rows; the recorded steps must be ``points[:done]``; and the state's step
    counter (of every run) must be ``points[done - 1]``, the last point recorded. So an edited or
    mixed-up counter is refused instead of returning a truncated history as final.
    """

    def refuse(detail: str):
        raise CheckpointError(
            f"checkpoint {checkpoint} is inconsistent: {detail}. Delete it to start this run afresh."
        )

    n = len(points)
    if isinstance(done, bool) or not isinstance(done, int) or not 1 <= done <= n:
        refuse(f"its progress counter done={done!r} must be an integer in 1..{n} (the evaluation points)")
    if not isinstance(history, dict) or not history:
        refuse(f"its history is {type(history).__name__}, not a dict of per-point lists")
    rows = {k: len(v) if isinstance(v, list) else None for k, v in history.items()}
    wrong = {k: r for k, r in rows.items() if r != done}
    if wrong:
        shown = ", ".join(f"{k}: {'not a list' if r is None else r}" for k, r in sorted(wrong.items())[:4])
        refuse(f"done={done} evaluation points, but the history has other row counts ({shown})")
    if history.get("step") != list(points[:done]):
        refuse(f"done={done}: the recorded steps {str(history.get('step'))[:80]} are not the evaluation points "
               f"{str(list(points[:done]))[:80]}")
    steps = sorted({int(v) for v in np.ravel(np.asarray(state.step))})
    if steps != [points[done - 1]]:
        refuse(f"done={done} means the state is at step {points[done - 1]}, but its step counter is "
               f"{steps[0] if len(steps) == 1 else steps}")
