"""Records that are also read-only mappings of their flat columns (the tables result files store).

:class:`iterlin.training.History` and the experiments' sweeps are typed records (frozen
dataclasses); :class:`FlatColumns` gives each, from its ``as_dict()``, the read-only mapping view
``record[name]`` of the same arrays, computed once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

__all__ = ["FlatColumns"]


class FlatColumns(Mapping):
    """Mixin for a frozen dataclass with ``as_dict() -> {name: array}``: the mapping of those columns.

    The columns are built on first use and cached on the instance (the record is immutable, so they
    cannot go stale); the mapping is read-only (``dict(record)`` is a table to extend).
    """

    def as_dict(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def __getitem__(self, name: str) -> np.ndarray:
        return self._flat[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flat)

    def __len__(self) -> int:
        return len(self._flat)

    @property
    def _flat(self) -> dict[str, np.ndarray]:
        flat = self.__dict__.get("_flat_cache")
        if flat is None:
            flat = self.as_dict()
            object.__setattr__(self, "_flat_cache", flat)
        return flat
