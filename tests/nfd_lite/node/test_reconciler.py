"""Reconciliation: the smallest patch, ownership, conflicts, grace, prune."""

from __future__ import annotations

from nfd_lite.files.policy import Policy
from nfd_lite.node.reconciler import OWNED_ANNOTATION, NodeState, plan

OTHER = {"kubernetes.io/hostname": "n1", "team.example.com/owner": "ml"}
MAY_OWN = Policy().may_own


def node(labels: dict[str, str], owned: str | None = None, rv: str = "7") -> NodeState:
    annotations = {"other/annotation": "x"}
    if owned is not None:
        annotations[OWNED_ANNOTATION] = owned
    return NodeState({**OTHER, **labels}, annotations, rv)


def test_first_sync_sets_labels_and_records_ownership() -> None:
    result = plan({"nvidia.com/b": "2", "nvidia.com/a": "1"}, node({}), may_own=MAY_OWN)
    assert result.patch == {
        "metadata": {
            "resourceVersion": "7",
            "labels": {"nvidia.com/b": "2", "nvidia.com/a": "1"},
            "annotations": {OWNED_ANNOTATION: "nvidia.com/a,nvidia.com/b"},
        }
    }


def test_nothing_to_do_gives_no_patch() -> None:
    same = node({"nvidia.com/a": "1"}, "nvidia.com/a")
    assert plan({"nvidia.com/a": "1"}, same, may_own=MAY_OWN).patch is None
    assert plan({}, node({}), may_own=MAY_OWN).patch is None


def test_only_the_difference_is_sent() -> None:
    current = node({"nvidia.com/a": "1", "nvidia.com/b": "2"}, "nvidia.com/a,nvidia.com/b")
    result = plan({"nvidia.com/a": "1", "nvidia.com/b": "3", "nvidia.com/c": "4"}, current, may_own=MAY_OWN)
    assert result.patch is not None
    assert result.patch["metadata"]["labels"] == {"nvidia.com/b": "3", "nvidia.com/c": "4"}
    owned = "nvidia.com/a,nvidia.com/b,nvidia.com/c"
    assert result.patch["metadata"]["annotations"] == {OWNED_ANNOTATION: owned}


def test_vanished_owned_labels_are_removed_and_others_never_touched() -> None:
    current = node({"nvidia.com/a": "1", "nvidia.com/b": "2"}, "nvidia.com/a,nvidia.com/b")
    result = plan({"nvidia.com/a": "1"}, current, may_own=MAY_OWN)
    assert result.patch is not None
    assert result.patch["metadata"]["labels"] == {"nvidia.com/b": None}
    assert result.removed == ["nvidia.com/b"]
    assert not set(result.patch["metadata"]["labels"]) & set(OTHER)


def test_removing_the_last_owned_label_drops_the_annotation() -> None:
    result = plan({}, node({"nvidia.com/a": "1"}, "nvidia.com/a"), may_own=MAY_OWN)
    assert result.patch is not None
    assert result.patch["metadata"]["annotations"] == {OWNED_ANNOTATION: None}


def test_grace_keeps_owned_labels_until_files_are_seen() -> None:
    current = node({"nvidia.com/a": "1"}, "nvidia.com/a")
    assert plan({}, current, allow_removal=False, may_own=MAY_OWN).patch is None
    result = plan({"nvidia.com/b": "2"}, current, allow_removal=False, may_own=MAY_OWN)
    assert result.patch is not None
    assert result.patch["metadata"]["labels"] == {"nvidia.com/b": "2"}
    assert result.patch["metadata"]["annotations"] == {OWNED_ANNOTATION: "nvidia.com/a,nvidia.com/b"}


def test_drift_is_repaired_for_owned_labels() -> None:
    edited = node({"nvidia.com/a": "tampered"}, "nvidia.com/a")
    deleted = node({}, "nvidia.com/a")
    for current in (edited, deleted):
        result = plan({"nvidia.com/a": "1"}, current, may_own=MAY_OWN)
        assert result.patch is not None
        assert result.patch["metadata"]["labels"] == {"nvidia.com/a": "1"}


def test_a_label_set_by_someone_else_is_a_conflict_left_alone() -> None:
    current = node({"nvidia.com/a": "theirs"})
    result = plan({"nvidia.com/a": "ours", "nvidia.com/b": "1"}, current, may_own=MAY_OWN)
    assert [(c.key, c.theirs, c.ours) for c in result.conflicts] == [("nvidia.com/a", "theirs", "ours")]
    assert result.patch is not None
    assert result.patch["metadata"]["labels"] == {"nvidia.com/b": "1"}
    assert result.patch["metadata"]["annotations"] == {OWNED_ANNOTATION: "nvidia.com/b"}


def test_a_label_someone_else_set_to_our_value_is_theirs_and_no_conflict() -> None:
    current = node({"nvidia.com/gpu.present": "true"})
    result = plan({"nvidia.com/gpu.present": "true", "nvidia.com/b": "1"}, current, may_own=MAY_OWN)
    assert result.conflicts == []
    assert result.patch is not None
    assert result.patch["metadata"]["labels"] == {"nvidia.com/b": "1"}
    assert result.owned == {"nvidia.com/b"}  # not taken: their changes to it are never reverted
    assert plan({"nvidia.com/gpu.present": "true"}, current, may_own=MAY_OWN).patch is None
    # Once they remove it the key is free: it is set and owned from then on.
    freed = plan({"nvidia.com/gpu.present": "true"}, node({}), may_own=MAY_OWN)
    assert freed.owned == {"nvidia.com/gpu.present"}


def test_overwrite_takes_the_conflicting_label() -> None:
    result = plan({"nvidia.com/a": "ours"}, node({"nvidia.com/a": "theirs"}), overwrite=True, may_own=MAY_OWN)
    assert result.conflicts == []
    assert result.patch is not None
    assert result.patch["metadata"]["labels"] == {"nvidia.com/a": "ours"}
    assert result.patch["metadata"]["annotations"] == {OWNED_ANNOTATION: "nvidia.com/a"}


def test_an_edited_annotation_cannot_make_it_delete_reserved_or_control_labels() -> None:
    listed = "nvidia.com/a,kubernetes.io/hostname,nvidia.com/mig.config,nvidia.com/gpu.deploy.driver"
    current = node({"nvidia.com/a": "1", "nvidia.com/mig.config": "all-1g.5gb"}, listed)
    result = plan({}, current, may_own=MAY_OWN)
    assert result.patch is not None
    assert result.patch["metadata"]["labels"] == {"nvidia.com/a": None}
    assert result.patch["metadata"]["annotations"] == {OWNED_ANNOTATION: None}  # the record claims nothing


def test_owned_labels_under_a_prefix_no_longer_allowed_are_removed_not_orphaned() -> None:
    narrowed = Policy.from_prefixes(["nvidia.com/"])
    current = node({"example.com/x": "1", "nvidia.com/gpu.count": "2"}, "example.com/x,nvidia.com/gpu.count")
    result = plan({"nvidia.com/gpu.count": "2"}, current, may_own=narrowed.may_own)
    assert result.patch is not None
    assert result.patch["metadata"]["labels"] == {"example.com/x": None}
    assert result.patch["metadata"]["annotations"] == {OWNED_ANNOTATION: "nvidia.com/gpu.count"}
    pruned = plan({}, current, may_own=narrowed.may_own).patch
    assert pruned is not None
    assert pruned["metadata"]["labels"] == {"example.com/x": None, "nvidia.com/gpu.count": None}


def test_during_start_up_grace_owned_labels_stay_owned_but_control_labels_leave_the_record() -> None:
    current = node({"nvidia.com/a": "1"}, "nvidia.com/a,nvidia.com/mig.config")
    result = plan({}, current, allow_removal=False, may_own=MAY_OWN)
    assert result.patch is not None
    assert result.patch["metadata"]["labels"] == {}
    assert result.patch["metadata"]["annotations"] == {OWNED_ANNOTATION: "nvidia.com/a"}


def test_prune_is_the_plan_of_nothing_it_removes_owned_labels_and_the_record_only() -> None:
    current = node({"nvidia.com/a": "1"}, "nvidia.com/a,nvidia.com/gone,kubernetes.io/hostname")
    meta = {"resourceVersion": "7", "labels": {"nvidia.com/a": None}, "annotations": {OWNED_ANNOTATION: None}}
    pruned = plan({}, current, may_own=MAY_OWN)
    assert (pruned.patch, pruned.removed, pruned.owned) == ({"metadata": meta}, ["nvidia.com/a"], frozenset())
    assert plan({}, node({"nvidia.com/a": "1"}), may_own=MAY_OWN).patch is None


def test_the_plan_says_what_the_record_lists_once_applied() -> None:
    current = node(
        {"nvidia.com/a": "1", "nvidia.com/b": "2"}, "nvidia.com/a,nvidia.com/b,nvidia.com/mig.config"
    )
    assert plan({"nvidia.com/a": "1", "nvidia.com/c": "3"}, current, may_own=MAY_OWN).owned == {
        "nvidia.com/a",
        "nvidia.com/c",
    }
    assert plan({}, current, allow_removal=False, may_own=MAY_OWN).owned == {"nvidia.com/a", "nvidia.com/b"}
    unchanged = node({"nvidia.com/a": "1"}, "nvidia.com/a")
    result = plan({"nvidia.com/a": "1"}, unchanged, may_own=MAY_OWN)
    assert (result.patch, result.owned) == (None, {"nvidia.com/a"})


def test_a_node_never_read_gets_no_resource_version_precondition() -> None:
    result = plan({"nvidia.com/a": "1"}, NodeState(), may_own=MAY_OWN)
    assert result.patch == {
        "metadata": {"labels": {"nvidia.com/a": "1"}, "annotations": {OWNED_ANNOTATION: "nvidia.com/a"}}
    }


def test_an_older_resource_version_never_supersedes_a_newer_one() -> None:
    assert NodeState(resource_version="10").supersedes(NodeState(resource_version="9"))
    assert NodeState(resource_version="9").supersedes(NodeState(resource_version="9"))
    assert not NodeState(resource_version="9").supersedes(NodeState(resource_version="10"))
    assert NodeState(resource_version="9").supersedes(None)
    assert NodeState(resource_version="opaque").supersedes(NodeState(resource_version="10"))


def test_a_held_key_is_left_as_the_node_has_it_label_and_record() -> None:
    current = node({"nvidia.com/a": "1", "nvidia.com/b": "1"}, "nvidia.com/a,nvidia.com/b")
    desired = {"nvidia.com/a": "2", "nvidia.com/c": "3"}  # b no longer desired
    held = frozenset({"nvidia.com/b", "nvidia.com/c"})
    result = plan(desired, current, may_own=MAY_OWN, held=held)
    assert result.patch is not None
    assert result.patch["metadata"]["labels"] == {"nvidia.com/a": "2"}
    assert result.owned == {"nvidia.com/a", "nvidia.com/b"}  # b stays recorded, c is not claimed
    assert result.touched == {"nvidia.com/a", "nvidia.com/b"}


def test_a_key_whose_label_is_gone_leaves_the_record_in_grace_and_when_held() -> None:
    """The admission policy refuses a record listing a label the Node does not carry: an administrator who
    deleted an owned label must not keep the writer's next patch from being admitted."""
    current = node({"nvidia.com/a": "1"}, "nvidia.com/a,nvidia.com/b,nvidia.com/c")
    graced = plan({}, current, allow_removal=False, may_own=MAY_OWN)
    assert graced.patch is not None
    assert graced.patch["metadata"] == {
        "resourceVersion": "7",
        "labels": {},
        "annotations": {OWNED_ANNOTATION: "nvidia.com/a"},
    }
    held = plan({"nvidia.com/a": "1"}, current, may_own=MAY_OWN, held=frozenset({"nvidia.com/b"}))
    assert held.patch is not None
    assert held.patch["metadata"]["annotations"] == {OWNED_ANNOTATION: "nvidia.com/a"}
    assert held.owned == {"nvidia.com/a"}
