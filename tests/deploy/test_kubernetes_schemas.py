"""Every rendered manifest is valid against the Kubernetes OpenAPI schemas (strict: no unknown fields), for
the oldest Kubernetes the chart admits (Chart.yaml kubeVersion >= 1.30) and the newest schema available."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from tests.deploy.chart import CHART, MATRIX, documents
from tests.deploy.cni_policies import (
    CALICO,
    CILIUM,
    PROMETHEUS_RULE,
    SERVICE_MONITOR,
    pinned,
    validation_errors,
)

OLDEST = "1.30.0"
NEWEST = latest_version()
# Custom resources have no built-in schema: they are checked against their projects' published CRDs below.
NO_SCHEMA = {SERVICE_MONITOR, PROMETHEUS_RULE, CILIUM, CALICO}


def test_oldest_is_what_the_chart_claims() -> None:
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"] == ">=1.30.0-0"


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("entry", sorted(MATRIX))
def test_manifests_validate_strictly(rendered: dict[tuple[str, str], str], entry: str, version: str) -> None:
    docs = documents(rendered["helm3", entry])
    checked = 0
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in NO_SCHEMA:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} invalid for {version}: {err.message}")
        checked += 1
    assert checked >= 5  # SA, ClusterRole, binding, DaemonSet, NetworkPolicy, test Pod at least


def test_strict_validation_catches_a_misspelt_field(rendered: dict[tuple[str, str], str]) -> None:
    ds = next(d for d in documents(rendered["helm3", "defaults"]) if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, OLDEST, strict=True)


@pytest.mark.parametrize(("entry", "kind"), [("cilium", CILIUM), ("calico", CALICO)])
def test_cni_policies_validate_against_their_projects_schemas(
    rendered: dict[tuple[str, str], str], entry: str, kind: tuple[str, str]
) -> None:
    (policy,) = [d for d in documents(rendered["helm3", entry]) if (d["apiVersion"], d["kind"]) == kind]
    assert validation_errors(policy) == []
    source = pinned(kind)["source"]
    assert source["sum"].startswith("h1:") and len(source["sha256"]) == 64  # where the schema came from


@pytest.mark.parametrize("kind", [SERVICE_MONITOR, PROMETHEUS_RULE])
def test_monitoring_resources_validate_against_the_prometheus_operators_schemas(
    rendered: dict[tuple[str, str], str], kind: tuple[str, str]
) -> None:
    (obj,) = [
        d for d in documents(rendered["helm3", "everything-on"]) if (d["apiVersion"], d["kind"]) == kind
    ]
    assert validation_errors(obj) == []
    broken = copy.deepcopy(obj)
    if kind == PROMETHEUS_RULE:
        broken["spec"]["groups"][0]["rules"][0]["for"] = 300  # a duration is a string
    else:
        broken["spec"]["endpoints"][0]["relabelings"][0]["sourceLabel"] = ["x"]  # sourceLabels
    assert validation_errors(broken), "the pinned schema must refuse it"


@pytest.mark.parametrize(
    ("entry", "kind", "break_it", "said"),
    [
        (
            "cilium",
            CILIUM,
            lambda s: s["egress"][0].update(toEntities=["apiserver"]),
            "'apiserver' is not one of",
        ),
        (
            "cilium",
            CILIUM,
            lambda s: s["egress"][0].update(toEntity=["kube-apiserver"]),
            "'toEntity' was unexpected",
        ),
        (
            "calico",
            CALICO,
            lambda s: s["egress"][0]["destination"].update(services="kubernetes"),
            "not of type",
        ),
        ("calico", CALICO, lambda s: s.update(type=["Egress"]), "'type' was unexpected"),
    ],
)
def test_the_cni_schema_check_catches_what_the_cni_would_refuse(
    rendered: dict[tuple[str, str], str],
    entry: str,
    kind: tuple[str, str],
    break_it: Callable[[dict[str, Any]], None],
    said: str,
) -> None:
    (policy,) = [d for d in documents(rendered["helm3", entry]) if (d["apiVersion"], d["kind"]) == kind]
    break_it(policy["spec"])
    assert any(said in error for error in validation_errors(policy)), validation_errors(policy)
