"""End to end on the real kube-apiserver: real files, real inotify, the writer's Service with the real
kubernetes client and a pod-bound token, rbac/ and its admission policy enforced. Requests are counted
from the server's own audit log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nfd_lite.node.reconciler import OWNED_ANNOTATION
from tests.kube.controlplane import ControlPlane
from tests.kube.writer import ThreadWriter, eventually

THEIRS = {"team.example.com/owner": "ml"}


def ours(kube: ControlPlane, node: str) -> dict[str, str]:
    return {k: v for k, v in kube.labels(node).items() if k.startswith(("nvidia.com/", "feature.node"))}


def owned(kube: ControlPlane, node: str) -> str | None:
    return kube.annotations(node).get(OWNED_ANNOTATION)


def test_only_its_own_node_is_ever_requested(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    """Every request names its own Node but the self-check's: a list of two Nodes (one to probe, and the
    cluster's size) and one dry-run patch of another."""
    node, other = new_node(dict(THEIRS)), new_node({"nvidia.com/gpu.count": "9"})
    other_before = kube.get_node(other)
    with ThreadWriter(kube, tmp_path, node) as w:
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "2"})
        (w.dir / "gfd").unlink()
        assert eventually(lambda: ours(kube, node) == {})
        token_user = [e for e in kube.requests() if e["user"].get("extra", {}).get(
            "authentication.kubernetes.io/node-name") == [node]]  # fmt: skip
    assert token_user, "the audit log shows the writer's requests"
    probed = 0
    for event in token_user:
        uri = event["requestURI"]
        if uri == "/api/v1/nodes?limit=2":
            continue  # the self-check finding another Node to probe
        if (
            not uri.startswith((f"/api/v1/nodes/{node}?", "/api/v1/nodes?"))
            and uri != f"/api/v1/nodes/{node}"
        ):
            # the self-check's probe of another Node: a dry run, which the server never stores
            assert event["verb"] == "patch" and uri.endswith("?fieldManager=nfd-lite&dryRun=All"), uri
            probed += 1
            continue
        if uri.startswith("/api/v1/nodes?"):
            assert f"fieldSelector=metadata.name%3D{node}" in uri, uri
    assert probed == 1, "the self-check probed one other Node, once"
    assert kube.get_node(other) == other_before


def test_bad_input_never_reaches_the_api(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node(dict(THEIRS))
    with ThreadWriter(kube, tmp_path, node) as w:
        (w.dir / "binary").write_bytes(b"nvidia.com/gpu.bin=1\n\0")
        w.write(
            "kubernetes.io/hostname=evil\nnode-role.kubernetes.io/control-plane=\nexample.com/not-allowed=1\n"
            "nvidia.com/gpu.bad=has space\nnvidia.com/mig.config=all-disabled\nnvidia.com/gpu.ok=1\n"
        )
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.ok": "1"})
        assert eventually(lambda: w.metric("nfd_lite_rejected_lines_total", reason="reserved-namespace") == 2)
    labels = kube.labels(node)
    assert "kubernetes.io/hostname" not in labels and "node-role.kubernetes.io/control-plane" not in labels
    refused = [
        e
        for e in kube.requests()
        if e["user"].get("extra", {}).get("authentication.kubernetes.io/node-name") == [node]
        and e["responseStatus"]["code"] >= 400
    ]
    probe = f"/api/v1/nodes/{node}?fieldManager=nfd-lite&dryRun=All"
    # Nothing is refused but the start-up check's probes: a label on another Node, and a reserved label,
    # a taint and a forged managedFields entry on its own, each a dry run.
    own = [e["requestURI"] for e in refused if f"/nodes/{node}" in e["requestURI"]]
    other = [e["requestURI"] for e in refused if f"/nodes/{node}" not in e["requestURI"]]
    assert own == [probe, probe, probe], refused
    assert len(other) == 1 and other[0].endswith("?fieldManager=nfd-lite&dryRun=All"), refused


def test_a_label_someone_else_set_is_a_conflict_left_alone(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node({"nvidia.com/gpu.product": "theirs"})
    with ThreadWriter(kube, tmp_path, node) as w:
        w.write("nvidia.com/gpu.product=ours\nnvidia.com/gpu.count=1\n")
        assert eventually(lambda: owned(kube, node) == "nvidia.com/gpu.count")
        assert kube.labels(node)["nvidia.com/gpu.product"] == "theirs"
        # Counted once the pass has read its PATCH answer, after the server shows the ownership record.
        assert eventually(lambda: w.metric("nfd_lite_conflicts_total") == 1)


def test_a_label_handed_over_by_an_admin_is_taken(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    """The documented way to give nfd-lite a label someone else set: list it in the ownership record."""
    node = new_node({"nvidia.com/gpu.product": "theirs"})
    kube.patch_node(node, {"metadata": {"annotations": {OWNED_ANNOTATION: "nvidia.com/gpu.product"}}})
    with ThreadWriter(kube, tmp_path, node) as w:
        w.write("nvidia.com/gpu.product=ours\n")
        assert eventually(lambda: kube.labels(node)["nvidia.com/gpu.product"] == "ours")
        assert owned(kube, node) == "nvidia.com/gpu.product"


def test_owned_drift_is_repaired_foreign_edits_ignored(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node(dict(THEIRS))
    with ThreadWriter(kube, tmp_path, node) as w:
        w.write("nvidia.com/gpu.count=2\nnvidia.com/mig.capable=false\n")
        want = {"nvidia.com/gpu.count": "2", "nvidia.com/mig.capable": "false"}
        assert eventually(lambda: ours(kube, node) == want)
        kube.patch_node(
            node, {"metadata": {"labels": {"nvidia.com/gpu.count": "99", "nvidia.com/mig.capable": None}}}
        )
        assert eventually(lambda: ours(kube, node) == want)
        patches = [e for e in w.requests() if e["verb"] == "patch"]
        syncs = w.syncs()
        kube.patch_node(node, {"metadata": {"labels": {"team.example.com/owner": "infra"}}})
        assert eventually(lambda: w.syncs() > syncs), "the watch delivered the foreign edit"
        assert [e for e in w.requests() if e["verb"] == "patch"] == patches


def test_steady_state_makes_no_writes_and_no_reads(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node()
    with ThreadWriter(kube, tmp_path, node, resync_interval=1.0) as w:
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "2"})
        assert eventually(lambda: any(e["verb"] == "watch" for e in w.requests()))
        w.settle()
        before = w.requests()
        w.write("nvidia.com/gpu.count=2\n")  # the same content again
        w.settle()
        w.settle()  # and a periodic rescan
        assert w.requests() == before


def test_start_up_keeps_owned_labels_until_files_are_seen(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node({"nvidia.com/gpu.old": "1"})
    kube.patch_node(node, {"metadata": {"annotations": {OWNED_ANNOTATION: "nvidia.com/gpu.old"}}})
    with ThreadWriter(kube, tmp_path, node, startup_grace=3600.0) as w:
        assert eventually(lambda: w.service.synced)
        assert ours(kube, node) == {"nvidia.com/gpu.old": "1"}
        w.write("nvidia.com/gpu.new=1\n")
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.new": "1"})


def test_a_feature_directory_created_late_is_picked_up(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node()
    late = tmp_path / "late.d"
    with ThreadWriter(kube, tmp_path, node, directory=late) as w:
        assert eventually(lambda: w.service.synced)
        late.mkdir()
        (late / "x").write_text("nvidia.com/gpu.late=1\n")
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.late": "1"})
        late.rename(tmp_path / "late.d.old")
        late.mkdir()
        (late / "x").write_text("nvidia.com/gpu.late=2\n")
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.late": "2"})


def test_a_refusal_by_the_policy_is_one_line_naming_it(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A token for another node (a pod moved, a misconfigured NODE_NAME): the policy refuses every write,
    and the log says which policy and why, once."""
    node, elsewhere = new_node(), new_node()
    with ThreadWriter(kube, tmp_path, node, token=kube.pod_token(elsewhere)) as w:
        w.write("nvidia.com/gpu.count=1\n")
        assert eventually(lambda: w.metric("nfd_lite_api_errors_total", code="403") >= 2)
    assert "nvidia.com/gpu.count" not in kube.labels(node)
    refusals = [r.getMessage() for r in caplog.records if "admission policy refused" in r.getMessage()]
    assert len(refusals) == 1, refusals
    assert "may only change its own Node" in refusals[0]
