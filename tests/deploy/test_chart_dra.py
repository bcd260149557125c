"""The chart's DRA mode, rendered by the real helm 3 and 4 for Kubernetes 1.37: gfd gets the node's GPUs
through an admin-access ResourceClaim instead of the nvidia RuntimeClass and writes the DRA label set; the
pod still meets Pod Security `restricted`; the writer's container is the same as in the default mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate.utils import latest_version

from tests.deploy.chart import (
    API_SERVER,
    CHART,
    HELMS,
    Tools,
    containers,
    documents,
    merged,
    one,
    render,
    run_helm,
)
from tests.deploy.pss import level
from tests.deploy.test_checkov import assert_clean, checkov

KUBE = ("--kube-version", "1.37.0")
DRA = merged(API_SERVER, {"dra": {"enabled": True}})
TEMPLATE = "gpu-labeller-gpus"


@pytest.fixture(scope="module")
def dra(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """helm -> the DRA mode's documents."""
    return {
        which: documents(render(tools, which, DRA, tmp_path_factory.mktemp(which), *KUBE)) for which in HELMS
    }


def pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def test_helm3_and_helm4_render_the_same(dra: dict[str, list[dict[str, Any]]]) -> None:
    assert dra["helm3"] == dra["helm4"]


def test_gfd_gets_every_gpu_through_an_admin_access_claim_not_the_runtime_class(
    dra: dict[str, list[dict[str, Any]]],
) -> None:
    docs = dra["helm3"]
    template = one(docs, "ResourceClaimTemplate")
    assert template["apiVersion"] == "resource.k8s.io/v1"
    assert template["metadata"]["name"] == TEMPLATE
    assert template["metadata"]["namespace"] == "gpu-labeller"
    assert template["spec"] == {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "allocationMode": "All",
                            "adminAccess": True,
                        },
                    }
                ]
            }
        }
    }
    spec = pod(docs)
    assert "runtimeClassName" not in spec
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": TEMPLATE}]
    gfd = containers(docs)["gfd"]
    assert gfd["resources"]["claims"] == [{"name": "gpus"}]
    assert gfd["resources"]["limits"] == {"cpu": "200m", "memory": "128Mi"}
    assert "env" not in gfd, "no NVIDIA_VISIBLE_DEVICES: the claim's devices are what gfd gets"
    assert "--label-set=dra" in gfd["args"]


def test_still_restricted_and_the_writer_unchanged(
    dra: dict[str, list[dict[str, Any]]], rendered: dict[tuple[str, str], str]
) -> None:
    assert level(pod(dra["helm3"])) == "restricted"
    default = documents(rendered["helm3", "defaults"])
    assert containers(dra["helm3"])["nfd-lite"] == containers(default)["nfd-lite"]
    assert "--label-set=device-plugin" in containers(default)["gfd"]["args"]
    nfd_lite = containers(dra["helm3"])["nfd-lite"]
    assert "claims" not in nfd_lite["resources"]


def test_manifests_validate_strictly_against_kubernetes_1_37(dra: dict[str, list[dict[str, Any]]]) -> None:
    checked = set()
    for doc in dra["helm3"]:
        if doc["kind"] == "ServiceMonitor":
            continue
        kubernetes_validate.validate(doc, latest_version(), strict=True)
        checked.add(doc["kind"])
    assert {"ResourceClaimTemplate", "DaemonSet"} <= checked


@pytest.mark.parametrize("which", HELMS)
def test_refuses_kubernetes_without_resource_k8s_io_v1(tools: Tools, tmp_path: Path, which: str) -> None:
    proc = run_helm(
        tools,
        which,
        "template",
        "gl",
        "charts/gpu-labeller",
        "--kube-version",
        "1.33.0",
        values=DRA,
        tmp=tmp_path,
    )
    assert proc.returncode != 0
    assert "dra.enabled needs Kubernetes >= 1.34 (resource.k8s.io/v1), not v1.33.0" in proc.stderr


@pytest.mark.parametrize("which", HELMS)
def test_an_explicit_label_set_wins_and_the_args_are_gfds(tools: Tools, tmp_path: Path, which: str) -> None:
    from gfd.config import load_settings

    values = merged(DRA, {"gfd": {"labelSet": "device-plugin"}})
    gfd = containers(documents(render(tools, which, values, tmp_path, *KUBE)))["gfd"]
    assert load_settings(gfd["args"], {}).label_set == "device-plugin"
    dra_gfd = containers(documents(render(tools, which, DRA, tmp_path, *KUBE)))["gfd"]
    assert load_settings(dra_gfd["args"], {}).label_set == "dra"


@pytest.mark.parametrize("which", HELMS)
def test_lint_strict(tools: Tools, tmp_path: Path, which: str) -> None:
    proc = run_helm(tools, which, "lint", "--strict", str(CHART), *KUBE, values=DRA, tmp=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_checkov_passes_the_dra_mode(
    tools: Tools, dra: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    out = tmp_path / "rendered"
    out.mkdir()
    (out / "dra.yaml").write_text(render(tools, "helm3", DRA, tmp_path, *KUBE))
    assert_clean(checkov(tools, tmp_path, "kubernetes", "-d", str(out)), minimum_passed=100)
