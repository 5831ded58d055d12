"""The paper's experiments: one module per notebook (``fig1`` … ``fig9``, ``ntk``; beyond the paper,
``ksweep`` and ``lr``).

``notebooks/<name>.py`` → ``iterlin/experiments/<name>.py`` holds everything about that figure:
its defaults at every scale (``SCALES``), its data (``load``), its computation (``compute``), its
claims (``claims``) and its plot (``plot(results)``, which the notebook calls; drawing only: the
result cache's code fingerprint follows ``load`` and ``compute``, so a change to the plot recomputes
nothing). :mod:`iterlin.experiments.registry` lists them and provides the calls a notebook makes;
shared computing helpers are in :mod:`iterlin.experiments._common`, shared plotting helpers in
:mod:`iterlin.repro.plotting`.
"""

from ._common import Experiment, Sweep, stored
from .registry import (
    EXPERIMENTS,
    claims,
    data_fingerprint,
    get,
    names,
    notebook_parameters,
    resolve,
    resolve_notebook,
    revalidate,
    run,
    scales_table,
)

__all__ = ["Experiment", "EXPERIMENTS", "claims", "data_fingerprint", "get", "names", "notebook_parameters",
           "resolve", "resolve_notebook", "revalidate", "run", "scales_table", "stored", "Sweep"]
