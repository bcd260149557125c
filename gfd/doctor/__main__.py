"""`python -m gfd.doctor`, the same as `gfd doctor`."""

import sys

from gfd.doctor.cli import main

sys.exit(main())
