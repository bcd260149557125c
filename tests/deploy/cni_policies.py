"""The CNI-native policies the chart renders with networkPolicy.apiServerEgress cilium and calico, checked
against the schemas their projects publish: the CustomResourceDefinitions pinned in tests/deploy/crds/ by
crds/pin.py from Cilium's and Calico's Go modules. Offline here (the CRD's structural schema, with unknown
fields refused as the API server's strict field validation refuses them); tests/kube serves the same CRDs
from a real kube-apiserver, which also runs their CEL rules."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema

CRDS = Path(__file__).resolve().parent / "crds"
CILIUM = ("cilium.io/v2", "CiliumNetworkPolicy")
CALICO = ("projectcalico.org/v3", "NetworkPolicy")
# Not policies, but the chart's other custom resources, checked the same way (metrics.serviceMonitor,
# metrics.prometheusRule).
SERVICE_MONITOR = ("monitoring.coreos.com/v1", "ServiceMonitor")
PROMETHEUS_RULE = ("monitoring.coreos.com/v1", "PrometheusRule")
_PINNED = {
    CILIUM: "cilium.io_ciliumnetworkpolicies.json",
    CALICO: "crd.projectcalico.org_networkpolicies.json",
    SERVICE_MONITOR: "monitoring.coreos.com_servicemonitors.json",
    PROMETHEUS_RULE: "monitoring.coreos.com_prometheusrules.json",
}


def pinned(kind: tuple[str, str]) -> dict[str, Any]:
    """The pinned file of ``kind``: its ``source`` (module, version, checksum) and ``crd``."""
    loaded: dict[str, Any] = json.loads((CRDS / _PINNED[kind]).read_text())
    return loaded


def serving_crd(kind: tuple[str, str]) -> dict[str, Any]:
    """The CRD that serves ``kind`` (apiVersion, kind). Cilium's is the one published. Calico publishes
    the CRD of its storage group, crd.projectcalico.org/v1, whose spec is the projectcalico.org/v3 type;
    serving the same schema under projectcalico.org/v3 is what Calico's native v3 CRDs do."""
    crd = copy.deepcopy(pinned(kind)["crd"])
    group, version = kind[0].split("/")
    if crd["spec"]["group"] != group:
        crd["spec"]["group"] = group
        crd["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{group}"
        (served,) = crd["spec"]["versions"]
        served["name"] = version
    return crd


_AS_PUBLISHED = {"enum", "default", "anyOf", "oneOf", "allOf", "not"}


def _strict(schema: Any) -> Any:
    """The structural schema with unknown fields refused: what the API server prunes (or refuses with
    fieldValidation=Strict, as kubectl apply and helm 4 ask) is an error here."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    # Inside anyOf, oneOf, allOf and not, properties only constrain values (a structural schema prunes
    # by the ones outside them): left as published.
    out = {key: (value if key in _AS_PUBLISHED else _strict(value)) for key, value in schema.items()}
    if "properties" in schema:
        out["properties"] = {name: _strict(sub) for name, sub in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


def validation_errors(obj: dict[str, Any]) -> list[str]:
    """What the kind's published schema refuses in ``obj`` (a rendered policy), one line each."""
    kind = (obj["apiVersion"], obj["kind"])
    (served,) = serving_crd(kind)["spec"]["versions"]
    schema = _strict(served["schema"]["openAPIV3Schema"])
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'.'.join(map(str, error.absolute_path)) or '(object)'}: {error.message}"
        for error in validator.iter_errors(obj)
    ]
