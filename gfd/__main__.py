"""``python -m gfd`` runs the ``gfd`` command."""

import sys

from gfd.cli import main

sys.exit(main())
