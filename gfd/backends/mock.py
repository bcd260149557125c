"""The mock backend: a simulated node described by a YAML machine profile.

It labels GPU-less test clusters. The profile is re-read on every probe, so
editing it changes a running daemon's labels like a hardware change would.
"""

from __future__ import annotations

from pathlib import Path

from gfd.backends.errors import BackendError
from gfd.inventory import Inventory


class MockBackend:
    name = "mock"

    def __init__(self, profile_path: str | Path) -> None:
        self.profile_path = Path(profile_path)

    def probe(self) -> Inventory:
        from gfd.machine_profile import (  # YAML and msgspec: only for mock runs
            MachineProfileError,
            load_machine_profile,
        )

        try:
            return load_machine_profile(self.profile_path).to_inventory()
        except MachineProfileError as err:
            raise BackendError("profile", str(err)) from None
