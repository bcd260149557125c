"""Layer 7, DRA: what NVIDIA's DRA driver publishes for this node against the node's labels.

NVIDIA's DRA kubelet plugin (driver ``gpu.nvidia.com``) publishes the node's devices as ResourceSlices,
one pool named after the node. A full GPU is a device with the attribute ``type`` ``gpu``; a MIG device
has ``type`` ``mig`` and names its GPU by ``parentUUID`` (a GPU with MIG enabled is published through its
MIG devices only). The attributes compared here, as its ``cmd/gpu-kubelet-plugin`` writes them:
``productName``, NVML's raw name; ``cudaComputeCapability``, ``driverVersion`` and ``cudaDriverVersion``,
versions in semver form (``8.0.0``, ``550.54.15``, ``12.4.0``; semver drops leading zeros, so driver
``535.104.05`` is ``535.104.5``); the capacity ``memory``, bytes as a Kubernetes quantity (``40Gi``). Under
its DynamicMIG feature a full GPU consumes shared counters, and its ``memory`` is then the largest MIG
profile's, not the board's: not compared.

``gpus`` and ``compare`` are pure; ``read_slices`` is the one request (a list with field selectors).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from gfd.doctor.kube import DRIVER_LABEL, GPU
from gfd.doctor.model import Finding
from gfd.inventory import Device
from gfd.labels import extras, sanitize
from gfd.labels.device import by_model, primary_model
from gfd.sharing_config import FULL_GPU_RESOURCE

DRIVER = "gpu.nvidia.com"
ITEM = "dra"
MEMORY = f"{FULL_GPU_RESOURCE}.memory"
PER_MODEL = f"nvidia.com/{extras.COUNT_KEY}"
COMPUTE = (f"{FULL_GPU_RESOURCE}.compute.major", f"{FULL_GPU_RESOURCE}.compute.minor")
CUDA = ("nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor")
_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


@dataclass(frozen=True)
class DriverGpu:
    """One physical GPU as the DRA driver describes it."""

    uuid: str
    product: str  # NVML's raw name
    memory_bytes: int | None  # None: not published, or not the board's (DynamicMIG)
    compute: tuple[int, ...] | None
    driver_version: tuple[int, ...] | None
    cuda_version: tuple[int, ...] | None


@dataclass(frozen=True)
class Mismatch:
    label: str  # the label key, or a family of them
    driver: str  # what the DRA driver says
    node: str  # what the label says; "(none)" when absent
    key: bool = False  # the count or the product: selectors are most likely to go wrong by these

    def __str__(self) -> str:
        return f"{self.label}: driver {self.driver}, label {self.node}"


def _attribute(device: Mapping[str, Any], name: str) -> str | None:
    """A string or version attribute, by its short name or qualified with the driver's domain."""
    attributes = device.get("attributes") or {}
    value = attributes.get(name) or attributes.get(f"{DRIVER}/{name}") or {}
    found = value.get("string", value.get("version")) if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def _version(text: str | None, parts: int) -> tuple[int, ...] | None:
    """``"12.4.0"`` -> ``(12, 4)`` for two parts; a missing part is 0, as semver reads ``470.57``."""
    if text is None:
        return None
    numbers = text.split("-", 1)[0].split("+", 1)[0].split(".")
    try:
        found = [int(n) for n in numbers[:parts]]
    except ValueError:
        return None
    return tuple(found + [0] * (parts - len(found)))


def quantity_bytes(text: str) -> int | None:
    """A Kubernetes quantity as whole bytes: ``40Gi``, ``42949672960``, ``4e9``, ``500M``; None if not one."""
    text = text.strip()
    for suffixes in (_BINARY, _DECIMAL):
        for suffix, factor in suffixes.items():
            if text.endswith(suffix) and text[: -len(suffix)].isdigit():
                return int(text[: -len(suffix)]) * factor
    if text.isdigit():
        return int(text)
    mantissa, e, exponent = text.lower().partition("e")
    if e and mantissa.isdigit() and exponent.isdigit():
        return int(mantissa) * 10 ** int(exponent)
    return None


def _memory(device: Mapping[str, Any]) -> int | None:
    if device.get("consumesCounters"):
        return None  # a partitionable full GPU: its memory capacity is the largest MIG profile's
    value = ((device.get("capacity") or {}).get("memory") or {}).get("value")
    return quantity_bytes(value) if isinstance(value, str) else None


def current_slices(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Slices of each pool's newest generation: while a driver republishes, older ones linger a moment."""
    slices = list(slices)
    newest: dict[str, int] = {}
    for s in slices:
        pool = s.get("spec", {}).get("pool", {})
        name, generation = str(pool.get("name")), int(pool.get("generation") or 0)
        newest[name] = max(newest.get(name, generation), generation)
    return [
        s
        for s in slices
        if int(s.get("spec", {}).get("pool", {}).get("generation") or 0)
        == newest[str(s.get("spec", {}).get("pool", {}).get("name"))]
    ]


def gpus(slices: Iterable[Mapping[str, Any]]) -> list[DriverGpu]:
    """The physical GPUs in the driver's slices: each ``type=gpu`` device, and the parent of MIG devices
    whose GPU is not published whole (MIG enabled), known by its ``parentUUID``."""
    found: dict[str, DriverGpu] = {}
    for s in current_slices(slices):
        for device in s.get("spec", {}).get("devices") or []:
            kind = _attribute(device, "type")
            uuid = _attribute(device, "uuid" if kind == "gpu" else "parentUUID")
            if kind not in ("gpu", "mig") or uuid is None or (kind == "mig" and uuid in found):
                continue
            found[uuid] = DriverGpu(
                uuid=uuid,
                product=_attribute(device, "productName") or "",
                memory_bytes=_memory(device) if kind == "gpu" else None,
                compute=_version(_attribute(device, "cudaComputeCapability"), 2),
                driver_version=_version(_attribute(device, "driverVersion"), 3),
                cuda_version=_version(_attribute(device, "cudaDriverVersion"), 2),
            )
    return sorted(found.values(), key=lambda g: g.uuid)


def _shown(version: tuple[int, ...] | None) -> str:
    return "(none)" if version is None else ".".join(map(str, version))


def _label_version(labels: Mapping[str, str], keys: Iterable[str]) -> tuple[int, ...] | None:
    try:
        return tuple(int(labels[k]) for k in keys)
    except (KeyError, ValueError):
        return None


def compare(driver_gpus: list[DriverGpu], labels: Mapping[str, str]) -> list[Mismatch]:
    """Every way the node's labels disagree with the driver's GPUs, by the rules gfd labels with: the
    primary model (most GPUs, then the first name) gives the product, count, memory and compute
    capability; each model its own count; the versions are the node's."""
    if not driver_gpus:
        return []
    devices = [Device(index=i, name=g.product) for i, g in enumerate(driver_gpus)]
    model = primary_model(devices)
    group = [g for g in driver_gpus if g.product == model]
    found: list[Mismatch] = []

    def check(
        label: str, driver: str, node: str | None, *, agree: bool | None = None, key: bool = False
    ) -> None:
        if not (driver == node if agree is None else agree):
            found.append(Mismatch(label, driver, "(none)" if node is None else node, key))

    check(GPU.count, str(len(group)), labels.get(GPU.count), key=True)
    check(GPU.product, sanitize.product(model), labels.get(GPU.product), key=True)
    per_model: dict[str, str] = {}
    for name, members in by_model(devices).items():
        if (count_key := extras.count_key(name)) is not None:
            per_model[count_key] = str(len(members))
    for count_key in sorted(per_model.keys() | {k for k in labels if k.startswith(PER_MODEL)}):
        check(count_key, per_model.get(count_key, "0"), labels.get(count_key))
    if sizes := sorted({g.memory_bytes >> 20 for g in group if g.memory_bytes is not None}):
        memory = labels.get(MEMORY)
        shown = " or ".join(f"{size} MiB" for size in sizes)
        check(MEMORY, shown, memory, agree=memory in [str(size) for size in sizes])
    if (compute := group[0].compute) is not None:
        check("gpu.compute.major/minor", _shown(compute), _shown(_label_version(labels, COMPUTE)))
    first = driver_gpus[0]  # the versions are the node's driver's, the same on every GPU
    if first.driver_version is not None:
        ours = labels.get(DRIVER_LABEL)
        check(
            DRIVER_LABEL, _shown(first.driver_version), ours, agree=_version(ours, 3) == first.driver_version
        )
    if first.cuda_version is not None:
        check("cuda.runtime-version", _shown(first.cuda_version), _shown(_label_version(labels, CUDA)))
    return found


def read_slices(api: Any, node: str, timeout: float) -> list[dict[str, Any]]:
    """The driver's ResourceSlices for ``node`` (every page), as the API server returns them."""
    from kubernetes import client

    objects = client.CustomObjectsApi(api)
    selector = f"spec.nodeName={node},spec.driver={DRIVER}"
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        answer = objects.list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", field_selector=selector, limit=100,
            _continue=token, _request_timeout=timeout,
        )  # fmt: skip
        page = cast("dict[str, Any]", answer)
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        if not token:
            return items


def check(api: Any, node: str, labels: Mapping[str, str], timeout: float) -> tuple[Finding, int]:
    """The consistency finding, and how many GPUs the driver publishes for ``node`` (0: not a DRA node,
    or unknown)."""
    from kubernetes.client.rest import ApiException

    try:
        driver_gpus = gpus(read_slices(api, node, timeout))
    except ApiException as err:
        if err.status == 404:
            return Finding("SKIP", "the API server serves no resource.k8s.io/v1 ResourceSlices", item=ITEM), 0
        if err.status in (401, 403):
            why = f"the API server refused to list ResourceSlices (HTTP {err.status})"
            return Finding("WARN", why, "use the admin's kubeconfig (list resourceslices)", item=ITEM), 0
        return Finding("WARN", f"listing ResourceSlices failed: HTTP {err.status}", item=ITEM), 0
    except Exception as err:  # connection reset, timeout: the Node was just read, so say it and go on
        return Finding("WARN", f"listing ResourceSlices failed: {type(err).__name__}: {err}", item=ITEM), 0
    if not driver_gpus:
        return Finding("SKIP", f"no GPUs of DRA driver {DRIVER} on node {node}", item=ITEM), 0
    mismatches = compare(driver_gpus, labels)
    count = len(driver_gpus)
    if not mismatches:
        evidence = f"node {node}: the {count} GPUs DRA driver {DRIVER} publishes agree with its labels"
        return Finding("PASS", evidence, item=ITEM), count
    shown = "; ".join(map(str, mismatches))
    return Finding(
        "FAIL" if any(m.key for m in mismatches) else "WARN",
        f"node {node}: DRA driver {DRIVER} ({count} GPUs) and the labels disagree: {shown}",
        f"gfd rewrites labels every sleep interval; if they stay wrong, compare `kubectl get resourceslices "
        f"--field-selector spec.nodeName={node},spec.driver={DRIVER} -o yaml` with the gfd pod's log (a GPU "
        "with MIG on and no MIG devices is invisible to the driver; the device-plugin label set's MIG "
        "strategy and sharing labels do not describe DRA: use --label-set dra)",
        item=ITEM,
    ), count
