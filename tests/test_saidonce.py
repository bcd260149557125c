"""Saying a problem once per change, as both commands report what repeats pass after pass."""

from __future__ import annotations

from saidonce import Change, SaidOnce


def said(once: SaidOnce[str], *looks: list[str]) -> list[tuple[str, ...]]:
    return [once.update(look).new for look in looks]


def test_a_problem_is_said_when_it_appears_and_not_while_it_lasts() -> None:
    assert said(SaidOnce(), ["a"], ["a"], ["a", "b"], ["b", "a"]) == [("a",), (), ("b",), ()]


def test_a_problem_that_went_away_and_came_back_is_said_again() -> None:
    assert said(SaidOnce(), ["a"], [], ["a"], ["b"], ["a"]) == [("a",), (), ("a",), ("b",), ("a",)]


def test_new_problems_come_in_the_order_seen_and_once_each() -> None:
    assert SaidOnce[str]().update(["c", "a", "c", "b"]).new == ("c", "a", "b")


def test_the_recovery_is_said_once_when_the_last_problem_goes() -> None:
    once: SaidOnce[str] = SaidOnce()
    looks: list[list[str]] = [[], ["a"], ["b"], [], [], ["a"], []]
    assert [once.update(look).recovered for look in looks] == [False, False, False, True, False, False, True]


def test_current_is_what_the_last_look_saw() -> None:
    once: SaidOnce[str] = SaidOnce()
    once.update(["a", "b"])
    assert once.current == {"a", "b"}
    once.update([])
    assert once.current == frozenset()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_with_repeat_after_a_lasting_problem_is_said_again_once_that_long_passed() -> None:
    clock = Clock()
    once: SaidOnce[str] = SaidOnce(repeat_after=600, clock=clock)
    heard = []
    for now in (0, 30, 599, 600, 630, 1199, 1200):
        clock.now = now
        heard.append(once.update(["denied"]))
    assert [c.new for c in heard] == [("denied",), (), (), ("denied",), (), (), ("denied",)]


def test_with_repeat_after_a_problem_that_came_back_is_said_at_once() -> None:
    clock = Clock()
    once: SaidOnce[str] = SaidOnce(repeat_after=600, clock=clock)
    assert once.update(["denied"]) == Change(("denied",))
    clock.now = 10
    assert once.update([]) == Change(recovered=True)
    clock.now = 20
    assert once.update(["denied"]) == Change(("denied",))


def test_without_repeat_after_time_changes_nothing() -> None:
    clock = Clock()
    once: SaidOnce[str] = SaidOnce(clock=clock)
    once.update(["a"])
    clock.now = 1e9
    assert once.update(["a"]).new == ()
