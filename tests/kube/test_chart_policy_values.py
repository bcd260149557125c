"""The chart's admission policy with hostile values, rendered past the schema (``--skip-schema-validation``)
and enforced by a real kube-apiserver: no value can end a CEL string literal and widen the policy."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from nfd_lite.node.reconciler import OWNED_ANNOTATION
from tests.deploy.chart import API_SERVER, NAMESPACE, by_kind, documents, merged, render
from tests.kube.controlplane import ControlPlane
from tests.kube.helm import TOOLS

POLICY = "ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite'"
# Each would close the CEL string literal it is put in: the first makes the prefix list [''] (every key
# starts with the empty prefix) and keeps every other expression valid, the others break the YAML.
HOSTILE = ["' + '", "nvidia.com/\\', '", 'nvidia.com/", "']
KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of its own: the shipped policy of the session's would refuse regardless."""
    with ControlPlane(tmp_path_factory.mktemp("hostile")) as kube:
        kube.ensure_namespace(NAMESPACE)
        yield kube


@pytest.mark.parametrize("prefix", HOSTILE)
def test_a_quote_in_allow_prefixes_cannot_widen_the_policy(
    plane: ControlPlane, tmp_path: Path, prefix: str
) -> None:
    values = merged(API_SERVER, {"nfdLite": {"allowPrefixes": [prefix]}})
    docs = documents(render(TOOLS, "helm4", values, tmp_path, "--skip-schema-validation"))
    objects = [d for kind in KINDS for d in by_kind(docs, kind)]
    binding = by_kind(docs, "ValidatingAdmissionPolicyBinding")
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(binding))
    plane.settle_policies()
    node = f"gpu-{os.urandom(4).hex()}"
    plane.create_node(node, {"kubernetes.io/hostname": node})
    token = plane.pod_token(node)
    # Enforced (the server loads a policy asynchronously) once a foreign annotation is refused.
    for _ in range(240):
        probe = plane.request(
            "PATCH",
            f"/api/v1/nodes/{node}?dryRun=All",
            {"metadata": {"annotations": {"example.com/x": "1"}}},
            token=token,
            content_type="application/merge-patch+json",
        )
        if probe.status == 403 and POLICY in probe.message:
            break
        time.sleep(0.25)
    else:
        raise AssertionError(f"the rendered policy was not enforced: {probe.status} {probe.message}")
    for key in ("kubernetes.io/hostname", "example.com/evil"):
        answer = plane.patch_node(
            node, {"metadata": {"labels": {key: "evil"}, "annotations": {OWNED_ANNOTATION: key}}}, token=token
        )
        assert answer.status == 403 and POLICY in answer.message, (key, answer.status, answer.message)
    assert plane.labels(node) == {"kubernetes.io/hostname": node}
