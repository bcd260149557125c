"""The writer on an ordinary busy Node: ten or more field managers, on the real kube-apiserver.

kube-apiserver keeps at most 10 Update entries in managedFields; a write that would make an 11th merges the
oldest into one entry named ancient-changes (capmanagers.go). The kubelet, the controllers, an
administrator's kubectl label/annotate/cordon, NFD, the GPU Operator and a CNI agent make ten managers on an
ordinary GPU node, and the writer's own entry is often the oldest (it writes only when a label changes), so
the server merges on the writer's own requests. The policy must admit what the server does there, refuse
what the server would not do, and a refusal must name managedFields.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nfd_lite.node.reconciler import OWNED_ANNOTATION
from tests.kube.controlplane import ApiResponse, ControlPlane
from tests.kube.fixtures import RELEASES, newest_and_oldest
from tests.kube.writer import PodWriter, eventually

POLICY = "ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite'"
BUCKET = "ancient-changes"
MERGE = "application/merge-patch+json"
# What a kubelet creates its Node with; an object created with no field at all is never tracked by Update
# writes (kube-apiserver skips managedFields for objects that have none), so a Node must start with some.
KUBELET_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


@pytest.fixture(scope="module", params=RELEASES)
def kube(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    yield from newest_and_oldest(request, tmp_path_factory, rbac=True)


def refused(answer: ApiResponse) -> bool:
    return answer.status == 403 and POLICY in answer.message and "metadata.managedFields" in answer.message


def write_as(
    kube: ControlPlane, node: str, manager: str, patch: dict[str, Any], status: bool = False
) -> None:
    path = f"/api/v1/nodes/{node}{'/status' if status else ''}?fieldManager={manager}"
    answer = kube.request("PATCH", path, patch, content_type=MERGE)
    assert answer.status == 200, answer.message


def busy(kube: ControlPlane, node: str, managers: int, prefix: str = "manager") -> None:
    """What a GPU node's neighbours leave on it: the kubelet's status, then ``managers`` others (an
    administrator's kubectl label and annotate, NFD, the GPU Operator, a CNI agent...) each writing its own
    labels and annotations, in one burst as a script or a rollout does (several in one second; a manager
    whose name sorts before ancient-changes then makes the server drop an existing bucket, its own quirk)."""
    write_as(
        kube,
        node,
        "kubelet",
        {
            "status": {
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "allocatable": {"cpu": "8", "memory": "31Gi", "pods": "110"},
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.7"},
                    {"type": "Hostname", "address": node},
                ],
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
                "nodeInfo": {"kubeletVersion": "v1.37.2", "osImage": "Ubuntu 24.04", "architecture": "amd64"},
            }
        },
        status=True,
    )
    for i in range(managers):
        write_as(
            kube,
            node,
            f"{prefix}-{i:02d}",
            {
                "metadata": {
                    "labels": {f"example.com/m{i:02d}": "x"},
                    "annotations": {f"example.com/a{i:02d}": "y"},
                }
            },
        )


def entries(kube: ControlPlane, node: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = kube.get_node(node)["metadata"].get("managedFields") or []
    return found


def leaves(tree: dict[str, Any], path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for key, sub in tree.items():
        out |= leaves(sub, (*path, key)) if sub else {(*path, key)}
    return out


def owned_by_others(kube: ControlPlane, node: str) -> set[tuple[str, ...]]:
    """Every field some manager other than the writer owns (a later server-side apply removes a field only
    if its applier is the last to own it)."""
    return set().union(
        *(leaves(e.get("fieldsV1") or {}) for e in entries(kube, node) if e["manager"] != "nfd-lite")
    )


def union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two fieldsV1 sets as one, as the server merges entries."""
    out = dict(a)
    for key, sub in b.items():
        out[key] = union(out.get(key) or {}, sub) if sub or out.get(key) else {}
    return out


def label_patch(values: dict[str, str | None], owned: str) -> dict[str, Any]:
    return {"metadata": {"labels": values, "annotations": {OWNED_ANNOTATION: owned}}}


@pytest.mark.parametrize(("managers", "prefix"), [(10, "manager"), (11, "manager"), (20, "admin")])
def test_the_writer_keeps_labelling_a_node_with_many_field_managers(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path, managers: int, prefix: str
) -> None:
    """The live writer sets its labels and then changes one (gfd saw the GPU degrade), while the server
    merges other managers' entries into ancient-changes on its requests; nothing another manager owned is
    lost."""
    node = new_node(KUBELET_LABELS)
    busy(kube, node, managers, prefix)
    time.sleep(1.1)  # managedFields times have one-second resolution: the writer's entry is the newest
    before = owned_by_others(kube, node)
    with PodWriter(kube, tmp_path, node) as w:
        w.write("nvidia.com/gpu.health=ok\nnvidia.com/gpu.count=2\n")
        assert eventually(lambda: kube.labels(node).get("nvidia.com/gpu.health") == "ok", 30), w.output()
        after_first = entries(kube, node)
        # a manager writing for the first time (a new operator, an admin's one-off kubectl) makes the
        # server merge again, possibly the writer's own entry into ancient-changes
        write_as(kube, node, "late-arrival", {"metadata": {"labels": {"example.com/late": "x"}}})
        time.sleep(1.1)
        w.write("nvidia.com/gpu.health=degraded\nnvidia.com/gpu.count=2\n")
        assert eventually(lambda: kube.labels(node).get("nvidia.com/gpu.health") == "degraded", 30), (
            w.output()
        )
        assert "Forbidden" not in w.output() and "refused" not in w.output(), w.output()
    assert len([e for e in after_first if e["operation"] == "Update"]) <= 10
    if managers >= 10:
        assert BUCKET in {e["manager"] for e in after_first}, after_first
    assert before <= owned_by_others(kube, node)


def _bucketed(kube: ControlPlane, new_node: Callable[..., str], managers: int = 11) -> tuple[str, str]:
    """A busy Node whose writer has written once (so the server has merged), and its token."""
    node = new_node(KUBELET_LABELS)
    busy(kube, node, managers)
    token = kube.pod_token(node)
    time.sleep(1.1)
    answer = kube.patch_node(
        node, label_patch({"nvidia.com/gpu.count": "1"}, "nvidia.com/gpu.count"), token=token
    )
    assert answer.status == 200, answer.message
    return node, token


def _with_fields(found: list[dict[str, Any]], patch: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {**patch["metadata"], "managedFields": found}}


def test_ancient_changes_cannot_be_given_a_field_nobody_owned(
    kube: ControlPlane, new_node: Callable[..., str]
) -> None:
    """An ancient-changes that claims spec.unschedulable would make every apply of it conflict, and keep
    it after the manager that set it lets go."""
    node, token = _bucketed(kube, new_node)
    found = entries(kube, node)
    bucket = next(e for e in found if e["manager"] == BUCKET)
    bucket["fieldsV1"].setdefault("f:spec", {})["f:unschedulable"] = {}
    answer = kube.patch_node(node, _with_fields(found, label_patch({}, "nvidia.com/gpu.count")), token=token)
    assert refused(answer), answer.message
    assert "f:spec" not in next(e for e in entries(kube, node) if e["manager"] == BUCKET)["fieldsV1"]


def test_another_managers_entry_cannot_be_dropped_on_a_busy_node(
    kube: ControlPlane, new_node: Callable[..., str]
) -> None:
    """Dropping an administrator's entry (not merging it) would let a later apply remove what they set."""
    node, token = _bucketed(kube, new_node)
    found = [e for e in entries(kube, node) if e["manager"] != "manager-10"]
    assert len(found) < len(entries(kube, node))
    answer = kube.patch_node(
        node,
        _with_fields(found, label_patch({"nvidia.com/gpu.count": "2"}, "nvidia.com/gpu.count")),
        token=token,
    )
    assert refused(answer), answer.message
    assert "manager-10" in {e["manager"] for e in entries(kube, node)}


def test_entries_cannot_be_merged_where_the_server_would_not_merge(
    kube: ControlPlane, new_node: Callable[..., str]
) -> None:
    """On a Node with three managers the server merges nothing; a writer that folds the administrators'
    entries into an ancient-changes of its own hides who set what."""
    node = new_node(KUBELET_LABELS)
    busy(kube, node, 2)
    token = kube.pod_token(node)
    found = entries(kube, node)
    merged: dict[str, Any] = {}
    for entry in [e for e in found if e["manager"].startswith("manager-")]:
        merged = union(merged, entry["fieldsV1"])
    kept = [e for e in found if not e["manager"].startswith("manager-")]
    bucket = {"manager": BUCKET, "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1"}
    forged = [*kept, {**bucket, "time": found[-1]["time"], "fieldsV1": merged}]
    answer = kube.patch_node(
        node,
        _with_fields(forged, label_patch({"nvidia.com/gpu.count": "2"}, "nvidia.com/gpu.count")),
        token=token,
    )
    assert refused(answer), answer.message
    assert {"manager-00", "manager-01"} <= {e["manager"] for e in entries(kube, node)}


def _entry(manager: str, at: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": f"2026-01-01T00:00:{at}Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": fields}},
    }


@pytest.mark.parametrize("bucket_first", [True, False], ids=["bucket-oldest", "bucket-dropped"])
def test_the_servers_own_merge_is_admitted_whichever_entry_is_oldest(
    kube: ControlPlane, new_node: Callable[..., str], bucket_first: bool
) -> None:
    """A history set down exactly (times and names), so the server's merge on the writer's first request is
    known: with ancient-changes the oldest it absorbs the next oldest; with an entry as old as it whose
    name sorts first, kube-apiserver deletes ancient-changes and what only it owned (capmanagers.go keeps
    the first entry of a version and merges the bucket into itself, then deletes it). Both are the server's
    doing and must be admitted."""
    names = [f"team-{i}" for i in range(8)]
    node = new_node(
        {**{f"example.com/{n}": "x" for n in names}, "example.com/old": "x", "example.com/b": "x"}
    )
    history = [
        _entry(BUCKET, "01", {"f:example.com/old": {}}),
        _entry("admin" if not bucket_first else "zz-admin", "01", {"f:example.com/b": {}}),
        *(_entry(n, f"{10 + i:02d}", {f"f:example.com/{n}": {}}) for i, n in enumerate(names)),
    ]
    write_as(kube, node, "gpu-labeller-tests", {"metadata": {"managedFields": history}})
    token = kube.pod_token(node)
    assert len([e for e in entries(kube, node) if e["operation"] == "Update"]) == 10
    answer = kube.patch_node(
        node, label_patch({"nvidia.com/gpu.count": "1"}, "nvidia.com/gpu.count"), token=token
    )
    assert answer.status == 200, answer.message
    after = {e["manager"]: e for e in entries(kube, node)}
    assert len([e for e in after.values() if e["operation"] == "Update"]) == 10
    if bucket_first:
        assert "zz-admin" not in after and "f:example.com/b" in str(after[BUCKET]["fieldsV1"])
    else:
        assert "admin" in after and BUCKET not in after


def test_an_apply_entry_cannot_be_merged_into_ancient_changes(
    kube: ControlPlane, new_node: Callable[..., str]
) -> None:
    """The server never merges Apply entries: an operator whose applied labels were moved out of its entry
    would no longer remove them when it stops applying them."""
    node, token = _bucketed(kube, new_node)
    applied = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": {"example.com/op": "1"}},
    }
    answer = kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}?fieldManager=gpu-operator",
        applied,
        content_type="application/apply-patch+yaml",
    )
    assert answer.status == 200, answer.message
    found = entries(kube, node)
    operator = next(e for e in found if e["manager"] == "gpu-operator")
    bucket = next(e for e in found if e["manager"] == BUCKET)
    bucket["fieldsV1"] = union(bucket["fieldsV1"], operator["fieldsV1"])
    forged = [e for e in found if e["manager"] != "gpu-operator"]
    answer = kube.patch_node(node, _with_fields(forged, label_patch({}, "nvidia.com/gpu.count")), token=token)
    assert refused(answer), answer.message
    assert "gpu-operator" in {e["manager"] for e in entries(kube, node)}
