"""``python -m nfd_lite`` is the ``nfd-lite`` command."""

from nfd_lite.cli import main

raise SystemExit(main())
