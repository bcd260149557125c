"""Kubernetes' own DRA test driver (k8s.io/kubernetes/test/e2e/dra/test-driver, built by
scripts/peers/build.sh dra-test-driver) on the real node, as the stand-in for NVIDIA's DRA driver: it
registers with the kubelet under NVIDIA's driver name, publishes the node's devices as ResourceSlices and
prepares the claims the kubelet hands it. It knows nothing of GPUs: its devices have no attributes and its
CDI specs inject an environment variable, not a device (this node's containerd 1.6 applies no CDI
anyway). So it proves what allocation proves, not what NVML through a claim proves (docs/real-node.md)."""

from __future__ import annotations

import subprocess
from types import TracebackType
from typing import Any

from tests.kube.controlplane import ROOT, ControlPlaneError
from tests.node.cluster import NodeCluster
from tests.node.workloads import apply
from tests.waiting import eventually

TEST_DRIVER = ROOT / ".cache" / "peers" / "dra-test-driver" / "dra-test-driver"
DRIVER = "gpu.nvidia.com"  # NVIDIA's driver and DeviceClass name, which the chart asks for
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def device_class() -> dict[str, Any]:
    """The DeviceClass NVIDIA's chart installs, selecting the stand-in's devices: NVIDIA's own also requires
    the attribute ``type == "gpu"``, which the stand-in's devices do not carry."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }


class StandInDriver:
    """``with StandInDriver(cluster, devices=8) as driver:`` runs the test driver as a kubelet plugin of the
    node (in its namespaces, like the kubelet) until the block ends, and removes its slices and class."""

    def __init__(self, cluster: NodeCluster, devices: int) -> None:
        self.cluster = cluster
        self.devices = devices
        self.log = cluster.logs / "dra-test-driver.log"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> StandInDriver:
        if not TEST_DRIVER.exists():
            raise ControlPlaneError(f"{TEST_DRIVER} is missing: run scripts/peers/build.sh dra-test-driver")
        w, root = self.cluster.workdir, self.cluster.workdir / "kubelet" / "root"
        args = [
            str(TEST_DRIVER),
            f"--drivername={DRIVER}",
            f"--kubeconfig={self.cluster.pki / 'admin-inside.kubeconfig'}",
            "kubelet-plugin",
            f"--node-name={self.cluster.node}",
            f"--num-devices={self.devices}",
            f"--datadir={root / 'plugins'}",
            f"--plugin-registration-path={root / 'plugins_registry'}",
            f"--cdi-dir={w / 'cdi'}",
        ]
        # The driver makes the directory above its socket's, not the socket's own (a DaemonSet mounts it).
        self.cluster.namespaces.run("mkdir", "-p", str(root / "plugins" / DRIVER))
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*self.cluster.namespaces.enter, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        apply(self.cluster, device_class())
        if not eventually(lambda: self.published() == self.devices, 60, interval=0.5):
            raise ControlPlaneError(f"the DRA test driver published no devices:\n{self.tail()}")
        return self

    def published(self) -> int:
        """Devices in the node's slices of the driver."""
        query = f"{SLICES}?fieldSelector=spec.nodeName%3D{self.cluster.node},spec.driver%3D{DRIVER}"
        slices = self.cluster.must("GET", query)["items"]
        return sum(len(s["spec"].get("devices") or []) for s in slices)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:]) if self.log.exists() else ""

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.cluster.request("DELETE", f"{SLICES}?fieldSelector=spec.driver%3D{DRIVER}")
        self.cluster.request("DELETE", f"/apis/resource.k8s.io/v1/deviceclasses/{DRIVER}")
