"""``python -m worker`` is the ``worker`` command."""

import sys

from worker.cli import main

sys.exit(main())
