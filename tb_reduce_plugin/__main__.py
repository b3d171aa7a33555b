"""`python -m tb_reduce_plugin` runs the command line."""

import sys

from .cli import main

sys.exit(main())
