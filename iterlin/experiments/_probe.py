"""Compute one experiment at a probe config and store its results: the driver of
:func:`iterlin.experiments.reference.attest`.

``reference.attest`` runs this file's text as ``python -c <text> NAME SCALE OVERRIDES OUT
CHECKPOINT_DIR`` twice, once with the code of a reference run's commit first on ``PYTHONPATH`` and
once with today's, so it uses only what every such commit has: ``registry.resolve``,
``registry.get(name).load`` / ``.compute`` (typed results, or a dict before them) and
``save_results`` of the result cache (``iterlin.repro.cache``; ``iterlin.cache`` before the package's
sub-packages). ``OVERRIDES`` is a JSON
object of knobs (as ``registry.resolve``'s keywords). Besides the results it stores, under the key
``__package__``, the folder the ``iterlin`` it imported came from, so that the caller can check that
the code it meant to run is the code that ran.
"""

import json
import sys


def main(argv):
    name, scale, overrides, out, checkpoint_dir = argv
    import numpy as np

    import iterlin
    from iterlin.experiments import registry
    try:
        from iterlin.repro.cache import save_results
    except ModuleNotFoundError:  # the flat layout of commits before the sub-packages
        from iterlin.cache import save_results  # flat-layout

    config = registry.resolve(name, scale, **json.loads(overrides))
    exp = registry.get(name)
    results = exp.compute(config, exp.load(config), checkpoint_dir=checkpoint_dir, progress=False)
    # typed results (a NamedTuple: every field but config and the unset ones), or an older dict
    results = ({k: v for k, v in results._asdict().items() if k != "config" and v is not None}
               if hasattr(results, "_asdict") else dict(results))
    results["__package__"] = np.asarray(iterlin.__file__)
    stored = config.to_dict() if hasattr(config, "to_dict") else config  # a typed config, or an older dict
    save_results(out, results, key=f"probe:{name}:{scale}", config=stored)


if __name__ == "__main__":
    main(sys.argv[1:])
