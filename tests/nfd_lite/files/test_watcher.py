"""Debounce semantics, and real inotify/polling watches on real directories."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from nfd_lite.files.watcher import Debouncer, DirWatcher


def test_a_burst_costs_one_sync_after_the_last_event() -> None:
    d = Debouncer(delay=0.1, cap=1.0)
    for t in (0.0, 0.05, 0.1, 0.15):
        d.note(t)
        assert not d.take(t)
    assert d.deadline() == pytest.approx(0.25)
    assert not d.take(0.24)
    assert d.take(0.25)
    assert d.deadline() is None and not d.take(5.0)


def test_a_steady_stream_cannot_postpone_the_sync_past_the_cap() -> None:
    d = Debouncer(delay=0.1, cap=0.5)
    t = 0.0
    while not d.take(t):
        d.note(t)
        t += 0.05
        assert t < 1.0
    assert t == pytest.approx(0.5, abs=0.051)


def test_an_event_after_a_sync_starts_a_new_burst() -> None:
    d = Debouncer(delay=0.1, cap=1.0)
    d.note(0.0)
    assert d.take(0.1)
    d.note(0.2)
    assert not d.take(0.29)
    assert d.take(0.31)


class Counter:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        self.event.set()

    def wait(self) -> bool:
        ok = self.event.wait(10)
        self.event.clear()
        return ok

    def quiet(self) -> None:
        """Swallow the rest of a burst (one write is several events) until 0.2 s pass without one."""
        while self.event.wait(0.2):
            self.event.clear()


@pytest.fixture(params=[False, True], ids=["inotify", "poll"])
def poll(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_an_atomic_rename_into_place_is_noticed(tmp_path: Path, poll: bool) -> None:
    hits = Counter()
    watcher = DirWatcher([tmp_path], hits, poll=poll, poll_interval=0.1)
    watcher.start()
    try:
        assert hits.wait()  # the initial attach
        (tmp_path / ".gfd.tmp").write_text("k=1\n")
        os.rename(tmp_path / ".gfd.tmp", tmp_path / "gfd")
        assert hits.wait()
    finally:
        watcher.stop()


def test_temp_files_alone_do_not_wake_it(tmp_path: Path) -> None:
    hits = Counter()
    watcher = DirWatcher([tmp_path], hits)
    watcher.start()
    try:
        assert hits.wait()
        (tmp_path / ".partial").write_text("k=1\n")
        (tmp_path / ".partial").unlink()
        (tmp_path / "real").write_text("k=1\n")  # a real change afterwards is still seen
        assert hits.wait()
        hits.quiet()
        before = hits.count
        (tmp_path / ".partial").write_text("k=2\n")
        assert not hits.event.wait(0.5)
        assert hits.count == before
    finally:
        watcher.stop()


def test_reading_files_does_not_echo_back(tmp_path: Path) -> None:
    (tmp_path / "gfd").write_text("k=1\n")
    hits = Counter()
    watcher = DirWatcher([tmp_path], hits)
    watcher.start()
    try:
        assert hits.wait()
        hits.quiet()
        (tmp_path / "gfd").read_text()
        assert not hits.event.wait(0.5)
    finally:
        watcher.stop()


def test_a_missing_directory_is_waited_for_and_a_replaced_one_rewatched(tmp_path: Path) -> None:
    directory = tmp_path / "features.d"
    hits = Counter()
    watcher = DirWatcher([directory], hits)
    watcher.start()
    try:
        assert watcher.watching() == []
        directory.mkdir()
        assert watcher.refresh() and hits.wait()
        assert watcher.watching() == [directory]
        os.rename(directory, tmp_path / "old")
        directory.mkdir()
        assert watcher.refresh()
        hits.event.clear()
        (directory / "gfd").write_text("k=1\n")
        assert hits.wait()  # the new directory is watched, not the old inode
    finally:
        watcher.stop()
