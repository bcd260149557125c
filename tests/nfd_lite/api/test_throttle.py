"""The token bucket on writes: a burst at once, then the rate."""

from __future__ import annotations

import pytest

from nfd_lite.api.throttle import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_at_once_then_one_write_per_token() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock)
    for _ in range(3):
        assert bucket.delay() == 0.0
        bucket.take()
    assert bucket.delay() == pytest.approx(0.5)
    clock.now += 0.25
    assert bucket.delay() == pytest.approx(0.25)
    clock.now += 0.25
    assert bucket.delay() == 0.0
    bucket.take()
    assert bucket.delay() == pytest.approx(0.5)


def test_an_idle_bucket_fills_up_to_its_burst_only() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1.0, burst=2, clock=clock)
    clock.now += 3600
    bucket.take()
    bucket.take()
    assert bucket.delay() == pytest.approx(1.0)


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_a_bucket_that_could_never_write_is_refused(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate, burst)
