"""Rendering the chart with the real helm binaries, over the values matrix the tests share."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpu-labeller"
RBAC = REPO / "rbac"
RELEASE = "gpu-labeller"
NAMESPACE = "gpu-labeller"
HELMS = ("helm3", "helm4")

_SHARING = {
    "version": "v1",
    "flags": {"migStrategy": "none"},
    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
}

# Values that name the API server's address, as a cluster whose control-plane addresses are known may.
# The chart renders without them (its egress then goes to any address on the API server's ports).
API_SERVER = {"networkPolicy": {"apiServerCIDRs": ["192.0.2.10/32"]}}


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base``, dictionaries merged key by key as helm merges values files."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


# name -> values; every entry is linted, rendered, schema-validated and scanned.
MATRIX: dict[str, dict[str, Any]] = {
    "defaults": {},
    "mig-mixed": {"migStrategy": "mixed"},
    "sharing": {"sharing": {"config": _SHARING}},
    "sharing-existing-configmap": {
        "sharing": {"existingConfigMap": "device-plugin-config", "key": "any.yaml"}
    },
    "no-admission-policy": {"admissionPolicy": {"enabled": False}},
    "existing-service-account": {"serviceAccount": {"create": False, "name": "gpu-writer"}},
    "no-rbac": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "gpu-writer"}},
    "hostpath": {"featureDir": {"type": "hostPath"}},
    "jetson": {"jetson": {"enabled": True}, "gfd": {"backend": "tegra"}, "runtimeClassName": ""},
    "bottlerocket": {"gpuAccess": {"volumeMounts": True}},
    "vgpu-and-mig-monitor": {"gfd": {"vgpu": {"enabled": True}, "migMonitoring": {"enabled": True}}},
    "no-network-policy": {"networkPolicy": {"enabled": False}},
    # The ways nfd-lite's egress names the API server (networkPolicy.apiServerEgress; the default,
    # kubernetes without CIDRs, is "defaults").
    "api-server-cidrs": {
        "networkPolicy": {"apiServerCIDRs": ["10.0.0.0/24", "fd00:10::/64"], "apiServerPorts": [443]}
    },
    "cilium": {"networkPolicy": {"apiServerEgress": "cilium"}},
    "calico": {"networkPolicy": {"apiServerEgress": "calico"}},
    "prune": {"pruneLabels": True},
    "everything-on": {
        "image": {"digest": "sha256:" + "0" * 64},
        "metrics": {
            "service": {"enabled": True},
            "serviceMonitor": {"enabled": True, "labels": {"release": "p"}},
            "prometheusRule": {"enabled": True, "labels": {"release": "p"}, "alertLabels": {"team": "gpu"}},
            "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "GPU"}},
        },
        "networkPolicy": {
            "apiServerCIDRs": ["10.0.0.5/32"],
            "metricsFrom": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                }
            ],
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "podAnnotations": {"example.com/team": "ml"},
        "gfd": {"extraArgs": ["--timestamp"], "extraEnv": [{"name": "GFD_EXPIRY", "value": "10m"}]},
    },
}


@dataclass(frozen=True)
class Tools:
    bin: Path

    def helm(self, which: str) -> Path:
        return self.bin / which

    @property
    def checkov(self) -> Path:
        return self.bin / "checkov"


def run_helm(
    tools: Tools, which: str, *args: str, values: dict[str, Any] | None = None, tmp: Path | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [str(tools.helm(which)), *args]
    if values:
        assert tmp is not None
        vf = tmp / "values.yaml"
        vf.write_text(yaml.safe_dump(values))
        cmd += ["-f", str(vf)]
    # HOME and the helm dirs point into tmp so no user config or repository cache leaks in.
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp or REPO),
        "HELM_CACHE_HOME": str((tmp or REPO) / ".helm-cache"),
        "HELM_CONFIG_HOME": str((tmp or REPO) / ".helm-config"),
        "HELM_DATA_HOME": str((tmp or REPO) / ".helm-data"),
    }
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


def render(tools: Tools, which: str, values: dict[str, Any], tmp: Path, *extra: str) -> str:
    proc = run_helm(
        tools,
        which,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        "1.30.0",
        *extra,
        values=values,
        tmp=tmp,
    )
    assert proc.returncode == 0, f"{which} template failed:\n{proc.stderr}"
    return proc.stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}
