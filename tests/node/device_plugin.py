"""NVIDIA's k8s-device-plugin on the real node, deployed as NVIDIA's static manifest deploys it."""

from __future__ import annotations

from typing import Any

from tests.node.cluster import NodeCluster
from tests.node.images import DEVICE_PLUGIN_IMAGE


def device_plugin() -> dict[str, Any]:
    """NVIDIA's static deployment of its device plugin (nvidia-device-plugin.yml), with the image built
    here and the `nvidia` runtime class; health checks on, as they ship."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"name": "nvidia-device-plugin"}},
            "template": {
                "metadata": {"labels": {"name": "nvidia-device-plugin"}},
                "spec": {
                    "runtimeClassName": "nvidia",
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "nvidia-device-plugin-ctr",
                            "image": DEVICE_PLUGIN_IMAGE,
                            "imagePullPolicy": "Never",
                            "args": ["--fail-on-init-error=true"],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [
                                {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}
                    ],
                },
            },
        },
    }


def allocatable_gpus(cluster: NodeCluster) -> int:
    return int(cluster.get_node(cluster.node)["status"].get("allocatable", {}).get("nvidia.com/gpu", "0"))
