"""A real one-node Kubernetes cluster for the tests: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kube-proxy and the kubelet (all 1.37.2, built from the pinned module by
scripts/peers/build.sh kubernetes) over Debian's containerd, runc and CNI plugins, inside the private
namespaces of tests/node/namespaces.py. Pods really run: images are imported into containerd, the kubelet
mounts projected tokens, runs probes and restarts containers, the scheduler places pods by their selectors
and the node's allocatable resources.

The `nvidia` runtime handler is tests/node/nvidia-container-runtime-standin, which stands for NVIDIA's
container toolkit: it injects NVIDIA's mock NVML library into containers that ask for GPUs.

Only one such node runs on a machine at a time (fixed work directory and cgroup root, a lock). Whatever
a killed test run left behind is swept before a new node starts, and ``stop`` leaves no process, mount,
cgroup or file (see ``sweep``). docs/real-node.md tells the design."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from tests.kube.controlplane import (
    BINARIES,
    ISSUER,
    ROOT,
    ControlPlane,
    ControlPlaneError,
    kubeconfig_document,
)
from tests.node import images
from tests.node.namespaces import NODE_IP, SERVICE_RANGE, Forwarder, Namespaces, is_mounted
from tests.node.pki import Authority, service_account_keys

NODE_NAME = "gpu-labeller-node"
# Fixed, so that the next run finds what a killed one left. Its name is also the kubelet's cgroupRoot (in
# every cgroup v1 hierarchy) and, with .lock, the lock that keeps a second run from sharing the node.
WORKDIR = Path("/tmp/gpu-labeller-node")
CGROUPS = Path("/sys/fs/cgroup")
MOCK_NVML = ROOT / ".cache" / "peers" / "nvidia-mock-nvml" / "libnvidia-ml.so.1"
TOOLKIT_STANDIN = Path(__file__).with_name("nvidia-container-runtime-standin")
CNI_PLUGINS = Path("/usr/lib/cni")
NODE_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
    "kubelet",
)
HOST_TOOLS = ("containerd", "ctr", "containerd-shim-runc-v2", "runc", "iptables", "nsenter", "unshare", "gcc")
# What a node needs from the controllers: tokens for service accounts and the root CA in each namespace,
# DaemonSets and their garbage, namespace deletion, node-lifecycle (which lifts the not-ready taint), the
# pods of a deleted Node (pod GC), the admission policies' type check and the ResourceClaims of pods that
# name a ResourceClaimTemplate (DRA).
CONTROLLERS = (
    "serviceaccount-controller,root-ca-certificate-publisher-controller,"
    "daemonset-controller,garbage-collector-controller,namespace-controller,replicaset-controller,"
    "deployment-controller,node-lifecycle-controller,pod-garbage-collector-controller,"
    "validatingadmissionpolicy-status-controller,resourceclaim-controller"
)
API_PORT = 6443  # inside the node's own network namespace, so fixed ports collide with nothing
ETCD_PORT = 2379


def why_not_runnable() -> str | None:
    """A one-line reason this machine cannot run a node at all (the node tests skip), or None."""
    if os.geteuid() != 0:
        return "the real node needs root (namespaces, mounts, cgroups); run the tests as root, as CI does"
    if not (CGROUPS / "pids").is_dir():
        return "no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids (the test node runs the kubelet on v1)"
    return None


def what_is_missing() -> str | None:
    """What scripts/install-tools.sh should have installed and has not (the node tests fail), or None."""
    built = [BINARIES / name for name in NODE_BINARIES] + [MOCK_NVML]
    missing = [path.name for path in built if not path.exists()]
    missing += [tool for tool in HOST_TOOLS if shutil.which(tool) is None]
    if not (CNI_PLUGINS / "bridge").exists():
        missing.append(f"CNI plugins in {CNI_PLUGINS}")
    return f"{', '.join(missing)} missing: run scripts/install-tools.sh as root" if missing else None


class NodeCluster(ControlPlane):
    """``with NodeCluster() as cluster:``; the access methods (request, kubectl, labels, ...) are the
    control plane's, through a loopback port forwarded into the node's namespace."""

    def __init__(self, workdir: Path = WORKDIR) -> None:
        super().__init__(workdir)
        self.logs = workdir / "logs"
        self.node = NODE_NAME
        self.namespaces = Namespaces(workdir)
        self.pki = workdir / "pki"
        self.ca = self.pki / "ca.crt"
        self.toolkit_config = workdir / "toolkit.json"
        self.events = workdir / "mock-nvml" / "events"
        self.registry_hosts = workdir / "containerd" / "certs.d"  # containerd's registry config_path
        self._spawned: dict[str, subprocess.Popen[bytes]] = {}
        self._forwarders: list[Forwarder] = []
        self._lock: IO[str] | None = None
        self._lock_path = workdir.with_name(workdir.name + ".lock")
        self.started_in = 0.0

    # ---- lifecycle ----

    def start(self) -> None:
        began = time.monotonic()
        self._take_lock()
        sweep(self.workdir)  # what a killed run left behind
        for directory in (
            "logs",
            "cni/net.d",
            "cni/ipam",
            "kubelet/manifests",
            "images",
            "mock-nvml",
        ):
            (self.workdir / directory).mkdir(parents=True, exist_ok=True)
        self.events.touch()
        self.namespaces.create()
        self._certificates()
        self._start_etcd()
        self._start_apiserver(self.pki / "sa.key", self.pki / "sa.pub", self.workdir / "tokens.csv")
        self._write_kubeconfig(self.admin_kubeconfig, self.admin_token)
        self._start_controllers()
        self._start_containerd()
        self._import_images()
        self._start_kubelet()
        self._start_kube_proxy()
        self.started_in = time.monotonic() - began

    def stop(self) -> None:
        if self._lock is None:
            return  # never started (refused the lock): the node in our directory, if any, is another run's
        for forwarder in self._forwarders:
            forwarder.close()
        self._forwarders.clear()
        self._spawned.clear()
        self._processes.clear()
        sweep(self.workdir)
        if self._lock is not None:
            self._lock_path.unlink(missing_ok=True)  # still held: nobody can have taken it meanwhile
            self._lock.close()
            self._lock = None

    def _take_lock(self) -> None:
        """The node's lock file, beside its directory, held until stop (which removes it)."""
        self._lock = open(self._lock_path, "a")  # noqa: SIM115 - held for the node's lifetime
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise ControlPlaneError(f"another test run holds the node ({self._lock_path})") from None
        # A run that stopped between our open and our flock removed the file we locked: not a lock then.
        if (
            not self._lock_path.exists()
            or os.stat(self._lock_path).st_ino != os.fstat(self._lock.fileno()).st_ino
        ):
            self._lock.close()
            self._lock = None
            self._take_lock()

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        binary = str(BINARIES / name) if (BINARIES / name).exists() else name
        with open(self.logs / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                [*self.namespaces.enter, binary, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the test run reaches pytest, not the node's daemons
                env=env,
            )
        self._spawned[name] = process
        self._processes.append(process)
        return process

    # ---- the parts ----

    def _certificates(self) -> None:
        p = self.pki
        authority = Authority(p)
        # Every name the API server is reached by: loopback, the node IP, the `kubernetes` Service.
        names = ["IP:127.0.0.1", f"IP:{NODE_IP}", "IP:10.96.0.1", "DNS:localhost", "DNS:kubernetes"]
        names += ["DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local"]
        authority.issue("apiserver", "/CN=kube-apiserver", usage="serverAuth", names=names)
        authority.issue(
            "apiserver-kubelet-client",
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            usage="clientAuth",
        )
        node_subject = f"/O=system:nodes/CN=system:node:{self.node}"
        authority.issue("kubelet", node_subject, usage="clientAuth")
        authority.issue(
            "kubelet-serving", node_subject, usage="serverAuth", names=[f"IP:{NODE_IP}", f"DNS:{self.node}"]
        )
        service_account_keys(self.pki)
        (self.workdir / "tokens.csv").write_text(f'{self.admin_token},admin,admin-uid,"system:masters"\n')
        # Inside the namespace the components talk to the API server directly.
        inside = f"https://127.0.0.1:{API_PORT}"
        certificate = {"client-certificate": str(p / "kubelet.crt"), "client-key": str(p / "kubelet.key")}
        for who, user in (("admin-inside", {"token": self.admin_token}), ("kubelet", certificate)):
            (p / f"{who}.kubeconfig").write_text(json.dumps(kubeconfig_document(inside, self.ca, user)))

    def _start_etcd(self) -> None:
        client, peer = f"http://127.0.0.1:{ETCD_PORT}", "http://127.0.0.1:2380"
        self._spawn(
            "etcd",
            [
                "--name=node",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=node={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        forwarder = Forwarder(self.namespaces, ("127.0.0.1", ETCD_PORT))
        self._forwarders.append(forwarder)
        self.etcd_port = forwarder.port  # what compact() and the health check use, from the host
        self._wait(self._spawned["etcd"], "etcd", self._etcd_healthy)

    def _start_apiserver(self, sa_key: Path, sa_pub: Path, tokens: Path) -> None:
        if not self.port:
            forwarder = Forwarder(self.namespaces, (NODE_IP, API_PORT))
            self._forwarders.append(forwarder)
            self.port = forwarder.port
        p = self.pki
        self.apiserver = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
                "--bind-address=0.0.0.0",
                f"--advertise-address={NODE_IP}",  # the `kubernetes` Service's endpoint, reached by pods
                f"--secure-port={API_PORT}",
                f"--cert-dir={self.workdir / 'apiserver'}",
                f"--tls-cert-file={p / 'apiserver.crt'}",
                f"--tls-private-key-file={p / 'apiserver.key'}",
                f"--client-ca-file={self.ca}",
                f"--token-auth-file={tokens}",
                f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
                f"--kubelet-certificate-authority={self.ca}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                f"--audit-policy-file={self._audit_policy()}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-mode=blocking",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait(self.apiserver, "kube-apiserver", lambda: self.request("GET", "/readyz").status == 200, 90)

    def _start_controllers(self) -> None:
        inside = str(self.pki / "admin-inside.kubeconfig")
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={inside}",
                f"--controllers={CONTROLLERS}",
                f"--root-ca-file={self.ca}",
                "--leader-elect=false",
                "--secure-port=0",
                "--v=1",
            ],
        )
        self._spawn(
            "kube-scheduler", [f"--kubeconfig={inside}", "--leader-elect=false", "--secure-port=0", "--v=1"]
        )

    def set_toolkit(self, machine: dict[str, str], library: Path = MOCK_NVML) -> None:
        """The simulated hardware the toolkit stand-in gives to GPU containers created from now on."""
        config = {"library": str(library), "machine": machine, "events": str(self.events.parent)}
        self.toolkit_config.write_text(json.dumps(config))

    def _start_containerd(self) -> None:
        w = self.workdir
        self.set_toolkit({"MOCK_NVML_MACHINE": "dgxa100"})
        (w / "containerd.toml").write_text(
            CONTAINERD_CONFIG.format(w=w, standin=TOOLKIT_STANDIN, cni=CNI_PLUGINS)
        )
        (w / "cni" / "net.d" / "10-node.conflist").write_text(json.dumps(cni_config(w / "cni" / "ipam")))
        env = {**os.environ, "GPU_LABELLER_TOOLKIT_CONFIG": str(self.toolkit_config)}
        self._spawn("containerd", ["--config", str(w / "containerd.toml")], env=env)
        self._wait(self._spawned["containerd"], "containerd", lambda: self.ctr("version").returncode == 0)

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        """containerd's own client, in the image namespace the CRI uses."""
        socket = str(self.workdir / "containerd.sock")
        return self.namespaces.run("ctr", "--address", socket, "-n", "k8s.io", *args, check=False)

    def import_image(self, archive: Path) -> None:
        result = self.ctr("images", "import", "--no-unpack", str(archive))
        if result.returncode != 0:
            raise ControlPlaneError(f"ctr images import {archive.name}: {result.stderr.strip()}")

    def _import_images(self) -> None:
        made = self.workdir / "images"
        for image in (images.pause_image(made), images.busybox_image()):
            self.import_image(images.write_archive(image, made / f"{image.name.rsplit('/', 1)[-1]}.tar"))

    def _start_kubelet(self) -> None:
        w, p = self.workdir, self.pki
        (w / "kubelet" / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        for hierarchy in CGROUPS.iterdir():
            if (hierarchy / "cgroup.procs").exists() and hierarchy.name != "unified":
                (hierarchy / w.name).mkdir(exist_ok=True)
        (w / "kubelet" / "config.yaml").write_text(
            json.dumps(kubelet_config(w, p, self.node))  # JSON is YAML
        )
        self._spawn(
            "kubelet",
            [
                f"--config={w / 'kubelet' / 'config.yaml'}",
                f"--kubeconfig={p / 'kubelet.kubeconfig'}",
                f"--root-dir={w / 'kubelet' / 'root'}",
                f"--cert-dir={w / 'kubelet' / 'pki'}",
                f"--hostname-override={self.node}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
        )
        self._wait(self._spawned["kubelet"], "kubelet", self.node_ready, 90)

    def _start_kube_proxy(self) -> None:
        self._spawn(
            "kube-proxy",
            [
                f"--kubeconfig={self.pki / 'admin-inside.kubeconfig'}",
                f"--hostname-override={self.node}",
                "--proxy-mode=iptables",
                "--conntrack-max-per-core=0",  # leave the host's conntrack table alone
                "--cluster-cidr=10.244.0.0/16",
                "--metrics-bind-address=127.0.0.1:10249",
                "--healthz-bind-address=127.0.0.1:10256",
                "--v=1",
            ],
        )
        proxy = self._spawned["kube-proxy"]
        self._wait(proxy, "kube-proxy", lambda: not self.get_node(self.node)["spec"].get("taints"), 60)
        default_account = "/api/v1/namespaces/default/serviceaccounts/default"
        self._wait(proxy, "kube-proxy", lambda: self.request("GET", default_account).status == 200)
        self._wait(proxy, "kube-proxy", self.service_reachable)

    # ---- state ----

    def node_ready(self) -> bool:
        answer = self.request("GET", f"/api/v1/nodes/{self.node}")
        if answer.status != 200:  # 404 until the kubelet has registered the Node
            return False
        conditions = answer.json()["status"].get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def service_reachable(self) -> bool:
        """The `kubernetes` Service answers on its ClusterIP from inside the node's namespace, through the
        iptables rules kube-proxy wrote."""
        result = self.namespaces.run(
            "python3", "-c",
            "import socket; socket.create_connection(('10.96.0.1', 443), timeout=2).close()",
            check=False,
        )  # fmt: skip
        return result.returncode == 0

    def restart_kubelet(self) -> None:
        """SIGTERM the kubelet and start it again, as `systemctl restart kubelet` does; pods keep running."""
        process = self._spawned["kubelet"]
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        self._processes.remove(process)
        self._start_kubelet()

    def memory(self) -> dict[str, int]:
        """Resident memory of each daemon, in KiB."""
        sizes = {}
        for name, process in self._spawned.items():
            status = Path(f"/proc/{process.pid}/status")
            for line in status.read_text().splitlines() if status.exists() else []:
                if line.startswith("VmRSS:"):
                    sizes[name] = int(line.split()[1])
        return sizes


def kubelet_config(w: Path, p: Path, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # KEP-5573: kubelet 1.35+ refuses cgroup v1 unless told; v2 is not here
        "failSwapOn": False,
        "cgroupDriver": "cgroupfs",  # containerd 1.6 has no RuntimeConfig RPC; the kubelet falls back to this
        "cgroupRoot": f"/{w.name}",  # not the machine's /kubepods: ours alone, swept at the end
        "containerRuntimeEndpoint": f"unix://{w / 'containerd.sock'}",
        "address": NODE_IP,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "tlsCertFile": str(p / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(p / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(p / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local",
        "resolvConf": str(w / "kubelet" / "resolv.conf"),
        "staticPodPath": str(w / "kubelet" / "manifests"),
        "podLogsDir": str(w / "kubelet" / "pod-logs"),
        "volumePluginDir": str(w / "kubelet" / "volume-plugins"),
        "imageGCHighThresholdPercent": 100,  # images cannot be pulled again: never collect them
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "maxPods": 30,
        "makeIPTablesUtilChains": False,
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",  # projected volumes and config maps refresh within seconds
    }


def cni_config(ipam: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "gpu-labeller-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "kl-cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam),
                    "ranges": [[{"subnet": "10.244.0.0/24"}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


CONTAINERD_CONFIG = """version = 2
root = "{w}/containerd/root"
state = "{w}/containerd/state"
[grpc]
  address = "{w}/containerd.sock"
[ttrpc]
  address = "{w}/containerd.sock.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  netns_mounts_under_state_dir = true
  sandbox_image = "registry.k8s.io/pause:3.10"
  disable_apparmor = true
  # This sandbox lacks CAP_SYS_RESOURCE: runc could not lower oom_score_adj to the -998 sandboxes ask for.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
    # The chart's runtimeClassName. The stand-in for NVIDIA's toolkit: it injects the mock NVML library.
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
        SystemdCgroup = false
        BinaryName = "{standin}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni}"
    conf_dir = "{w}/cni/net.d"
  # A registry's TLS trust, as a node's admin gives it: certs.d/HOST:PORT/hosts.toml (docs/deploy.md,
  # "Releases"). containerd reads it at each pull, so a test adds one while the node runs.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{w}/containerd/certs.d"
"""


# ---- teardown ----


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _members(namespaces: Namespaces, cgroup_root: str) -> set[int]:
    """Processes in the node's network or mount namespace (its daemons, shims and host-network pods), and
    in its cgroups (every container's processes)."""
    found: set[int] = set()
    identities = set()
    for path in (namespaces.netns, namespaces.mntns):
        with contextlib.suppress(OSError):
            identities.add(os.stat(path).st_ino)
    if identities and any(is_mounted(path) for path in (namespaces.netns, namespaces.mntns)):
        for pid in _pids():
            for kind in ("net", "mnt"):
                try:
                    if os.stat(f"/proc/{pid}/ns/{kind}").st_ino in identities and pid != os.getpid():
                        found.add(pid)
                except OSError:
                    pass
    for procs in (CGROUPS / "pids" / cgroup_root).rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            found.update(int(line) for line in procs.read_text().split())
    return found


def sweep(workdir: Path) -> None:
    """Leave nothing of a node in ``workdir``: kill its processes (SIGKILL: nothing in it is worth a
    graceful stop, and etcd's data goes with it), release its namespaces (and with them every mount and
    network interface made inside), remove its cgroups, delete the directory. Idempotent; also what a
    new node runs first, for a run that was killed before its teardown."""
    namespaces = Namespaces(workdir)
    deadline = time.monotonic() + 30
    while (members := _members(namespaces, workdir.name)) and time.monotonic() < deadline:
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    for child in list(_children()):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child, os.WNOHANG)
    namespaces.release()
    for hierarchy in CGROUPS.iterdir():
        root = hierarchy / workdir.name
        if root.is_dir():
            for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                _rmdir(directory)
            _rmdir(root)
    leftovers = [
        line for line in Path("/proc/self/mountinfo").read_text().splitlines() if f" {workdir}/" in line
    ]
    if leftovers:
        raise ControlPlaneError(f"mounts left under {workdir}: {leftovers}")
    shutil.rmtree(workdir, ignore_errors=True)


def _children() -> list[int]:
    me = str(os.getpid())
    found = []
    for pid in _pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            found.append(pid)
    return found


def _rmdir(directory: Path) -> None:
    for _ in range(50):
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)  # a cgroup empties a moment after its last process dies
