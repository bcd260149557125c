"""The mock backend reads a profile as its writer left it: a running daemon whose profile is being
rewritten in place (an editor, ``>`` in a shell) neither fails a pass on the empty file nor labels a
half-written one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gfd.backends.errors import BackendError
from gfd.backends.mock import MAX_WAITS, QUIET_S, MockBackend

HEAD = 'machine: Test Box\ndriver_version: "550.54.15"\ndevices:\n'
T4 = '  - name: Tesla T4\n    memory_mib: 15360\n    compute_capability: "7.5"\n'
L4 = '  - name: NVIDIA L4\n    memory_mib: 23034\n    compute_capability: "8.9"\n'
NONE = 'machine: Test Box\ndriver_version: "550.54.15"\ndevices: []\n'
TWO = HEAD + T4 + L4


class Waits:
    """The backend's sleep: records each wait; at the first, the writer finishes (``text`` into ``then``)."""

    def __init__(self, then: Path | None = None, text: str = "") -> None:
        self.asked: list[float] = []
        self.then, self.text = then, text

    def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        if self.then is not None:
            self.then.write_text(self.text)  # the writer's write() lands while gfd waits
            self.then = None
        time.sleep(seconds)


@pytest.mark.parametrize(
    "midway",
    [
        pytest.param("", id="truncated-not-yet-written"),
        pytest.param(HEAD + T4, id="cut-after-the-first-gpu"),
        pytest.param(None, id="deleted-not-yet-recreated"),
    ],
)
def test_a_profile_being_rewritten_is_read_once_its_writer_is_done(
    tmp_path: Path, midway: str | None
) -> None:
    profile = tmp_path / "node.yaml"
    profile.write_text(NONE)
    waits = Waits(profile, TWO)
    backend = MockBackend(profile, sleep=waits)
    assert backend.probe().devices == ()
    if midway is None:
        profile.unlink()
    else:
        profile.write_text(midway)  # as open(O_TRUNC) and a first write() leave it
    found = backend.probe()
    assert [d.name for d in found.devices] == ["Tesla T4", "NVIDIA L4"]
    assert waits.asked and sum(waits.asked) <= MAX_WAITS * QUIET_S


def test_only_a_pass_after_a_change_waits_and_only_once_for_a_finished_edit(tmp_path: Path) -> None:
    profile = tmp_path / "node.yaml"
    profile.write_text(HEAD + T4)  # just written: the first read (a oneshot run) does not wait for it
    waits = Waits()
    backend = MockBackend(profile, sleep=waits)
    assert len(backend.probe().devices) == 1
    assert len(backend.probe().devices) == 1  # unchanged: every pass of an idle daemon
    assert waits.asked == []
    profile.write_text(TWO)  # replaced whole before the pass: one quiet spell shows the writer is done
    assert len(backend.probe().devices) == 2
    assert waits.asked == [QUIET_S]


def test_a_profile_that_never_settles_is_read_after_a_bounded_wait(tmp_path: Path) -> None:
    profile = tmp_path / "node.yaml"
    profile.write_text(NONE)
    asked: list[float] = []

    def rewritten(seconds: float) -> None:  # a writer that never pauses: a new version every wait
        asked.append(seconds)
        profile.write_text(f"{TWO}# version {len(asked)}\n")

    backend = MockBackend(profile, sleep=rewritten)
    backend.probe()
    profile.write_text(TWO)
    assert len(backend.probe().devices) == 2  # as it is after the last wait
    assert asked == [QUIET_S] * MAX_WAITS


def test_a_profile_left_empty_is_still_refused_saying_so(tmp_path: Path) -> None:
    profile = tmp_path / "node.yaml"
    profile.write_text(NONE)
    backend = MockBackend(profile, sleep=Waits())
    backend.probe()
    profile.write_text("")
    with pytest.raises(BackendError, match="the profile is empty"):
        backend.probe()
