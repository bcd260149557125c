"""The mock backend: a simulated node described by a YAML machine profile.

It labels GPU-less test clusters. The profile is re-read on every probe, so
editing it changes a running daemon's labels like a hardware change would.

Editors, ``>`` in a shell and ``Path.write_text`` rewrite a file in place: it is
empty (truncated) or half-written until the writer is done. A probe that read it
then would fail a pass ("the profile is empty": /readyz 503, an error logged) or,
cut at a device, label too few GPUs. So a profile that changed since the last
probe is read once it has stayed the same for ``QUIET_S``: a pass after an edit
waits that long, every other pass (and the first) reads at once. The file's own
times cannot tell: a stat can show a truncated file with the mtime of its last
write (seen on ext4, Linux 6.18).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gfd.backends.errors import BackendError
from gfd.inventory import Inventory

if TYPE_CHECKING:
    from gfd.machine_profile import MachineProfile

QUIET_S = 0.25  # a changed profile is read once it has stayed the same this long: its writer is done
MAX_WAITS = 8  # a file rewritten without pause is read as it is after 8 x QUIET_S

# What tells a rewrite apart: replaced (inode), or written in place (size, mtime, ctime).
Identity = tuple[int, int, int, int, int]


def _identity(path: Path) -> Identity | None:
    try:
        info = os.stat(path)
    except OSError:
        return None  # gone (an editor that deletes, then writes anew) or unreadable: the read says which
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class MockBackend:
    name = "mock"

    def __init__(self, profile_path: str | Path, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.profile_path = Path(profile_path)
        self.sleep = sleep
        self._read: Identity | None = None  # the file the last successful probe read

    def probe(self) -> Inventory:
        from gfd.machine_profile import MachineProfileError  # YAML and msgspec: only for mock runs

        try:
            return self._load().to_inventory()
        except MachineProfileError as err:
            raise BackendError("profile", str(err)) from None

    def _load(self) -> MachineProfile:
        """The profile as its writer left it: a change is read once it has stayed the same for ``QUIET_S``,
        and read again when it changed while read."""
        from gfd.machine_profile import load_machine_profile

        seen = _identity(self.profile_path)
        settled = self._read is None or seen == self._read  # the first read, or nothing changed
        for _ in range(MAX_WAITS):
            if not settled:
                self.sleep(QUIET_S)
                now = _identity(self.profile_path)
                settled, seen = now == seen, now
                continue
            profile = load_machine_profile(self.profile_path)
            now = _identity(self.profile_path)
            if now == seen:
                self._read = seen
                return profile
            settled, seen = False, now  # changed while read
        profile = load_machine_profile(self.profile_path)  # still changing: as it is now
        self._read = _identity(self.profile_path)
        return profile
