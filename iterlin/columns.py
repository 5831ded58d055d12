"""Records that are also read-only mappings of their flat columns (the tables result files store).

:class:`iterlin.training.History` and the experiments' sweeps are typed records (frozen
dataclasses); :class:`FlatColumns` gives each, from its ``as_dict()``, the read-only mapping view
``record[name]`` of the same arrays, computed once. :class:`Record` is the plain case: a frozen
dataclass whose fields are its columns (the experiments' tables of runs and of measurements).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

import numpy as np

__all__ = ["FlatColumns", "Record"]


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


class Record(FlatColumns):
    """Mixin for a frozen dataclass whose fields are its columns (arrays; None where a run did not
    compute one): ``as_dict`` gives the fields that are not None, :meth:`from_columns` reads them
    back (a results file stores a record as these columns)."""

    def as_dict(self) -> dict[str, np.ndarray]:
        return {f.name: v for f in dataclasses.fields(self) if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_columns(cls, columns: Mapping[str, np.ndarray]):
        """The record whose columns are ``columns``; ValueError naming the names that are not its
        fields, or the fields without a default that are missing."""
        fields = dataclasses.fields(cls)
        unknown = sorted(set(columns) - {f.name for f in fields})
        missing = [f.name for f in fields if f.name not in columns
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if unknown or missing:
            raise ValueError(f"columns={sorted(columns)} are not allowed: "
                             + "; ".join(([f"unknown {unknown}"] if unknown else [])
                                         + ([f"missing {missing}"] if missing else []))
                             + f" (the fields of {cls.__name__} are {[f.name for f in fields]})")
        return cls(**columns)
