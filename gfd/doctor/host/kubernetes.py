"""Layer 7: does Kubernetes see the GPU? Node labels, allocatable GPUs or NVIDIA's DRA driver's
ResourceSlices (and whether they agree with the labels: ``dra.py``), the nvidia RuntimeClass.

Read-only: a GET of the Node and of the RuntimeClass and a list of the Node's ResourceSlices, with the
official client (``gfd.doctor.kube``).
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import Any

from gfd.choices import LabelSetName, MigStrategy
from gfd.doctor.host import dra
from gfd.doctor.host.context import Context
from gfd.doctor.kube import (
    DAEMONSET_FIX,
    DEVICE_PLUGIN_FIX,
    GPU,
    MOCK_FIX,
    api_client,
    create_runtime_class,
    credentials,
    one_line,
)
from gfd.doctor.model import Finding, Status
from gfd.inventory import Inventory
from gfd.labels import LabelOptions, build_labels, extras, health, mig, timestamp
from gfd.settings import Settings
from gfd.sharing_config import FULL_GPU_RESOURCE

KEY_LABELS = (extras.PRESENT, GPU.count, GPU.product)
# Set by the daemon's settings (sharing config, --with-timestamp), which the doctor does not know; and the
# PCI bus as the daemon's container sees it, which the doctor reads below --host-root instead (a GPU that
# NVML does not report is the doctor's own layer-3 finding).
IGNORED = (timestamp.TIMESTAMP, GPU.replicas, GPU.sharing_strategy, health.ON_BUS)
TIMEOUT_S = 10


def skip_reason(ctx: Context) -> str | None:
    if ctx.node or credentials(ctx.kubeconfig, ctx.env):
        return None
    return "no kubeconfig or in-cluster config (pass --kubeconfig/--node to check the node in Kubernetes)"


def node_name(ctx: Context) -> str:
    return ctx.node or ctx.env.get("NODE_NAME") or socket.gethostname()


def _node(ctx: Context) -> tuple[Any, str, dict[str, str], dict[str, str]] | list[Finding]:
    """The client, the Node's name, labels and allocatable; or the findings saying why they cannot be had."""
    try:
        from kubernetes import client
        from kubernetes.client.rest import ApiException
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        return [Finding("SKIP", "the kubernetes package is missing", "`pip install kubernetes`")]
    name = node_name(ctx)
    try:
        api = api_client(ctx.kubeconfig, ctx.env)
    except (ConfigException, OSError, ValueError) as err:
        return [Finding("WARN", f"cannot use the Kubernetes config: {err}", "pass a working --kubeconfig")]
    try:
        node = client.CoreV1Api(api).read_node(name, _request_timeout=TIMEOUT_S)
    except ApiException as err:
        if err.status == 404 and ctx.node is None:
            # The name was guessed from $NODE_NAME or the hostname; this machine may not be in that cluster.
            return [
                Finding(
                    "WARN",
                    f"no node named {name} in the cluster (name taken from the hostname or $NODE_NAME)",
                    "pass --node with the Node's name as `kubectl get nodes` shows it",
                )
            ]
        return [_api_error(err, f"node {name}")]
    except Exception as err:  # connection refused, DNS, TLS: urllib3 raises many kinds
        return [
            Finding(
                "FAIL",
                f"cannot reach the API server: {one_line(err, 200)}",
                "check the kubeconfig's server URL",
            )
        ]
    labels: dict[str, str] = dict((node.metadata.labels if node.metadata else None) or {})
    allocatable: dict[str, str] = dict((node.status.allocatable if node.status else None) or {})
    return api, name, labels, allocatable


def cluster_side(ctx: Context) -> list[Finding]:
    """What layer 7 checks whatever the layers below found: the DRA driver's ResourceSlices against the
    Node's labels, both read from the cluster. The layers below describe the machine the doctor runs on,
    which from a workstation (`--node N --kubeconfig K`) is not the node and has no GPU."""
    got = _node(ctx)
    if isinstance(got, list):
        return got
    api, name, labels, _ = got
    finding, _ = dra.check(api, name, labels, TIMEOUT_S)
    return [finding]


def check(ctx: Context) -> list[Finding]:
    got = _node(ctx)
    if isinstance(got, list):
        return got
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api, name, labels, allocatable = got
    consistency, dra_gpus = dra.check(api, name, labels, TIMEOUT_S)
    findings = [check_labels(ctx, name, labels), check_allocatable(name, allocatable, dra_gpus), consistency]
    try:
        rc = client.NodeV1Api(api).read_runtime_class("nvidia", _request_timeout=TIMEOUT_S)
        findings.append(
            Finding("PASS", f"RuntimeClass nvidia exists (handler {rc.handler})", item="runtimeclass")
        )
    except ApiException as err:
        if err.status != 404:
            findings.append(_api_error(err, "RuntimeClass nvidia", item="runtimeclass"))
        elif dra_gpus:
            findings.append(
                Finding(
                    "PASS",
                    f"no RuntimeClass nvidia; not needed, DRA driver {dra.DRIVER} gives pods their GPUs",
                    item="runtimeclass",
                )
            )
        elif ctx.nvidia_runtime_default:
            findings.append(
                Finding(
                    "PASS",
                    "no RuntimeClass nvidia; not needed, nvidia is the default runtime on this node",
                    item="runtimeclass",
                )
            )
        else:
            findings.append(
                Finding(
                    "FAIL",
                    "no RuntimeClass nvidia, and nvidia is not the node's default runtime: GPU pods "
                    "get no GPU",
                    create_runtime_class("nvidia"),
                    item="runtimeclass",
                )
            )
    except Exception as err:
        findings.append(
            Finding("FAIL", f"cannot read RuntimeClass nvidia: {one_line(err, 200)}", item="runtimeclass")
        )
    return findings


def _api_error(err: Any, what: str, item: str | None = None) -> Finding:
    status = getattr(err, "status", None)
    if status == 404:
        return Finding(
            "FAIL", f"{what} not found in the cluster", "pass --node with the Node's name", item=item
        )
    if status in (401, 403):
        return Finding(
            "FAIL",
            f"the API server refused to show {what} (HTTP {status})",
            "use credentials that may get nodes and runtimeclasses (read-only is enough)",
            item=item,
        )
    return Finding("FAIL", f"reading {what} failed: HTTP {status} {getattr(err, 'reason', '')}", item=item)


def expected_labels(inventory: Inventory, node_labels: dict[str, str]) -> dict[str, str]:
    """What gfd would label now: its labelers over what the lower layers probed, by the node's label set
    (the device-plugin set always writes gpu.replicas, the DRA set never) and MIG strategy."""
    strategy = node_labels.get(mig.STRATEGY)
    mig_strategy: MigStrategy = (
        "single" if strategy == "single" else "mixed" if strategy == "mixed" else "none"
    )
    label_set: LabelSetName = "device-plugin" if GPU.replicas in node_labels else "dra"
    # The other settings as the daemon's defaults; those the node may differ by are in IGNORED.
    settings = Settings(mig_strategy=mig_strategy, label_set=label_set)
    opts = LabelOptions.from_settings(settings, datetime.now(UTC))
    return build_labels(inventory, opts).labels


def check_labels(ctx: Context, name: str, labels: dict[str, str]) -> Finding:
    if extras.PRESENT not in labels:
        return Finding(
            "FAIL",
            f"node {name} has none of this project's labels (no {extras.PRESENT})",
            DAEMONSET_FIX,
            item="labels",
        )
    if labels.get(extras.SIMULATED) == "true":
        return Finding(
            "WARN",
            f"node {name} carries simulated labels (mock backend)",
            MOCK_FIX,
            item="labels",
        )
    if ctx.labelled is None:  # the layers below had nothing to probe with; then this layer is skipped
        return Finding("SKIP", "no probe of this host to compare the labels with", item="labels")
    want = expected_labels(ctx.labelled, labels)
    diffs: list[tuple[str, str | None, str]] = []
    for key, value in sorted(want.items()):
        have = labels.get(key)
        if key in IGNORED:
            continue
        if key == GPU.product and have is not None and have.removesuffix("-SHARED") == value:
            continue
        if have != value:
            diffs.append((key, have, value))
    if not diffs:
        return Finding("PASS", f"node {name}: {len(want)} labels agree with what gfd sees now", item="labels")
    shown = "; ".join(f"{k}: node has {h or '(none)'}, gfd sees {v}" for k, h, v in diffs[:4])
    status: Status = "FAIL" if any(k in KEY_LABELS for k, _, _ in diffs) else "WARN"
    return Finding(
        status,
        f"node {name} labels disagree with this host: {shown}",
        "gfd rewrites labels every sleep interval; if they stay wrong, check the gfd pod's log",
        item="labels",
    )


def check_allocatable(name: str, allocatable: dict[str, str], dra_gpus: int = 0) -> Finding:
    gpus = {k: v for k, v in allocatable.items() if k.startswith((FULL_GPU_RESOURCE, "nvidia.com/mig-"))}
    total = 0
    for value in gpus.values():
        try:
            total += int(value)
        except ValueError:
            continue
    if total > 0:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(gpus.items()))
        return Finding("PASS", f"node {name} allocatable: {shown}", item="allocatable")
    if dra_gpus:
        evidence = (
            f"node {name} offers its {dra_gpus} GPUs through DRA driver {dra.DRIVER}, not as allocatable"
        )
        return Finding("PASS", evidence, item="allocatable")
    return Finding(
        "FAIL",
        f"node {name} offers no nvidia.com/gpu (allocatable: {gpus or 'none'}): the device plugin has "
        "not registered",
        DEVICE_PLUGIN_FIX,
        item="allocatable",
    )
