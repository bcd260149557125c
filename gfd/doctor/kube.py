"""What both modes share towards the API server: the client, built as kubectl finds its credentials; an
answer or error as one printable line; the Node labels they read; and the fixes both give.

The client is the official one, imported only when a check talks to a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gfd.labels import resource
from gfd.sharing_config import FULL_GPU_RESOURCE

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
NO_CREDENTIALS = "no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a pod: pass --kubeconfig"

GPU = resource.keys(FULL_GPU_RESOURCE)
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"

DEVICE_PLUGIN_FIX = (
    "check the NVIDIA device plugin pod on this node (`kubectl -n kube-system get pods -o wide | "
    "grep nvidia`) and its log"
)
DAEMONSET_FIX = (
    "check that the gpu-labeller DaemonSet runs on this node: `kubectl -n gpu-labeller get pods -o wide`"
)
MOCK_FIX = "run gfd with --backend auto on GPU nodes"


def create_runtime_class(name: str) -> str:
    """How to create RuntimeClass ``name`` for the NVIDIA runtime."""
    return (
        f"create it: `kubectl apply -f -` with apiVersion node.k8s.io/v1, kind RuntimeClass, metadata.name "
        f"{name}, handler nvidia"
    )


def kubeconfig_path(kubeconfig: Path | None, env: Mapping[str, str]) -> Path | None:
    """The kubeconfig kubectl would use: ``kubeconfig`` (--kubeconfig), else $KUBECONFIG's first file that
    exists, else ~/.kube/config; None when there is none."""
    if kubeconfig is not None:
        return kubeconfig
    home = env.get("HOME")
    for candidate in [*env.get("KUBECONFIG", "").split(os.pathsep), f"{home}/.kube/config" if home else ""]:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def in_cluster(env: Mapping[str, str]) -> bool:
    return bool(env.get("KUBERNETES_SERVICE_HOST")) and IN_CLUSTER_TOKEN.is_file()


def credentials(kubeconfig: Path | None, env: Mapping[str, str]) -> bool:
    """Whether there is a kubeconfig or a pod's service account to reach the API server with."""
    return kubeconfig_path(kubeconfig, env) is not None or in_cluster(env)


def api_client(kubeconfig: Path | None, env: Mapping[str, str]) -> Any:
    """The official client, configured as kubectl would be: --kubeconfig, $KUBECONFIG, ~/.kube/config, or
    the pod's service account (outside a pod, the client's ConfigException says what is missing)."""
    from kubernetes import client, config

    path = kubeconfig_path(kubeconfig, env)
    if path is not None:
        return config.new_client_from_config(config_file=str(path))
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)


def one_line(text: object, limit: int = 300) -> str:
    """An answer, error or log as one printable line (no control characters), cut to ``limit``."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
