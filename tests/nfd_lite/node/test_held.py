"""Labels the admission policy refused: which keys a refusal names, how long they are held back, and that
the rest of a change is planned and sent again without them."""

from __future__ import annotations

from typing import Any

import pytest

from nfd_lite.api.errors import AdmissionRefused
from nfd_lite.files.policy import Policy
from nfd_lite.node.held import HeldKeys, refused_keys, send_around_refusals
from nfd_lite.node.reconciler import OWNED_ANNOTATION, NodeState, Plan, plan

DENIED = (
    "ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite' with binding 'gpu-labeller-nfd-lite' denied request: "
)


def test_a_refusal_names_the_keys_it_lists_as_words_of_their_own() -> None:
    message = (
        DENIED + "nfd-lite may only change labels under nvidia.com/ or x.io/, not: example.com/a, ex.io/b."
    )
    keys = ["example.com/a", "ex.io/b", "nvidia.com/gpu.count", "example.com/ab", "example.com"]
    assert refused_keys(message, keys) == {"example.com/a", "ex.io/b"}
    assert refused_keys(DENIED + "nfd-lite may not change metadata.managedFields", keys) == frozenset()
    assert refused_keys("'example.com/a' is locked.", keys) == {"example.com/a"}


class Clock:
    now = 10.0

    def __call__(self) -> float:
        return self.now


def test_a_held_key_is_tried_again_after_the_retry_interval() -> None:
    clock = Clock()
    held = HeldKeys(retry_after=30.0, clock=clock)
    held.hold(["example.com/a"], "refused")
    assert held.keys() == {"example.com/a"} and held.reasons == {"example.com/a": "refused"}
    assert held.next_retry() == 40.0
    clock.now = 40.0
    assert held.keys() == frozenset() and held.next_retry() is None


def _refusing(*keys: str, calls: list[dict[str, Any]]) -> Any:
    def send(patch: dict[str, Any]) -> str:
        calls.append(patch)
        named = [k for k in keys if k in patch["metadata"]["labels"]]
        if named:
            raise AdmissionRefused(403, DENIED + "not: " + ", ".join(named), verb="patch")
        return "admitted"

    return send


NODE = NodeState(
    {"example.com/old": "1", "nvidia.com/gpu.count": "1"},
    {OWNED_ANNOTATION: "example.com/old,nvidia.com/gpu.count"},
    "5",
)


def _plan(held: frozenset[str]) -> Plan:
    desired = {"nvidia.com/gpu.count": "2", "example.com/new": "1"}
    return plan(desired, NODE, may_own=Policy().may_own, held=held)


def test_the_rest_of_a_change_is_sent_without_the_refused_keys() -> None:
    calls: list[dict[str, Any]] = []
    held = HeldKeys(retry_after=30.0)
    result, answer = send_around_refusals(
        _plan, _refusing("example.com/new", "example.com/old", calls=calls), held
    )
    assert answer == "admitted"
    assert held.keys() == {"example.com/new", "example.com/old"}
    assert calls[-1]["metadata"]["labels"] == {"nvidia.com/gpu.count": "2"}
    # The record keeps the refused owned label (it is still there) and does not gain the refused new one.
    assert calls[-1]["metadata"]["annotations"] == {OWNED_ANNOTATION: "example.com/old,nvidia.com/gpu.count"}
    assert result.removed == [] and result.set_labels == {"nvidia.com/gpu.count": "2"}


def test_a_refusal_that_names_no_key_of_the_patch_is_raised() -> None:
    def send(patch: dict[str, Any]) -> str:
        raise AdmissionRefused(403, DENIED + "nfd-lite may not change the Node spec", verb="patch")

    with pytest.raises(AdmissionRefused):
        send_around_refusals(_plan, send, HeldKeys(retry_after=30.0))
