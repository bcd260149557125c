"""Where real selectors land: a mixed fleet labelled by the real pipeline, and the real kube-scheduler.

Each GPU Node gets its labels as in a cluster: gfd computes them from the machine (the mock backend over a
profile in profiles/, or the NVML backend over the fake NVML library for the two H100 nodes, one with a GPU
fallen off the bus), and a real nfd-lite process with a pod-bound token, rbac/ applied, writes them to its
Node. The CPU node runs no labeller (the chart's default affinity keeps it off nodes without an NVIDIA GPU).
Then pods carrying the selectors users write (docs/labels.md, "Selector cookbook") are placed by the real
kube-scheduler. Where each pod may land is decided here from the profiles' own facts (the YAML: GPU names,
memory, compute capability, CUDA and driver versions, MIG devices, sharing, JetPack), never from the labels:
each pod must be bound to one of those nodes, or, where none fits, stay Pending with the scheduler's reason.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gfd import cli as gfd_cli
from gfd.machine_profile import load_machine_profile
from tests.fakes.fake_nvml import install_fake_nvml
from tests.fakes.nvml_faults import LOST
from tests.kube.controlplane import ROOT, ControlPlane
from tests.kube.fixtures import apply_rbac
from tests.kube.writer import PodWriter, eventually

PROFILES = ROOT / "profiles"
NAMESPACE = "placement"
WRITERS_AT_ONCE = 3  # each is a Python process; more than this only queues on two cores


@dataclass(frozen=True)
class Machine:
    """One Node of the fleet and how gfd sees it."""

    node: str
    profile: str | None  # under profiles/; None: no GPU, no labeller
    arch: str = "amd64"
    gfd_args: tuple[str, ...] = ()
    nvml: bool = False  # the NVML backend over the fake library (health labels), else the mock backend
    lost: tuple[int, ...] = ()  # GPUs that fall off the bus (NVML backend only)


FLEET = [
    Machine("dgx-a100", "dgx-a100-mig-mixed.yaml", gfd_args=("--mig-strategy", "mixed")),
    Machine("h100", "h100.yaml", nvml=True),
    Machine("h100-degraded", "h100.yaml", nvml=True, lost=(3,)),
    Machine(
        "t4", "t4-cloud.yaml", gfd_args=("--config-file", str(PROFILES / "sharing" / "time-slicing.yaml"))
    ),
    Machine("rtx4090", "rtx4090-gaming-pc.yaml"),
    Machine("jetson-orin", "jetson-orin-nano.yaml", arch="arm64"),
    Machine("gb200", "gb200-nvl72-tray.yaml", arch="arm64"),
    Machine("gb300", "gb300-nvl72-tray.yaml", arch="arm64"),
    Machine("vr200", "vr200-nvl-tray.yaml", arch="arm64"),
    Machine("cpu", None),
]


# ---- the facts, from the profile YAML alone ----


@dataclass(frozen=True)
class Facts:
    """What the machine is, as its profile says (plus the GPUs the test breaks)."""

    node: str
    models: frozenset[str] = frozenset()  # GPU names as the driver reports them
    memory_mib: int | None = None  # the smallest GPU's
    compute: frozenset[tuple[int, int]] = frozenset()
    cuda: int | None = None  # NVML's CUDA driver version: 1000*major + 10*minor
    driver_major: int | None = None
    mig: Counter[str] = field(default_factory=Counter)  # MIG devices by profile, when labelled per profile
    shared_replicas: int = 1  # time-slicing replicas per GPU, without renameByDefault
    jetpack: str | None = None
    broken: int = 0

    @property
    def gpu(self) -> bool:
        return bool(self.models)


def facts(machine: Machine) -> Facts:
    if machine.profile is None:
        return Facts(machine.node)
    profile: dict[str, Any] = yaml.safe_load((PROFILES / machine.profile).read_text())
    devices: list[dict[str, Any]] = profile.get("devices") or []
    mig: Counter[str] = Counter()
    if "mixed" in machine.gfd_args:
        for device in devices:
            if (device.get("mig") or {}).get("enabled"):
                mig.update(m["profile"] for m in device["mig"].get("devices") or [])
    compute = set()
    for device in devices:
        major, minor = str(device["compute_capability"]).split(".")
        compute.add((int(major), int(minor)))
    replicas = 1
    if "--config-file" in machine.gfd_args:
        config = yaml.safe_load(
            Path(machine.gfd_args[machine.gfd_args.index("--config-file") + 1]).read_text()
        )
        slicing = config["sharing"]["timeSlicing"]
        if not slicing.get("renameByDefault"):
            replicas = max(r["replicas"] for r in slicing["resources"] if r["name"] == "nvidia.com/gpu")
    driver = profile.get("driver_version")
    return Facts(
        node=machine.node,
        models=frozenset(d["name"] for d in devices),
        memory_mib=min(d["memory_mib"] for d in devices),
        compute=frozenset(compute),
        cuda=profile.get("cuda_driver_version"),
        driver_major=int(str(driver).split(".")[0]) if driver else None,
        mig=mig,
        shared_replicas=replicas,
        jetpack=(profile.get("jetson") or {}).get("jetpack_version"),
        broken=len(machine.lost),
    )


# ---- the pods: the selectors users write, and where they may land ----


def match(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return expression


def affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    """Required node affinity; terms are ORed, the expressions of one term ANDed."""
    selector = {"nodeSelectorTerms": [{"matchExpressions": term} for term in terms]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}


@dataclass(frozen=True)
class Case:
    name: str
    want: Callable[[Facts], bool]  # from the machine's facts: may the pod run there?
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: dict[str, Any] = field(default_factory=dict)


H100, T4 = "NVIDIA H100 80GB HBM3", "Tesla T4"
NOT_DEGRADED = match("nvidia.com/gpu.health", "NotIn", "degraded")


def ampere(f: Facts) -> bool:  # NVIDIA's CUDA GPUs page: Ampere is 8.0 to 8.7 (8.9 is Ada Lovelace)
    return any((8, 0) <= cc <= (8, 7) for cc in f.compute)


def blackwell(f: Facts) -> bool:  # 10.0 (B200, GB200), 10.3 (B300, GB300); 10.7 is Rubin
    return bool(f.compute & {(10, 0), (10, 3)})


CASES = [
    Case("product-h100", lambda f: H100 in f.models, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
    Case(
        "product-h100-not-degraded",
        lambda f: H100 in f.models and not f.broken,
        affinity=affinity([match("nvidia.com/gpu.product", "In", "NVIDIA-H100-80GB-HBM3"), NOT_DEGRADED]),
    ),
    # A time-sliced T4 is Tesla-T4-SHARED: the plain model name no longer selects it.
    Case(
        "product-t4-whole",
        lambda f: T4 in f.models and f.shared_replicas == 1,
        {"nvidia.com/gpu.product": "Tesla-T4"},
    ),
    Case(
        "product-t4-shared",
        lambda f: T4 in f.models and f.shared_replicas > 1,
        {"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
    ),
    Case(
        "product-t4-either",
        lambda f: T4 in f.models,
        affinity=affinity([match("nvidia.com/gpu.product", "In", "Tesla-T4", "Tesla-T4-SHARED")]),
    ),
    # The Jetson Orin is an Ampere GPU too (8.7).
    Case("family-ampere", ampere, {"nvidia.com/gpu.family": "ampere"}),
    Case(
        "family-ampere-not-jetson",
        lambda f: ampere(f) and f.jetpack is None,
        {"nvidia.com/gpu.family": "ampere"},
        affinity([match("nvidia.com/jetson.soc", "DoesNotExist")]),
    ),
    Case("family-blackwell", blackwell, {"nvidia.com/gpu.family": "blackwell"}),
    Case("family-rubin", lambda f: (10, 7) in f.compute, {"nvidia.com/gpu.family": "rubin"}),
    Case(
        "compute-9-or-newer",
        lambda f: any(cc >= (9, 0) for cc in f.compute),
        affinity=affinity([match("nvidia.com/gpu.compute.major", "Gt", "8")]),
    ),
    Case(
        "memory-over-40gib",
        lambda f: (f.memory_mib or 0) > 40 * 1024,
        affinity=affinity([match("nvidia.com/gpu.memory", "Gt", "40960")]),
    ),
    Case(
        "memory-over-40gib-not-degraded",
        lambda f: (f.memory_mib or 0) > 40 * 1024 and not f.broken,
        affinity=affinity([match("nvidia.com/gpu.memory", "Gt", "40960"), NOT_DEGRADED]),
    ),
    Case(
        "cuda-12.4-or-newer",
        lambda f: (f.cuda or 0) >= 12040,
        affinity=affinity([match("nvidia.com/cuda.runtime-version.code", "Gt", "12039")]),
    ),
    Case(
        "cuda-12.8-or-newer",
        lambda f: (f.cuda or 0) >= 12080,
        affinity=affinity([match("nvidia.com/cuda.runtime-version.code", "Gt", "12079")]),
    ),
    Case(
        "cuda-13.10-or-newer",
        lambda f: (f.cuda or 0) >= 13100,
        affinity=affinity([match("nvidia.com/cuda.runtime-version.code", "Gt", "13099")]),
    ),
    Case(
        "driver-r550-or-newer",
        lambda f: (f.driver_major or 0) >= 550,
        affinity=affinity([match("nvidia.com/cuda.driver-version.major", "Gt", "549")]),
    ),
    Case(
        "mig-1g.5gb-eight",
        lambda f: f.mig["1g.5gb"] >= 8,
        affinity=affinity([match("nvidia.com/mig-1g.5gb.count", "Gt", "7")]),
    ),
    Case(
        "mig-3g.20gb",
        lambda f: f.mig["3g.20gb"] >= 1,
        affinity=affinity([match("nvidia.com/mig-3g.20gb.count", "Gt", "0")]),
    ),
    Case(
        "mig-7g.40gb",
        lambda f: f.mig["7g.40gb"] >= 1,
        affinity=affinity([match("nvidia.com/mig-7g.40gb.count", "Gt", "0")]),
    ),
    Case("jetpack-6.1", lambda f: f.jetpack == "6.1", {"nvidia.com/jetson.jetpack-version": "6.1"}),
    Case(
        "gpu-not-degraded",
        lambda f: f.gpu and not f.broken,
        affinity=affinity([match("nvidia.com/gpu.present", "In", "true"), NOT_DEGRADED]),
    ),
    Case(
        "no-gpu",
        lambda f: not f.gpu,
        affinity=affinity([match("nvidia.com/gpu.present", "DoesNotExist")]),
    ),
]


# `kubectl get nodes -l` forms of some of these rules (docs/labels.md), each with the case it equals.
KUBECTL_SELECTORS = {
    "nvidia.com/cuda.runtime-version.code>12079": "cuda-12.8-or-newer",
    "nvidia.com/gpu.memory>40960,nvidia.com/gpu.health!=degraded": "memory-over-40gib-not-degraded",
    "nvidia.com/gpu.product in (Tesla-T4,Tesla-T4-SHARED)": "product-t4-either",
    "nvidia.com/mig-1g.5gb.count>7": "mig-1g.5gb-eight",
    "!nvidia.com/gpu.present": "no-gpu",
}


# ---- the fleet on a control plane of its own, with the real scheduler ----


def node_object(machine: Machine) -> dict[str, Any]:
    """A Node as a kubelet registers it, Ready and with room for pods; no kubelet runs: pods are only
    bound."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "500Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": machine.node,
            "labels": {
                "kubernetes.io/hostname": machine.node,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": machine.arch,
            },
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {"kubeletVersion": "v1.37.2"},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting"}
            ],
        },
    }


def gfd_labels(machine: Machine, features: Path) -> subprocess.Popen[bytes] | None:
    """gfd writes the machine's feature file into ``features``: the mock backend in its own process (it
    returns the process), or the NVML backend over the fake library in this one (done on return)."""
    assert machine.profile is not None
    output = ["--oneshot", "--output-file", str(features / "gfd"), *machine.gfd_args]
    if not machine.nvml:
        mock = ["--backend", "mock", "--mock-profile", str(PROFILES / machine.profile)]
        with open(features.parent / "gfd.log", "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "gfd", *mock, *output], stdout=log, stderr=log, cwd=ROOT
            )
    host = features.parent / "host"
    with pytest.MonkeyPatch.context() as patch, _gfd_in_this_process():
        fake = install_fake_nvml(patch, load_machine_profile(PROFILES / machine.profile))
        fake.write_host_root(host)
        for index in machine.lost:
            fake.break_gpu(index, LOST)
        assert gfd_cli.main(["--backend", "nvml", "--host-root", str(host), *output]) == 0
    return None


@contextlib.contextmanager
def _gfd_in_this_process() -> Iterator[None]:
    """gfd's main takes over the signals and its logger as a process of its own would: give them back to
    pytest, so later tests (caplog on gfd's logger, Ctrl-C) find them as they were."""
    signals = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    logger = logging.getLogger("gfd")
    state = (logger.handlers[:], logger.level, logger.propagate)
    try:
        yield
    finally:
        for number, handler in signals.items():
            signal.signal(number, handler)
        logger.handlers[:], logger.level, logger.propagate = state


def label_fleet(kube: ControlPlane, workdir: Path) -> None:
    """gfd, then one oneshot nfd-lite with its pod-bound token per GPU node, a few at a time."""
    gpu_machines = [m for m in FLEET if m.profile is not None]
    dirs = {m.node: workdir / m.node / "features.d" for m in gpu_machines}
    running = []
    for machine in gpu_machines:
        dirs[machine.node].mkdir(parents=True)
        if (process := gfd_labels(machine, dirs[machine.node])) is not None:
            running.append((machine.node, process))
    for node, process in running:
        log = workdir / node / "gfd.log"
        assert process.wait(120) == 0, f"gfd for {node} exited with {process.returncode}: {log.read_text()}"
    for start in range(0, len(gpu_machines), WRITERS_AT_ONCE):
        batch = [
            PodWriter(kube, workdir / m.node, m.node, "--oneshot")
            for m in gpu_machines[start:][:WRITERS_AT_ONCE]
        ]
        for writer in batch:
            writer.start()
        for writer in batch:
            assert writer.process is not None
            assert writer.process.wait(120) == 0, writer.output()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    workdir = tmp_path_factory.mktemp("placement")
    with ControlPlane(workdir / "kube") as kube:
        apply_rbac(kube)
        kube.delete_node("policy-probe")  # apply_rbac's: not one of the fleet
        for machine in FLEET:
            kube.must("POST", "/api/v1/nodes", node_object(machine))
            # Admission taints a new Node not-ready until the node lifecycle controller sees it Ready and
            # lifts the taint; that controller does not run here, so the test does what it would.
            kube.must("PATCH", f"/api/v1/nodes/{machine.node}", {"spec": {"taints": None}},
                      content_type="application/merge-patch+json")  # fmt: skip
        label_fleet(kube, workdir)
        kube.start_scheduler()
        # No controller makes the namespace's default account, which admission wants for every pod.
        kube.ensure_service_account(NAMESPACE, "default")
        yield kube


def pod_object(case: Case) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "app",
                "image": "registry.invalid/app:test",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }
        ],
    }
    if case.node_selector:
        spec["nodeSelector"] = case.node_selector
    if case.affinity:
        spec["affinity"] = case.affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": case.name}, "spec": spec}


def unschedulable(pod: dict[str, Any]) -> str | None:
    """The scheduler's reason on the PodScheduled condition, once it gave up on the pod."""
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message", ""))
    return None


def test_each_pod_lands_where_the_machines_facts_say_or_stays_pending_saying_why(fleet: ControlPlane) -> None:
    kube = fleet
    every = {m.node: facts(m) for m in FLEET}
    expected = {case.name: {node for node, f in every.items() if case.want(f)} for case in CASES}
    # The fleet is diverse enough that the selectors tell machines apart: each lands on a proper subset,
    # and some on none.
    assert all(len(nodes) < len(FLEET) for nodes in expected.values()), expected
    assert any(not nodes for nodes in expected.values()) and sum(bool(n) for n in expected.values()) > 15

    for case in CASES:
        kube.must("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod_object(case))

    def pods() -> dict[str, dict[str, Any]]:
        listed = kube.must("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        return {p["metadata"]["name"]: p for p in listed}

    def bound_as_expected() -> bool:
        now = pods()
        return all(now[name]["spec"].get("nodeName") for name, nodes in expected.items() if nodes)

    def pending_said_why() -> bool:
        now = pods()
        return all(unschedulable(now[name]) for name, nodes in expected.items() if not nodes)

    # Both wait for the scheduler only; where a pod lands is judged below.
    eventually(bound_as_expected, 90, 0.2)
    eventually(pending_said_why, 90, 0.2)
    placed = pods()

    def labels_of(nodes: set[str] | list[str]) -> str:
        return "\n".join(
            f"  {n}: "
            + ", ".join(f"{k}={v}" for k, v in sorted(kube.labels(n).items()) if k.startswith("nvidia.com/"))
            for n in sorted(nodes)
        )

    wrong = []
    for case in CASES:
        pod, nodes = placed[case.name], expected[case.name]
        where = pod["spec"].get("nodeName")
        if nodes and where not in nodes:
            why = unschedulable(pod)
            wrong.append(f"{case.name}: on {where or f'no node ({why})'}, expected one of {sorted(nodes)}")
        elif not nodes and where:
            wrong.append(f"{case.name}: bound to {where}, expected to stay Pending")
    assert not wrong, "\n".join(wrong) + "\nthe fleet's labels:\n" + labels_of(list(every))

    # Pending with the scheduler's own reason: no node matches the selector, said on the pod and in an event.
    events = kube.must("GET", f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
    for case in CASES:
        if expected[case.name]:
            continue
        message = unschedulable(placed[case.name]) or ""
        assert f"0/{len(FLEET)} nodes are available" in message, message
        assert "didn't match Pod's node affinity/selector" in message, message
        said = [
            e
            for e in events
            if e["involvedObject"]["name"] == case.name and e["reason"] == "FailedScheduling"
        ]
        assert said and "didn't match Pod's node affinity/selector" in said[-1]["message"], said

    # The cookbook's kubectl lines select the same nodes as the pod with the same rule.
    for selector, case_name in KUBECTL_SELECTORS.items():
        listed = kube.kubectl("get", "nodes", "-l", selector, "-o", "name").stdout.split()
        assert {line.removeprefix("node/") for line in listed} == expected[case_name], selector


def columns(table: str) -> list[dict[str, str]]:
    """kubectl's table as rows of header -> cell; cells are aligned under their headers, and empty for a
    label a node does not have."""
    header, *lines = table.splitlines()
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [header[a:b].strip() for a, b in bounds]
    return [{name: line[a:b].strip() for name, (a, b) in zip(names, bounds, strict=True)} for line in lines]


def test_the_fleet_columns_show_each_nodes_gpu(fleet: ControlPlane) -> None:
    """`kubectl get nodes -L ...`, as the cookbook shows it: one row per node, the GPU's product, family,
    CUDA version and health in columns of their own, empty where the node has no such label."""
    keys = ",".join(
        f"nvidia.com/{key}"
        for key in ("gpu.product", "gpu.family", "cuda.runtime-version.full", "gpu.health")
    )
    table = fleet.kubectl("get", "nodes", "-L", keys).stdout
    print(table)
    rows = {row["NAME"]: row for row in columns(table)}
    assert set(rows) == {m.node for m in FLEET}
    cells = ("GPU.PRODUCT", "GPU.FAMILY", "CUDA.RUNTIME-VERSION.FULL", "GPU.HEALTH")

    def row(node: str) -> tuple[str, ...]:
        return tuple(rows[node][c] for c in cells)

    assert row("vr200") == ("NVIDIA-Graphics-Device", "rubin", "13.4", "")  # the mock backend tells no health
    assert row("h100-degraded") == ("NVIDIA-H100-80GB-HBM3", "hopper", "12.4", "degraded")
    assert row("h100") == ("NVIDIA-H100-80GB-HBM3", "hopper", "12.4", "ok")
    assert row("t4") == ("Tesla-T4-SHARED", "turing", "12.2", "")
    assert row("cpu") == ("", "", "", "")
