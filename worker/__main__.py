"""``python -m worker`` is the ``worker`` command."""

import sys

from worker.ops.cli import main

sys.exit(main())
