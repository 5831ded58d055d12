"""``python -m iterlin``: the command line (:mod:`iterlin.cli`)."""

import sys

from .cli import main

sys.exit(main())
