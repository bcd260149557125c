"""The admission self-check against the real kube-apiserver, newest and oldest (1.30): the previous policy
of the same name, without the managedFields rules, fails the check (only the forged managedFields entry
tells it from the current one), and a binding deleted while the writer runs turns /readyz unready and
nfd_lite_admission_policy_enforced to 0 within the re-check interval, and ready again once it is back.
The same against the fake API server: tests/nfd_lite/node/test_selfcheck.py and
tests/nfd_lite/test_admission_recheck.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nfd_lite.node.selfcheck import MANAGED_FIELDS, OTHER_NODES, RESERVED_LABELS, TAINTS
from tests.kube.controlplane import BINARIES, OLDEST_BINARIES, ControlPlane, free_port
from tests.kube.fixtures import RBAC_DIR, RELEASES, apply_rbac
from tests.kube.writer import PodWriter, eventually

POLICY = "gpu-labeller-nfd-lite"
OWN, OTHER = "gpu-fenced", "gpu-neighbour"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
PREVIOUS = (
    Path(__file__).resolve().parents[1] / "fixtures/policies/admission-policy-without-managed-fields.yaml"
)
ENFORCED = "nfd_lite_admission_policy_enforced"


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own (its policy and binding are replaced here), with the writer's
    Node, created with labels as a kubelet's is (so it has managedFields), and one other."""
    binaries = BINARIES if request.param == "newest" else OLDEST_BINARIES
    with ControlPlane(tmp_path_factory.mktemp(f"selfcheck-{request.param}"), binaries) as kube:
        apply_rbac(kube)
        kube.create_node(OWN, {"kubernetes.io/hostname": OWN})
        kube.create_node(OTHER, {"kubernetes.io/hostname": OTHER})
        yield kube


def _forged_entry_admitted(kube: ControlPlane, token: str) -> bool:
    """Whether a dry run adding another manager's managedFields entry to OWN is admitted: what tells the
    previous policy from the current one."""
    entries = kube.get_node(OWN)["metadata"]["managedFields"]
    forged = {
        "manager": "someone-else",
        "operation": "Apply",
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.count": {}}}},
    }
    answer = kube.request(
        "PATCH",
        f"/api/v1/nodes/{OWN}?dryRun=All",
        {"metadata": {"managedFields": [*entries, forged]}},
        token=token,
        content_type="application/merge-patch+json",
    )
    return answer.status == 200


def _versions(kube: ControlPlane) -> dict[str, str]:
    nodes = kube.must("GET", "/api/v1/nodes")["items"]
    return {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in nodes}


@pytest.mark.parametrize("plane", RELEASES, indirect=True)
def test_the_previous_policy_of_the_same_name_fails_the_check(plane: ControlPlane, tmp_path: Path) -> None:
    kube = plane
    token = kube.pod_token(OWN)
    assert not _forged_entry_admitted(kube, token), "the current policy admits a forged managedFields entry"
    try:
        kube.apply_policies(PREVIOUS.read_text())
        assert eventually(lambda: _forged_entry_admitted(kube, token), timeout=60, interval=0.25)
        before = _versions(kube)
        writer = PodWriter(kube, tmp_path, OWN, "--oneshot")
        with writer:
            assert writer.process is not None
            status = writer.process.wait(60)
        output = writer.output()
        assert status == 2, output
        assert f"{MANAGED_FIELDS} are not refused: a managedFields entry of manager " in output, output
        assert f"on this Node ({OWN}) was admitted" in output
        for held in (OTHER_NODES, RESERVED_LABELS, TAINTS):
            assert f"{held} are not refused" not in output, "the previous policy holds those"
        assert _versions(kube) == before, "a probe was stored"
    finally:
        apply_rbac(kube)
        kube.delete_node("gpu-third")  # the current policy again (and settled) for the next test


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""  # not listening yet


def _enforced(port: int) -> float | None:
    status, text = _get(port, "/metrics")
    for line in text.splitlines() if status == 200 else []:
        if line.startswith(ENFORCED + " "):
            return float(line.split()[1])
    return None


def _binding() -> dict[str, Any]:
    documents = yaml.safe_load_all((RBAC_DIR / "admission-policy.yaml").read_text())
    binding: dict[str, Any] = next(
        d for d in documents if d and d["kind"] == "ValidatingAdmissionPolicyBinding"
    )
    return binding


# Only the newest: below 1.37 a writer's request evaluated while the server recompiles its policies can
# kill kube-apiserver (docs/deploy.md), and this writer keeps checking while the binding changes.
@pytest.mark.parametrize("plane", ["newest"], indirect=True)
def test_a_binding_deleted_under_the_running_writer_makes_it_unready_until_restored(
    plane: ControlPlane, tmp_path: Path
) -> None:
    kube = plane
    port = free_port()
    interval = "3"
    # A third Node: the check's list of two counts the rest from the server's remainingItemCount.
    kube.create_node("gpu-third", {"kubernetes.io/hostname": "gpu-third"})
    writer = PodWriter(
        kube, tmp_path, OWN, "--metrics-address", f"127.0.0.1:{port}", "--admission-check-interval", interval
    )
    writer.write("nvidia.com/gpu.count=2\n")
    try:
        with writer:
            assert eventually(lambda: _get(port, "/readyz") == (200, "ok\n"), timeout=60), writer.output()
            assert _enforced(port) == 1
            assert kube.labels(OWN).get("nvidia.com/gpu.count") == "2"
            # Each of the N Nodes' writers checks about every N intervals: the fleet about once per interval.
            # N > 2: counted from the list of two and its remainingItemCount.
            nodes = len(kube.must("GET", "/api/v1/nodes")["items"])
            assert nodes > 2
            said = f"checked again in about {3 * nodes} s ({nodes} Nodes share the checks)"
            assert said in writer.output()

            kube.must("DELETE", f"{BINDINGS}/{POLICY}")
            kube.settle_policies()
            assert eventually(lambda: _get(port, "/readyz")[0] == 503, timeout=60), writer.output()
            _, body = _get(port, "/readyz")
            assert body.startswith(f"not ok: the admission policy '{POLICY}' is not enforced: "), body
            assert body.count("\n") == 1 and MANAGED_FIELDS in body and TAINTS in body
            assert _enforced(port) == 0
            # Its own labels are as right as ever: the writer goes on writing them.
            writer.write("nvidia.com/gpu.count=4\n")
            assert eventually(lambda: kube.labels(OWN).get("nvidia.com/gpu.count") == "4", timeout=30)
            lines = [line for line in writer.output().splitlines() if "no longer fences this writer" in line]
            assert len(lines) == 1, writer.output()

            kube.apply_policies(json.dumps(_binding()))
            assert eventually(lambda: _get(port, "/readyz") == (200, "ok\n"), timeout=60), writer.output()
            assert _enforced(port) == 1
            assert f"the admission policy '{POLICY}' fences this writer again" in writer.output()
    finally:
        apply_rbac(kube)
        kube.delete_node("gpu-third")
