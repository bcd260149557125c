"""Labels the admission policy refused: which keys a refusal names, how long they are held back, and that
the rest of a change is planned again without them. (The sync pass and prune send that rest:
tests/nfd_lite/node/test_sync.py, test_e2e_faults.py and api/test_retry.py.)"""

from __future__ import annotations

from nfd_lite.api.errors import AdmissionRefused
from nfd_lite.files.policy import Policy
from nfd_lite.node.held import HeldKeys, refused_keys
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


def _refusal(*keys: str) -> AdmissionRefused:
    return AdmissionRefused(403, DENIED + "not: " + ", ".join(keys), verb="patch")


NODE = NodeState(
    {"example.com/old": "1", "nvidia.com/gpu.count": "1"},
    {OWNED_ANNOTATION: "example.com/old,nvidia.com/gpu.count"},
    "5",
)


def _plan(held: frozenset[str]) -> Plan:
    desired = {"nvidia.com/gpu.count": "2", "example.com/new": "1"}
    return plan(desired, NODE, may_own=Policy().may_own, held=held)


def test_the_rest_of_a_change_is_planned_without_the_refused_keys() -> None:
    held = HeldKeys(retry_after=30.0)
    first = _plan(held.keys())
    assert held.hold_refused(_refusal("example.com/new", "example.com/old"), first.touched)
    assert held.keys() == {"example.com/new", "example.com/old"}
    rest = _plan(held.keys())
    assert rest.patch is not None
    assert rest.patch["metadata"]["labels"] == {"nvidia.com/gpu.count": "2"}
    # The record keeps the refused owned label (it is still there) and does not gain the refused new one.
    assert rest.patch["metadata"]["annotations"] == {OWNED_ANNOTATION: "example.com/old,nvidia.com/gpu.count"}
    assert rest.removed == [] and rest.set_labels == {"nvidia.com/gpu.count": "2"}


def test_a_refusal_that_names_no_key_of_the_patch_holds_nothing() -> None:
    held = HeldKeys(retry_after=30.0)
    whole = AdmissionRefused(403, DENIED + "nfd-lite may not change the Node spec", verb="patch")
    assert not held.hold_refused(whole, _plan(held.keys()).touched)
    assert not held.hold_refused(_refusal("example.com/elsewhere"), _plan(held.keys()).touched)
    assert held.keys() == frozenset()
