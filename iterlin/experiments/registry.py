"""The registry of experiments and the one call a notebook makes: resolve, run, claims.

A notebook resolves its parameters, makes ONE call, plots, and prints the claims::

    from iterlin.experiments import claims, resolve, run

    config = resolve("fig3", scale, K=K, lr=lr, steps=steps)   # every parameter checked here
    results = run(config)                                       # computed once, then cached
    ...                                                         # plots (iterlin.repro.plotting)
    print(claims(results))                                      # the final claims cell

In a notebook run by papermill, ``config = resolve_notebook("fig3", globals())`` takes the
parameters from the notebook's globals and refuses any name the notebook does not take (papermill
only logs "Passed unknown parameter": ``-p step 50`` would otherwise run the defaults).

:func:`run` = :func:`resolve` (validate every parameter, before anything else) → the experiment's
``load`` (``n_train`` larger than what is installed fails here, with a message naming it) →
:func:`iterlin.repro.cache.cached`, keyed by the config, the data's fingerprint and the fingerprint of
exactly the code that the experiment's ``load`` and ``compute`` reach
(:func:`iterlin.repro.fingerprint.code_fingerprint`), so a change to a plot, a claim or another figure
recomputes nothing, and a change to the library code a figure uses recomputes that figure.

Every experiment lives in its own module, ``iterlin/experiments/<name>.py``, which defines
``SCALES`` (its defaults at every scale), ``load``, ``compute``, its typed ``Results``, ``claims``
and ``EXPERIMENT``
(:class:`~iterlin.experiments.Experiment`). To add one: write the module and add it to
:data:`EXPERIMENTS` below.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
from typing import Any, Mapping

import numpy as np

from ..repro import config as _config
from ..repro.config import ExperimentConfig, format_value
from ..repro.cache import cached
from ..repro.claims import ClaimsTable, publish_claims
from ..repro.compilation import enable_compilation_cache
from ..data import Dataset
from ..repro.fingerprint import code_fingerprint
from ..validate import check_choice
from . import adaptive, ceflow, ceflow_confirm, fig1, fig2, fig3, fig3_confirm, fig4, fig5, fig6, fig7, fig8, fig9, gn, ksweep, limit, lr, ntk
from ._common import Experiment, stored

__all__ = [
    "EXPERIMENTS", "names", "get", "resolve", "resolve_notebook", "notebook_parameters", "revalidate", "run",
    "claims", "data_fingerprint", "scales_table",
]

#: Every experiment by name, one module each.
EXPERIMENTS: dict[str, Experiment] = {
    m.EXPERIMENT.name: m.EXPERIMENT
    for m in (fig1, fig2, fig3, fig4, fig5, fig6, fig7, fig8, fig9, ntk, ksweep, lr, adaptive, gn, limit, ceflow, fig3_confirm, ceflow_confirm)
}


def names() -> tuple[str, ...]:
    """The experiments' names, in the registry's order."""
    return tuple(EXPERIMENTS)


def get(name: str) -> Experiment:
    """The :class:`~iterlin.experiments.Experiment` called ``name`` (a ValueError listing the names otherwise)."""
    check_choice(name, "experiment", names())
    return EXPERIMENTS[name]


def resolve(name: str, scale: str = "smoke", /, **overrides: Any) -> ExperimentConfig:
    """The typed config of experiment ``name`` at ``scale`` with ``overrides`` applied, every value
    checked (the experiment's ``Config``).

    ``None`` for an override keeps the scale's default. See :func:`iterlin.repro.config.resolve`.
    """
    return get(name).get_config(scale, **overrides)


#: Names IPython (and Jupyter's kernel) puts in a notebook's globals that are not parameters.
IPYTHON_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit"})

#: The first line of the cell papermill injects after the ``parameters`` cell (``-p NAME VALUE``).
PAPERMILL_HEADER = "# Parameters"


def notebook_parameters(name: str) -> tuple[str, ...]:
    """The parameters notebook ``name`` takes, sorted: ``scale`` and every key of the experiment's ``SCALES``."""
    exp = get(name)
    keys = set()
    for defaults in exp.scales.values():
        keys |= set(defaults)
    return tuple(sorted(keys | {"scale"}))


def _is_parameter_like(key: Any, value: Any) -> bool:
    """Whether a global of a notebook could be a parameter.

    Not: names starting with ``_`` (IPython's ``_``, ``_i1``, ``__builtins__``, ...), IPython's
    :data:`IPYTHON_NAMES`, and modules, classes, functions and other callables (imports).
    """
    if not isinstance(key, str) or key.startswith("_") or key in IPYTHON_NAMES:
        return False
    return not (inspect.ismodule(value) or inspect.isclass(value) or callable(value))


def _injected_names(history: Any) -> list[str] | None:
    """The names papermill's injected cell assigned: the latest cell of IPython's ``In`` history that
    starts with :data:`PAPERMILL_HEADER`; ``[]`` when the kernel ran no such cell (no ``-p``);
    ``None`` when ``history`` is not a kernel's history (a plain namespace, a script)."""
    if not isinstance(history, (list, tuple)):
        return None
    for source in reversed(history):
        if isinstance(source, str) and source.lstrip().startswith(PAPERMILL_HEADER):
            try:
                tree = ast.parse(source)
            except SyntaxError:
                return None
            return [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                    if isinstance(t, ast.Name)]
    return []


def resolve_notebook(name: str, namespace: Mapping[str, Any]) -> ExperimentConfig:
    """The config cell of notebook ``name``: its parameters taken from ``namespace``, all checked.

    A notebook calls ``config = resolve_notebook("fig3", globals())`` after its parameters cell
    (and the cell papermill injects after it for ``-p NAME VALUE``). Which names were given:

    * in a Jupyter kernel (``namespace`` holds IPython's ``In`` history): the names papermill's
      injected cell assigned (:data:`~iterlin.experiments.registry.PAPERMILL_HEADER`). Papermill
      itself only logs "Passed unknown parameter" for a misspelt ``-p step 50``; here it fails. The
      notebook's own later globals (``config``, ``results``, ...) never count, so re-running a cell
      is fine;
    * otherwise (a plain dict, a script): every global that looks like a parameter
      (:func:`_is_parameter_like`: not ``_``-prefixed, not IPython's, not a module, class or
      function).

    Each given name must be one of :func:`notebook_parameters`: ``scale`` (required) and the
    experiment's knobs (``None`` keeps the scale's default). Returns :func:`resolve`'s config.

    Raises ValueError before anything is computed: naming every unknown name (e.g. ``step`` given
    for ``steps``, or ``foo``) and listing the parameters that exist; ``scale`` missing; or any
    value not allowed (see :func:`iterlin.repro.config.resolve`).
    """
    allowed = notebook_parameters(name)
    if not isinstance(namespace, Mapping):
        raise TypeError(f"namespace of type {type(namespace).__name__} is not allowed: pass the notebook's globals()")
    injected = _injected_names(namespace.get("In"))
    if injected is None:
        given = [k for k, v in namespace.items() if _is_parameter_like(k, v)]
    else:
        given = [k for k in injected if k in namespace]
    unknown = sorted(k for k in given if k not in allowed)
    if unknown:
        shown = ", ".join(f"{k}={namespace[k]!r}" for k in unknown)
        raise ValueError(
            f"{shown} {'is' if len(unknown) == 1 else 'are'} not allowed: notebook {name} has no parameter"
            f"{'' if len(unknown) == 1 else 's'} {', '.join(map(repr, unknown))}; its parameters are: "
            + ", ".join(allowed)
        )
    params = {k: namespace[k] for k in allowed if k in namespace}
    if "scale" not in params:
        raise ValueError(
            f"scale is missing: notebook {name}'s parameters cell must set scale (one of "
            + ", ".join(repr(s) for s in _config.SCALE_NAMES) + ")"
        )
    scale = params.pop("scale")
    return resolve(name, scale, **params)


def revalidate(config: ExperimentConfig | Mapping) -> ExperimentConfig:
    """The typed config of a resolved config, or of its dict (:meth:`~iterlin.repro.config.ExperimentConfig.to_dict`,
    e.g. read from a file), checked again (idempotent: ``revalidate(c) == c`` for a valid one)."""
    if isinstance(config, ExperimentConfig):
        config = config.to_dict()
    if not isinstance(config, Mapping) or "experiment" not in config or "scale" not in config:
        raise ValueError(
            f"config={config!r} is not allowed: a config must come from iterlin.experiments.resolve "
            "(a dict of one: with 'experiment' and 'scale')"
        )
    return get(config["experiment"]).config.from_dict(config)


def data_fingerprint(data: Any) -> str:
    """sha256 of a Dataset's fingerprint, or of a dict/list of Datasets' fingerprints, or of a
    NamedTuple's fields (by name; a field that is None is left out); an array's of its dtype, shape
    and bytes (e.g. a held-out pool's indices)."""
    if isinstance(data, Dataset):
        return data.fingerprint
    if isinstance(data, np.ndarray):
        return hashlib.sha256(f"{data.dtype.str}:{data.shape};".encode() + np.ascontiguousarray(data).tobytes()).hexdigest()
    h = hashlib.sha256()
    if hasattr(data, "_asdict"):
        items = [(k, d) for k, d in data._asdict().items() if d is not None]
    else:
        items = sorted(data.items()) if isinstance(data, Mapping) else enumerate(data)
    for k, d in items:
        h.update(f"{k}:{data_fingerprint(d)};".encode())
    return h.hexdigest()


def run(experiment: str | ExperimentConfig | Mapping, scale: str = "smoke", *, progress: bool | None = None,
        cache_dir=None, verbose: bool = True, **overrides: Any) -> Any:
    """Resolve, validate, load, compute (or load from the cache) and return an experiment's results.

    Args:
      experiment: an experiment's name (``"fig2"``, ``"fig3"``, ...), a config from :func:`resolve`
        (checked when it was built, so used as it is), or its dict (checked here); with a config or
        a dict, ``overrides`` must not be given.
      scale: ``"smoke"`` (default), ``"cpu"``, ``"gpu"`` or ``"paper"`` (see :mod:`iterlin.repro.config`).
      progress: None (default) or True: report the training's progress on stderr, as a bar on a
        terminal and a plain line a minute elsewhere, e.g. under papermill
        (:func:`iterlin.progress.progress_bar`; the book's pages drop stderr); False: nothing.
      cache_dir: default :func:`iterlin.repro.cache.default_cache_dir`.
      verbose: print the resolved config and whether the results were computed or loaded.
      **overrides: the experiment's knobs; ``None`` means the scale's default.

    JAX's persistent compilation cache is turned on first (:func:`iterlin.repro.compilation.enable_compilation_cache`).

    Returns:
      The experiment's typed results (its module's ``Results``: NumPy arrays, and each sweep a
      :class:`~iterlin.experiments.Sweep`) with ``config``, the resolved config.

    Raises:
      ValueError naming the offending parameter before any compute (see :func:`resolve`).
    """
    if isinstance(experiment, (ExperimentConfig, Mapping)):
        if overrides:
            raise ValueError(f"pass either a config or overrides, not both (got {sorted(overrides)})")
        # a typed config was checked when it was built (it is frozen); a dict (read from a file) is checked here
        config = experiment if isinstance(experiment, ExperimentConfig) else revalidate(experiment)
    else:
        config = resolve(experiment, scale, **overrides)
    exp = get(config.experiment)
    enable_compilation_cache()
    data = exp.load(config)
    if verbose:
        print(f"{exp.name} ({config.scale}): "
              + _config.describe({k: v for k, v in config.to_dict().items() if k not in ("experiment", "scale")}))
    arrays = cached(
        exp.name,
        lambda ckpt: stored(exp.compute(config, data, checkpoint_dir=ckpt, progress=progress is not False)),
        config.to_dict(),
        data_fingerprint=data_fingerprint(data),
        code=code_fingerprint(exp.module, ("load", "compute")),
        cache_dir=cache_dir,
        verbose=verbose,
    )
    return exp.typed(arrays, config)


def claims(results: Any, *, directory=None) -> ClaimsTable:
    """The notebook's claims cell: build the rows, save them (JSON) and return the table (an HTML
    table as a notebook's last expression, fixed-width text when printed).

    ``results`` as returned by :func:`run` (its ``config`` names the experiment and the scale).
    See :func:`iterlin.repro.claims.publish_claims` for where the JSON goes.
    """
    config = results.config
    exp = get(config.experiment)
    return publish_claims(exp.name, exp.claims(results), scale=config.scale, directory=directory)


def scales_table(name: str | None = None) -> str:
    """Markdown: for each experiment (or only ``name``), a table of its defaults, one column per scale.

    ``None`` as a size means every installed image ("all").
    """
    parts = []
    for exp in [get(name)] if name is not None else EXPERIMENTS.values():
        scales = list(exp.scales)
        keys = list(exp.scales[scales[0]])
        rows = [f"### {exp.name}", "", "| parameter | " + " | ".join(scales) + " |",
                "|---|" + "---|" * len(scales)]
        for k in keys:
            cells = [format_value(exp.scales[s][k], inf="∞", none="all").replace("|", "\\|") for s in scales]
            rows.append(f"| `{k}` | " + " | ".join(cells) + " |")
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)
