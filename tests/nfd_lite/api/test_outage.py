"""Outage (nfd_lite/api/outage.py), with a clock of the test's own: when the API server counts as
unreachable and that is said, once per outage; when an outage was long enough to check the admission
policy again; and that what the main loop, the Node watch and /readyz tell it side by side is not lost.
The writer cut off from a server: tests/nfd_lite/test_unreachable.py."""

from __future__ import annotations

import logging
import threading

import pytest

from nfd_lite.api.errors import ConnectionFailed, ServerError
from nfd_lite.api.outage import Outage

CAUSE = "networkPolicy.apiServerEgress"
REFUSED = ConnectionFailed(0, "GET /api/v1/nodes: ConnectTimeoutError: timed out", verb="list")
FAILING = ServerError(503, "the server is currently unable to handle the request", verb="patch")


class Clock:
    """Time as the test sets it. ``hold_next()``: the next thread to read it waits there until
    ``release()``, so a test can make another thread act in the middle of an Outage call."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._hold = False
        self.holding = threading.Event()
        self._released = threading.Event()

    def hold_next(self) -> None:
        self._hold = True

    def release(self) -> None:
        self._released.set()

    def __call__(self) -> float:
        if self._hold:
            self._hold = False
            self.holding.set()
            self._released.wait(10)
        return self.now


def unreachable_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "cannot reach the API server" in r.getMessage()]


def test_unreachable_once_the_bound_passes_said_once_and_ended_by_an_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    outage = Outage(300.0, 90.0, clock)
    with caplog.at_level(logging.INFO, "nfd_lite"):
        clock.now += 30  # the last answer was 30 s ago
        outage.failed(REFUSED)
        assert not outage.unreachable()
        assert outage.unreachable_for() == 30
        clock.now += 59.9
        outage.failed(REFUSED)
        assert not outage.unreachable()
        clock.now += 0.1  # 90 s since the last answer
        assert outage.unreachable()
        for _ in range(5):  # every readiness probe and scrape asks again
            clock.now += 15
            outage.failed(REFUSED)
            assert outage.unreachable()
        (line,) = unreachable_lines(caplog)
        assert "no answer for 90 s" in line and REFUSED.message in line and CAUSE in line
        outage.heard()
        assert not outage.unreachable() and outage.unreachable_for() == 0
        assert caplog.messages[-1] == "the API server answers again, after 165 s without an answer"
        # A second outage is said again.
        clock.now += 100
        outage.failed(REFUSED)
        assert outage.unreachable()
    assert len(unreachable_lines(caplog)) == 2


def test_silence_without_a_failed_request_is_no_outage() -> None:
    # A quiet watch and nothing to write: no request failed, so nothing is known to be wrong.
    clock = Clock()
    outage = Outage(300.0, 90.0, clock)
    clock.now += 3600
    assert not outage.unreachable() and outage.unreachable_for() == 0


def test_from_start_up_the_bound_runs_from_the_start(caplog: pytest.LogCaptureFixture) -> None:
    # A new pod whose policy is already stale never gets an answer at all.
    clock = Clock()
    outage = Outage(300.0, 90.0, clock)
    outage.failed(REFUSED)
    clock.now += 90
    with caplog.at_level(logging.ERROR, "nfd_lite"):
        assert outage.unreachable()
    assert len(unreachable_lines(caplog)) == 1


def test_a_long_outage_is_timed_by_the_clock_it_was_given_and_taken_once() -> None:
    clock = Clock()
    outage = Outage(300.0, 90.0, clock)
    outage.failed(FAILING)
    clock.now += 299
    outage.answered()
    assert not outage.take_long_one()  # too short to have been an upgrade
    outage.failed(FAILING)
    clock.now += 60
    outage.failed(FAILING)  # the same outage goes on: it began at the first failure
    clock.now += 240
    outage.answered()
    assert outage.take_long_one()
    assert not outage.take_long_one()  # taken: the admission policy is checked again once


def test_a_failure_reported_while_an_answer_is_recorded_is_not_lost() -> None:
    """The Node watch's request is answered while the main loop's fails: the outage that failure begins
    must survive the answer that ends the one before, or its length (and the admission policy check a
    long one brings) is lost."""
    clock = Clock()
    outage = Outage(300.0, 90.0, clock)
    outage.failed(FAILING)
    clock.now += 10
    clock.hold_next()
    answered = threading.Thread(target=outage.answered)
    answered.start()
    assert clock.holding.wait(10), "answered() reads the clock"
    failed = threading.Thread(target=outage.failed, args=(FAILING,))
    failed.start()
    failed.join(0.5)  # it waits for the answer to be recorded; given time, a version without a lock would not
    clock.release()
    answered.join(10)
    failed.join(10)
    assert not answered.is_alive() and not failed.is_alive()
    clock.now += 300
    outage.answered()
    assert outage.take_long_one(), "the outage the failure began was lost"
