"""``python -m bench`` (from the repository root): see :mod:`bench.run`."""

import sys

from bench.run import main

sys.exit(main())
