"""`python -m schedspec.cli`: the same as the `schedspec` script."""

import sys

from . import main

sys.exit(main())
