"""The doctor's DRA consistency check on the real kube-apiserver 1.37.

For each machine NVIDIA's mock NVML simulates, the ResourceSlices NVIDIA's DRA driver would publish are
built here from that machine's NVML facts (``nvidia-mock-describe``) by the driver's attribute contract
(cmd/gpu-kubelet-plugin: ``type`` gpu or mig, ``uuid``/``parentUUID``, ``productName`` raw, versions in
semver form, ``memory`` capacity in bytes; one pool per node), never from our labels, and stored by the
real API server, which validates and normalises them (``memory`` 42949672960 comes back as ``40Gi``). The
Node carries the labels our gfd writes in the DRA set over the same mock machine. The doctor's
Kubernetes layer then reads both with the admin's kubeconfig: matching slices pass, and each deliberate
mismatch is reported.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gfd.doctor import engine
from gfd.doctor.host import kubernetes, runner
from gfd.doctor.host.context import Context
from gfd.doctor.model import Finding
from tests.kube.controlplane import ControlPlane
from tests.parity import peers

GFD = peers.ROOT / ".venv/bin/gfd"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
LAYOUTS = {"mig-off": ("", ""), "mig-1g-twice": ("0,0", ""), "mig-on-gpu0-only": ("0,0", "0")}


def semver(text: str) -> str:
    """A version as the driver publishes it (Masterminds semver): three numbers, no leading zeros."""
    numbers = [int(part) for part in text.split(".")]
    return ".".join(str(n) for n in [*numbers, 0, 0][:3])


def driver_slices(machine: dict[str, Any], node: str) -> list[dict[str, Any]]:
    """The one ResourceSlice of NVIDIA's DRA driver for ``machine`` on ``node`` (static MIG: a GPU with
    MIG on is published through its MIG devices only)."""
    cuda = machine["cuda_driver_version"]  # NVML's integer: 12040 is CUDA 12.4
    common = {
        "driverVersion": {"version": semver(machine["driver_version"])},
        "cudaDriverVersion": {"version": f"{cuda // 1000}.{cuda % 1000 // 10}.0"},
        "brand": {"string": "Nvidia"},
    }
    devices = []
    for gpu in machine["devices"]:
        own = common | {
            "productName": {"string": gpu["name"]},
            "cudaComputeCapability": {"version": "{}.{}.0".format(*gpu["compute_capability"])},
        }
        if not gpu["mig_enabled"]:
            attributes = own | {"type": {"string": "gpu"}, "uuid": {"string": gpu["uuid"]}}
            capacity = {"memory": {"value": str(gpu["memory_mib"] << 20)}}
            devices.append({"name": f"gpu-{gpu['index']}", "attributes": attributes, "capacity": capacity})
            continue
        for n, mig in enumerate(gpu["migs"]):
            profile = f"{mig['gi_slices']}g.{-(-mig['memory_mib'] // 1024)}gb"
            attributes = own | {
                "type": {"string": "mig"},
                "uuid": {"string": mig["uuid"]},
                "parentUUID": {"string": gpu["uuid"]},
                "profile": {"string": profile},
            }
            capacity = {
                "memory": {"value": str(mig["memory_mib"] << 20)},
                "multiprocessors": {"value": str(mig["multiprocessors"])},
            }
            name = f"gpu-{gpu['index']}-mig-{profile.replace('.', '')}-{n}"
            devices.append({"name": name, "attributes": attributes, "capacity": capacity})
    spec = {
        "driver": "gpu.nvidia.com",
        "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": devices,
    }
    meta = {"generateName": f"{node}-gpu.nvidia.com-"}
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta, "spec": spec}]


def our_labels(env: dict[str, str], machine_file: Path) -> dict[str, str]:
    done = subprocess.run(
        [str(GFD), "--oneshot", "--backend", "nvml", "--label-set", "dra", "--output-file", "-",
         f"--machine-type-file={machine_file}"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    pairs = (line.partition("=") for line in done.stdout.splitlines() if line and not line.startswith("#"))
    return {key: value for key, _, value in pairs}


@pytest.fixture
def dra_node(kube: ControlPlane, new_node: Callable[..., str]) -> Iterator[Callable[..., str]]:
    """``dra_node(labels, slices)``: a Node with ``labels`` and the driver's ``slices`` for it."""
    made: list[str] = []

    def make(labels: dict[str, str], slices: Callable[[str], list[dict[str, Any]]]) -> str:
        node = new_node(labels)
        made.append(node)
        for body in slices(node):
            kube.must("POST", SLICES, body)
        return node

    yield make
    for node in made:
        kube.must("DELETE", f"{SLICES}?fieldSelector=spec.nodeName%3D{node}")


def layer7(kube: ControlPlane, node: str, tmp_path: Path) -> dict[str, Finding]:
    ctx = Context(host_root=tmp_path, node=node, kubeconfig=kube.admin_kubeconfig, env={})
    return {f.item or "": f for f in kubernetes.check(ctx)}


def _cases() -> list[object]:
    machines = peers.machines() or ["(not built)"]
    cases = [(m, "mig-off") for m in machines] + [
        (machines[0], layout) for layout in LAYOUTS if layout != "mig-off"
    ]
    return [pytest.param(*c, id="/".join(c)) for c in cases]


@pytest.mark.parametrize(("machine", "layout"), _cases())
def test_the_drivers_slices_for_the_same_machine_agree_with_our_labels(
    kube: ControlPlane, dra_node: Callable[..., str], tmp_path: Path, machine: str, layout: str
) -> None:
    peers.require()
    env = peers.mock_env(machine, *LAYOUTS[layout])
    (machine_file := tmp_path / "product_name").write_text("NVIDIA DGX\n")
    facts = peers.describe(env)
    node = dra_node(our_labels(env, machine_file), lambda n: driver_slices(facts, n))
    stored = kube.must("GET", f"{SLICES}?fieldSelector=spec.nodeName%3D{node}")["items"]
    assert [d["name"] for d in stored[0]["spec"]["devices"]][:1] in (["gpu-0"], ["gpu-0-mig-1g5gb-0"])

    found = layer7(kube, node, tmp_path)

    gpus = len(facts["devices"])
    assert found["dra"].status == "PASS", found["dra"]
    assert (
        found["dra"].evidence
        == f"node {node}: the {gpus} GPUs DRA driver gpu.nvidia.com publishes agree with its labels"
    )
    assert (
        found["allocatable"].status == "PASS"
        and f"its {gpus} GPUs through DRA" in found["allocatable"].evidence
    )
    assert found["runtimeclass"].status == "PASS" and "not needed" in found["runtimeclass"].evidence


def test_each_deliberate_mismatch_is_reported(
    kube: ControlPlane, dra_node: Callable[..., str], tmp_path: Path
) -> None:
    peers.require()
    env = peers.mock_env("dgxa100")
    (machine_file := tmp_path / "product_name").write_text("NVIDIA DGX\n")
    facts = peers.describe(env)
    labels = our_labels(env, machine_file)

    # The driver lost a GPU (it fell off the bus after gfd's last pass): the count is a key label.
    fewer = dict(facts, devices=facts["devices"][:7])
    node = dra_node(labels, lambda n: driver_slices(fewer, n))
    got = layer7(kube, node, tmp_path)["dra"]
    assert got.status == "FAIL"
    assert "nvidia.com/gpu.count: driver 7, label 8" in got.evidence
    assert "nvidia.com/gpu.count.Mock-NVIDIA-A100-SXM4-40GB: driver 7, label 8" in got.evidence
    assert got.fix is not None and "kubectl get resourceslices" in got.fix

    # The driver was upgraded under a labeller that has not run since: versions only, a warning.
    upgraded = dict(facts, driver_version="560.28.03", cuda_driver_version=12060)
    node = dra_node(labels, lambda n: driver_slices(upgraded, n))
    got = layer7(kube, node, tmp_path)["dra"]
    assert got.status == "WARN"
    assert got.evidence.endswith(
        "nvidia.com/cuda.driver-version.full: driver 560.28.3, label 550.54.15; "
        "cuda.runtime-version: driver 12.6, label 12.4"
    )

    # Labels of another machine on this node: product, memory and compute capability.
    h100 = peers.describe(peers.mock_env("dgxh100"))
    node = dra_node(
        labels, lambda n: driver_slices(dict(h100, driver_version="550.54.15", cuda_driver_version=12040), n)
    )
    got = layer7(kube, node, tmp_path)["dra"]
    assert got.status == "FAIL"
    for said in (
        "nvidia.com/gpu.product: driver NVIDIA-H100-80GB-HBM3, label Mock-NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.count.Mock-NVIDIA-A100-SXM4-40GB: driver 0, label 8",
        "nvidia.com/gpu.count.NVIDIA-H100-80GB-HBM3: driver 8, label (none)",
        "nvidia.com/gpu.memory: driver 81920 MiB, label 40960",
        "gpu.compute.major/minor: driver 9.0, label 8.0",
    ):
        assert said in got.evidence

    # A GPU with MIG on and no MIG devices is invisible to the driver: gfd still counts it.
    empty = peers.mock_env("dgxa100", "enabled", "0")
    node = dra_node(our_labels(empty, machine_file), lambda n: driver_slices(peers.describe(empty), n))
    got = layer7(kube, node, tmp_path)["dra"]
    assert got.status == "FAIL" and "nvidia.com/gpu.count: driver 7, label 8" in got.evidence


def test_a_node_without_the_driver_is_not_a_dra_node(
    kube: ControlPlane, new_node: Callable[..., str], tmp_path: Path
) -> None:
    node = new_node({"nvidia.com/gpu.present": "true"})
    found = layer7(kube, node, tmp_path)
    assert (found["dra"].status, found["dra"].evidence) == (
        "SKIP",
        f"no GPUs of DRA driver gpu.nvidia.com on node {node}",
    )
    assert found["allocatable"].status == "FAIL"


def test_from_a_workstation_the_whole_doctor_still_compares_the_drivers_slices(
    kube: ControlPlane, dra_node: Callable[..., str], tmp_path: Path
) -> None:
    """`gfd doctor --node N --kubeconfig ADMIN` from a machine with no GPU: layer 1 fails there, and the
    DRA check, which reads only the cluster, still reports the node's slices against its labels."""
    peers.require()
    env = peers.mock_env("dgxa100")
    (machine_file := tmp_path / "product_name").write_text("NVIDIA DGX\n")
    facts = peers.describe(env)
    fewer = dict(facts, devices=facts["devices"][:7])  # a GPU fell off after gfd's last pass
    node = dra_node(our_labels(env, machine_file), lambda n: driver_slices(fewer, n))
    workstation = tmp_path / "workstation"  # no PCI bus, no driver: not the node
    workstation.mkdir()

    checks = runner.run(Context(host_root=workstation, node=node, kubeconfig=kube.admin_kubeconfig, env={}))

    assert engine.first_failure(checks) == checks[0] and checks[0].layer == 1
    (got,) = [c for c in checks if c.name == "Kubernetes: dra"]
    assert got.status == "FAIL" and "nvidia.com/gpu.count: driver 7, label 8" in got.evidence
