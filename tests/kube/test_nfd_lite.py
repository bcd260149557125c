"""nfd-lite in its own process with a real pod-bound token, against the real kube-apiserver with rbac/
applied: labels appear, change, expire and go; drift is repaired through the own-node watch; a restart does
not flap labels; prune removes only what it owns; an expired watch (410) is re-established."""

from __future__ import annotations

import copy
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from nfd_lite.api.client import NodeApi
from nfd_lite.api.errors import Gone
from nfd_lite.api.kubeconfig import kubeconfig_connection
from nfd_lite.node.reconciler import OWNED_ANNOTATION
from nfd_lite.node.selfcheck import OTHER_NODES, RESERVED_LABELS, TAINTS
from nfd_lite.service import Service
from nfd_lite.settings import WriterSettings
from tests.kube.controlplane import OLDEST_BINARIES, ApiResponse, ControlPlane
from tests.kube.fixtures import RBAC_DIR, apply_rbac
from tests.kube.writer import WRITER_USER, PodWriter, eventually, in_pod

THEIRS = {"team.example.com/owner": "ml", "nvidia.com/gpu.product": "set-by-admin"}


def ours(kube: ControlPlane, node: str) -> dict[str, str]:
    return {
        k: v
        for k, v in kube.labels(node).items()
        if k.startswith(("nvidia.com/", "feature.node.kubernetes.io/")) and k not in THEIRS
    }


def owned(kube: ControlPlane, node: str) -> str | None:
    return kube.annotations(node).get(OWNED_ANNOTATION)


def test_labels_appear_change_expire_and_go(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node(dict(THEIRS))
    with PodWriter(kube, tmp_path, node) as w:
        w.write("nvidia.com/gpu.count=2\ngpu.present\n")
        assert eventually(
            lambda: (
                ours(kube, node)
                == {"nvidia.com/gpu.count": "2", "feature.node.kubernetes.io/gpu.present": "true"}
            )
        ), w.output()
        assert owned(kube, node) == "feature.node.kubernetes.io/gpu.present,nvidia.com/gpu.count"
        w.write("nvidia.com/gpu.count=4\n")
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "4"}), w.output()
        soon = (datetime.now(UTC) + timedelta(seconds=3)).isoformat(timespec="milliseconds")
        w.write(f"nvidia.com/gpu.count=4\n# +expiry-time={soon}\nnvidia.com/gpu.lease=1\n")
        assert eventually(lambda: "nvidia.com/gpu.lease" in ours(kube, node)), w.output()
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "4"}), w.output()
        (w.dir / "gfd").unlink()
        assert eventually(lambda: ours(kube, node) == {}), w.output()
        assert eventually(lambda: owned(kube, node) is None)
    labels = kube.labels(node)
    assert {k: labels[k] for k in THEIRS} == THEIRS


# With --resync-interval 3600 only the watch can repair drift within a test, so a lost event fails the test
# whatever this deadline; it covers the writer's longest legitimate wait on a loaded machine (a watch
# re-established after failures waits up to its 30 s back-off), which the default 20 s did not.
WATCH_REPAIR = 60.0


def _writer_trail(kube: ControlPlane, node: str, w: PodWriter) -> str:
    """The writer's log and its requests of this Node as the server saw them: on a failure, whether its
    watch was open and what its patches were answered."""
    lines = [
        f"{e['stageTimestamp']} {e['verb']} {e['requestURI']} -> {e.get('responseStatus', {}).get('code')}"
        for e in kube.requests(WRITER_USER)
        if f"/nodes/{node}" in e["requestURI"] or f"metadata.name%3D{node}" in e["requestURI"]
    ]
    return w.output() + "\n" + "\n".join(lines)


def test_drift_is_repaired_through_the_watch(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node()
    with PodWriter(kube, tmp_path, node, "--resync-interval", "3600") as w:
        w.write("nvidia.com/gpu.count=2\n")
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "2"}), w.output()
        kube.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.count": "7"}}})
        repaired = eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "2"}, timeout=WATCH_REPAIR)
        assert repaired, _writer_trail(kube, node, w)
        kube.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.count": None}}})
        repaired = eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "2"}, timeout=WATCH_REPAIR)
        assert repaired, _writer_trail(kube, node, w)


def test_a_restart_does_not_flap_labels(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node()
    first = PodWriter(kube, tmp_path, node)
    with first:
        first.write("nvidia.com/gpu.count=2\nnvidia.com/gpu.memory=40960\n")
        assert eventually(lambda: len(ours(kube, node)) == 2), first.output()
    assert first.process is not None and first.process.returncode == 0
    version = kube.get_node(node)["metadata"]["resourceVersion"]
    assert len(ours(kube, node)) == 2, "labels stay when the writer stops"
    with PodWriter(kube, tmp_path, node, "--oneshot") as again:
        assert again.process is not None
        assert again.process.wait(30) == 0, again.output()
    assert kube.get_node(node)["metadata"]["resourceVersion"] == version, (
        "an unchanged restart writes nothing"
    )


def test_prune_removes_only_what_it_owns(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node(dict(THEIRS))
    with PodWriter(kube, tmp_path, node) as w:
        w.write("nvidia.com/gpu.count=2\nnvidia.com/gpu.memory=40960\n")
        assert eventually(lambda: len(ours(kube, node)) == 2), w.output()
    command, env = in_pod(kube, tmp_path, node, ["prune"])
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "removed 2 owned labels" in result.stdout
    assert ours(kube, node) == {}
    assert owned(kube, node) is None
    labels = kube.labels(node)
    assert {k: labels[k] for k in THEIRS} == THEIRS


# ---- a refusal naming some labels holds just those back ----

WIDER = ["--allow-prefix", "nvidia.com/", "--allow-prefix", "example.com/", "--allow-key", "example.com/*"]


def test_labels_the_policy_refuses_do_not_freeze_the_others(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    """The writer allows example.com/, the policy (rbac/ as shipped) does not: the policy refuses the patch
    naming example.com/rack, and the writer still sets and updates its other labels."""
    node = new_node()
    with PodWriter(kube, tmp_path, node, *WIDER) as w:
        w.write("nvidia.com/gpu.count=2\nexample.com/rack=r1\n")
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "2"}), w.output()
        assert owned(kube, node) == "nvidia.com/gpu.count"
        w.write("nvidia.com/gpu.count=4\nexample.com/rack=r1\n")
        assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "4"}), w.output()
        assert "example.com/rack" not in kube.labels(node)
    said = [line for line in w.output().splitlines() if "the admission policy refused" in line]
    assert len(said) == 1 and "refused 1 (example.com/rack)" in said[0], w.output()


LOCKED = "nvidia.com/gpu.locked"
SITE_POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "site-locked-label"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
            ]
        },
        "matchConditions": [
            {"name": "writer", "expression": f"request.userInfo.username == '{WRITER_USER}'"}
        ],
        "validations": [
            {
                "expression": f"!('{LOCKED}' in oldObject.metadata.?labels.orValue({{}}))"
                f" || '{LOCKED}' in object.metadata.?labels.orValue({{}})",
                "message": f"{LOCKED} is locked by the site and may not be removed",
                "reason": "Forbidden",
            }
        ],
    },
}
SITE_BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "site-locked-label"},
    "spec": {"policyName": "site-locked-label", "validationActions": ["Deny"]},
}


def test_prune_removes_what_it_may_and_names_what_a_policy_keeps(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    """A site's own policy keeps one label the writer owns: prune removes the rest, says which label stayed
    and why, exits 1, and the label stays recorded as owned."""
    node = new_node(dict(THEIRS))
    with PodWriter(kube, tmp_path, node) as w:
        w.write(f"nvidia.com/gpu.count=2\n{LOCKED}=1\n")
        assert eventually(lambda: len(ours(kube, node)) == 2), w.output()
    token = kube.pod_token(node)
    _apply(kube, SITE_POLICY, SITE_BINDING)
    try:
        removal = {
            "metadata": {"labels": {LOCKED: None}, "annotations": {OWNED_ANNOTATION: "nvidia.com/gpu.count"}}
        }
        _until(
            lambda: "is locked by the site" in _dry_run(kube, node, removal, token).message, "lock the label"
        )
        command, env = in_pod(kube, tmp_path, node, ["prune"])
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    finally:
        kube.request("DELETE", f"{BINDINGS}/site-locked-label")
        kube.request("DELETE", f"{POLICIES}/site-locked-label")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "removed 1 owned labels" in result.stdout
    (error,) = result.stderr.strip().splitlines()
    assert f"refused removing {LOCKED}" in error and "is locked by the site" in error
    assert ours(kube, node) == {LOCKED: "1"}
    assert owned(kube, node) == LOCKED
    labels = kube.labels(node)
    assert {k: labels[k] for k in THEIRS} == THEIRS


@pytest.fixture(scope="module")
def restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own, so restarting its API server disturbs no other test."""
    with ControlPlane(tmp_path_factory.mktemp("restartable")) as plane:
        apply_rbac(plane)
        yield plane


def test_an_expired_watch_is_listed_again(restartable: ControlPlane, tmp_path: Path) -> None:
    """After an API server restart its watch cache begins at the current resourceVersion, so a writer
    resuming its watch from where it was answers 410 Gone: it must list again and carry on watching."""
    kube = restartable
    node = "gpu-restart"
    kube.create_node(node)
    config = kubeconfig_connection(kube.kubeconfig(tmp_path / "kubeconfig", kube.pod_token(node)))
    api = NodeApi(config, node, request_timeout=5.0)
    try:
        _, stale = api.list_node()
        for n in range(3):
            kube.patch_node(node, {"metadata": {"labels": {"example.com/churn": str(n)}}})
        kube.restart_apiserver()
        apply_rbac(kube)  # waits until the restarted server enforces the policy again
        with pytest.raises(Gone):
            next(iter(api.watch(stale, 5)))

        features = tmp_path / "features.d"
        features.mkdir()
        (features / "gfd").write_text("nvidia.com/gpu.count=3\n")
        settings = WriterSettings(
            node, [features], startup_grace=0.0, max_backoff=0.5, resync_interval=3600, request_timeout=5.0
        )
        service = Service(settings, config)
        # As after the restart: the next watch starts from an expired version.
        service.watch.resource_version = stale
        runner = threading.Thread(target=service.run, daemon=True)
        runner.start()
        try:
            assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "3"})
            assert eventually(lambda: service.watch.resource_version not in (None, stale))
            kube.patch_node(node, {"metadata": {"labels": {"nvidia.com/gpu.count": "0"}}})
            assert eventually(lambda: ours(kube, node) == {"nvidia.com/gpu.count": "3"}), "watch is back"
        finally:
            service.stop()
            runner.join(10)
    finally:
        api.close()


def test_the_writer_works_on_the_oldest_supported_kubernetes(tmp_path: Path) -> None:
    """1.30: its self-check finds the policy enforced, and a one-shot sync labels the node."""
    with ControlPlane(tmp_path / "oldest", OLDEST_BINARIES) as kube:
        apply_rbac(kube)
        node = "gpu-oldest"
        kube.create_node(node)
        writer = PodWriter(kube, tmp_path, node, "--oneshot")
        writer.write("nvidia.com/gpu.count=2\n")
        with writer:
            assert writer.process is not None
            assert writer.process.wait(60) == 0, writer.output()
        assert ours(kube, node) == {"nvidia.com/gpu.count": "2"}
        assert kube.get_node(node)["metadata"]["annotations"][OWNED_ANNOTATION] == "nvidia.com/gpu.count"


def test_on_1_30_the_policy_changes_safely_while_the_writers_are_paused(tmp_path: Path) -> None:
    """kube-apiserver 1.30 shares one CEL type of every policy's variables between compiling a changed
    policy and evaluating it (kubernetes/kubernetes#135757; 1.37 compiles each policy on its own): a policy
    change while the writer's patches are evaluated can crash the server (concurrent map read and map
    write). The documented procedure pauses the writers first. Other clients' Node updates only meet the
    policy's matchConditions, not its variables: the server survives repeated changes under them, and the
    writer resumed afterwards syncs against the changed policy."""
    with ControlPlane(tmp_path / "oldest", OLDEST_BINARIES) as kube:
        apply_rbac(kube)
        node = "gpu-paused"
        kube.create_node(node)
        policy = _shipped_policy()
        stop = threading.Event()

        def kubelet_like() -> None:  # node status updates go on during the change
            while not stop.is_set():
                patch = {"metadata": {"labels": {"example.com/heartbeat": str(time.monotonic_ns())}}}
                kube.request(
                    "PATCH",
                    f"/api/v1/nodes/{node}/status?dryRun=All",
                    patch,
                    content_type="application/merge-patch+json",
                )

        others = [threading.Thread(target=kubelet_like, daemon=True) for _ in range(2)]
        for thread in others:
            thread.start()
        try:
            for n in range(40):  # on 1.30.14 two writers patching crashed it within 17 such changes
                changed = copy.deepcopy(policy)
                changed["spec"]["validations"][0]["message"] += f" (change {n})"
                _apply(kube, changed)
                assert kube.apiserver.poll() is None, "kube-apiserver exited"
                time.sleep(0.2)
        finally:
            stop.set()
            for thread in others:
                thread.join(10)
        log = (kube.logs / "kube-apiserver.log").read_text(errors="replace")
        assert kube.apiserver.poll() is None and "concurrent map" not in log
        apply_rbac(kube)  # the shipped policy again, enforced, before the writer resumes
        writer = PodWriter(kube, tmp_path, node, "--oneshot")
        writer.write("nvidia.com/gpu.count=2\n")
        with writer:
            assert writer.process is not None
            assert writer.process.wait(60) == 0, writer.output()
        assert ours(kube, node) == {"nvidia.com/gpu.count": "2"}


# ---- the start-up self-check against policies that do not (or not all) fence the writer ----

POLICY_NAME = "gpu-labeller-nfd-lite"
OWN, OTHER = "gpu-checked", "gpu-bystander"
POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
# A policy of someone else's that, like ours, refuses annotations the writer does not own.
UNRELATED = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "site-annotation-guard"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
            ]
        },
        "validations": [
            {
                "expression": "!object.metadata.?annotations.orValue({}).exists(k,"
                " k.startsWith('gpu-labeller.io/') && k != 'gpu-labeller.io/owned-labels')",
                "message": "only the site's tooling may set gpu-labeller.io annotations",
                "reason": "Forbidden",
            }
        ],
    },
}
UNRELATED_BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "site-annotation-guard"},
    "spec": {"policyName": "site-annotation-guard", "validationActions": ["Deny"]},
}


@pytest.fixture(scope="module")
def replaceable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own, whose admission policies the tests below replace, with the
    writer's Node and one other."""
    with ControlPlane(tmp_path_factory.mktemp("replaceable")) as plane:
        apply_rbac(plane)
        plane.create_node(OWN)
        plane.create_node(OTHER, {"team.example.com/owner": "ml"})
        yield plane


def _shipped_policy() -> dict[str, Any]:
    documents = [d for d in yaml.safe_load_all((RBAC_DIR / "admission-policy.yaml").read_text()) if d]
    policy: dict[str, Any] = next(d for d in documents if d["kind"] == "ValidatingAdmissionPolicy")
    return policy


def _without_node_rules(policy: dict[str, Any]) -> dict[str, Any]:
    """The policy with every validation that ties the token to its Node (name or uid claim) deleted."""
    changed = copy.deepcopy(policy)
    validations = changed["spec"]["validations"]
    changed["spec"]["validations"] = [v for v in validations if "variables.tokenNode" not in v["expression"]]
    assert len(changed["spec"]["validations"]) < len(validations)
    return changed


def _apply(kube: ControlPlane, *documents: dict[str, Any]) -> None:
    kube.apply_policies("\n---\n".join(json.dumps(d) for d in documents))


def _dry_run(kube: ControlPlane, node: str, patch: dict[str, Any], token: str) -> ApiResponse:
    return kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}?dryRun=All",
        patch,
        token=token,
        content_type="application/merge-patch+json",
    )


def _until(check: Callable[[], bool], what: str) -> None:
    """Wait for the server to load a changed policy (asynchronously, within seconds)."""
    assert eventually(check, timeout=60, interval=0.25), f"the server did not come to {what} within 60 s"


# A label as the writer creates it: recorded in its ownership annotation, so only the node rules decide.
LABEL_ON_OTHER = {
    "metadata": {
        "labels": {"nvidia.com/gpu.count": "9"},
        "annotations": {"gpu-labeller.io/owned-labels": "nvidia.com/gpu.count"},
    }
}
OLD_PROBE = {"metadata": {"annotations": {"gpu-labeller.io/admission-probe": "must-be-refused"}}}


def _versions(kube: ControlPlane) -> dict[str, str]:
    nodes = kube.must("GET", "/api/v1/nodes")["items"]
    return {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in nodes}


def _start(kube: ControlPlane, tmp_path: Path) -> tuple[int, str]:
    """The writer's one-shot run with nothing to write: its exit status and output."""
    writer = PodWriter(kube, tmp_path, OWN, "--oneshot")
    with writer:
        assert writer.process is not None
        status = writer.process.wait(60)
    return status, writer.output()


def test_the_shipped_policy_passes_the_check_and_no_probe_writes(
    replaceable: ControlPlane, tmp_path: Path
) -> None:
    kube = replaceable
    apply_rbac(kube)
    token = kube.pod_token(OWN)
    _until(
        lambda: _dry_run(kube, OTHER, LABEL_ON_OTHER, token).status == 403, "refuse a label on another Node"
    )
    before = _versions(kube)
    status, output = _start(kube, tmp_path)
    assert status == 0, output
    assert _versions(kube) == before, "a probe was stored"
    patches = [e for e in kube.requests(WRITER_USER) if e["verb"] == "patch"]
    assert patches and all("dryRun=All" in e["requestURI"] for e in patches), patches


def test_the_policy_without_its_node_rules_fails_the_check(replaceable: ControlPlane, tmp_path: Path) -> None:
    kube = replaceable
    apply_rbac(kube)
    _apply(kube, _without_node_rules(_shipped_policy()))
    token = kube.pod_token(OWN)
    _until(
        lambda: _dry_run(kube, OTHER, LABEL_ON_OTHER, token).status == 200, "admit a label on another Node"
    )
    before = _versions(kube)
    status, output = _start(kube, tmp_path)
    assert status == 2, output
    assert f"{OTHER_NODES} are not refused: a label on Node {OTHER} was admitted" in output, output
    for held in (RESERVED_LABELS, TAINTS):
        assert f"{held} are not refused" not in output, "the rest of the policy still holds"
    assert _versions(kube) == before, "a probe was stored"


def test_an_unrelated_policy_refusing_the_probe_does_not_pass_the_check(
    replaceable: ControlPlane, tmp_path: Path
) -> None:
    kube = replaceable
    kube.request("DELETE", f"{BINDINGS}/{POLICY_NAME}")
    kube.request("DELETE", f"{POLICIES}/{POLICY_NAME}")
    _apply(kube, UNRELATED, UNRELATED_BINDING)
    token = kube.pod_token(OWN)

    def loaded() -> bool:
        old = _dry_run(kube, OWN, OLD_PROBE, token)
        refused_by_it = old.status == 403 and "'site-annotation-guard'" in old.message
        return refused_by_it and _dry_run(kube, OTHER, LABEL_ON_OTHER, token).status == 200

    _until(loaded, "enforce only the unrelated policy")
    before = _versions(kube)
    try:
        status, output = _start(kube, tmp_path)
    finally:
        kube.request("DELETE", f"{BINDINGS}/site-annotation-guard")
        kube.request("DELETE", f"{POLICIES}/site-annotation-guard")
    assert status == 2, output
    for prop in (OTHER_NODES, RESERVED_LABELS, TAINTS):
        assert f"{prop} are not refused: " in output, output
    assert _versions(kube) == before, "a probe was stored"
