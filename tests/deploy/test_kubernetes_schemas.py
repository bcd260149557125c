"""Every rendered manifest is valid against the Kubernetes OpenAPI schemas (strict: no unknown fields), for
the oldest Kubernetes the chart admits (Chart.yaml kubeVersion >= 1.30) and the newest schema available."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from tests.deploy.chart import CHART, MATRIX, documents

OLDEST = "1.30.0"
NEWEST = latest_version()
# Custom resources have no built-in schema; the ServiceMonitor is checked for shape in test_chart.
NO_SCHEMA = {("monitoring.coreos.com/v1", "ServiceMonitor")}


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
