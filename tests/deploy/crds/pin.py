"""Pins the CustomResourceDefinitions of the custom resources the chart renders (Cilium's
CiliumNetworkPolicy, Calico's NetworkPolicy, the Prometheus Operator's ServiceMonitor and PrometheusRule)
as test data: taken from the projects' published Go modules through `go mod download` (the Go module
proxy, checksums checked against the checksum database), their schema kept whole but for the `description`
texts, written beside this file with where it came from.

    .venv/bin/python tests/deploy/crds/pin.py        # after changing a version below

Calico's module carries the CRD of `crd.projectcalico.org/v1`, the storage behind `projectcalico.org/v3`
(the group users apply, served by Calico's API server or its native v3 CRDs); both hold the same Go type,
`projectcalico.org/v3 NetworkPolicySpec`, so the spec schema is the one of the group the chart renders.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
# (module, version, file in the module): what the chart's cilium and calico modes render.
PINNED = {
    "cilium.io_ciliumnetworkpolicies.json": (
        "github.com/cilium/cilium",
        "v1.20.2",
        "pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnetworkpolicies.yaml",
    ),
    "crd.projectcalico.org_networkpolicies.json": (
        "github.com/projectcalico/calico",
        "v1.11.0-cni-plugin.0.20250813170300-a0db560f0520",
        "libcalico-go/config/crd/crd.projectcalico.org_networkpolicies.yaml",
    ),
    # The Prometheus Operator's: the chart's optional ServiceMonitor and PrometheusRule.
    "monitoring.coreos.com_servicemonitors.json": (
        "github.com/prometheus-operator/prometheus-operator",
        "v0.85.0",
        "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
    ),
    "monitoring.coreos.com_prometheusrules.json": (
        "github.com/prometheus-operator/prometheus-operator",
        "v0.85.0",
        "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
    ),
}


def without_descriptions(schema: Any, *, names: bool = False) -> Any:
    """``schema`` less its ``description`` keywords (half the size, no meaning to a validator); inside a
    ``properties`` map the keys are field names, and a field may be called description."""
    if isinstance(schema, dict):
        return {
            key: without_descriptions(value, names=key == "properties" and not names)
            for key, value in schema.items()
            if names or key != "description"
        }
    if isinstance(schema, list):
        return [without_descriptions(item) for item in schema]
    return schema


def download(module: str, version: str) -> dict[str, Any]:
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def main() -> int:
    for name, (module, version, path) in PINNED.items():
        got = download(module, version)
        raw = (Path(got["Dir"]) / path).read_bytes()
        crd = yaml.safe_load(raw)
        crd.pop("status", None)
        crd["metadata"] = {"name": crd["metadata"]["name"]}  # controller-gen's annotations say nothing here
        pinned = {
            "source": {
                "module": module,
                "version": version,
                "sum": got["Sum"],  # go.sum's h1: hash of the whole module, as the checksum database has it
                "path": path,
                "sha256": hashlib.sha256(raw).hexdigest(),
            },
            "crd": without_descriptions(crd),
        }
        (HERE / name).write_text(json.dumps(pinned, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {module}@{version} {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
