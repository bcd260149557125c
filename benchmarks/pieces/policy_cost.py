"""What the admission policy (rbac/admission-policy.yaml) costs the API server per writer PATCH.

    python -m benchmarks policy-cost [--quick] [--policy FILE] [--runs N] [--policy-patches K]

A real control plane of its own (tests/kube: etcd, kube-apiserver, the controller that type-checks
policies), rbac/ applied with ``--policy FILE`` in place of rbac/admission-policy.yaml, so another version
of the policy can be compared (``git show REV:rbac/admission-policy.yaml > /tmp/policy.yaml``). For each
count N of owned labels, a Node set up the way a cluster has it: registered by a "kubelet" (labels,
annotations and a status of its own, under field manager ``kubelet``), then the writer's first write with
its pod-bound token (N labels under nvidia.com/ and the ownership record listing them, one merge patch
with fieldManager=nfd-lite, as nfd_lite/node/reconciler.py plans it), then seven administrators' ``kubectl
label`` / ``kubectl annotate`` writes under field managers of their own (the GPU Operator's deploy label
among them): ten managedFields entries, the most the server keeps apart, which the policy checks on
every writer PATCH.

Each run sends K PATCHes per Node, each changing ONE label's value exactly as the writer sends it (the
label, the whole ownership record, the resourceVersion as a precondition; one kept-alive connection, the
writer's user agent and token), and reads kube-apiserver's CPU (every thread's schedstat) across them: CPU
ms per PATCH. Runs alternate between the policy bound and its ValidatingAdmissionPolicyBinding deleted,
the one going first swapping every round; each switch waits until a dry-run PATCH the policy refuses (a
label outside the allowed prefixes, from the writer) is refused, or admitted, as the binding says.

Every other write to a Node passes the same admission plugin: the policy's matchConstraints match
``nodes`` and ``nodes/status``, and only its matchConditions (the writer's service account) keep it from
evaluating the rest. So each run also sends K kubelet-style status updates per Node, from the Node's own
kubelet identity (a client certificate for ``system:node:NAME`` in ``system:nodes``, as the Node
authorizer and NodeRestriction see a kubelet): a strategic-merge PATCH of ``nodes/NAME/status`` moving
every condition's lastHeartbeatTime on, with the kubelet's user agent (field manager ``kubelet``), as
the kubelet's node status update sends it. For both kinds the server's own time in the
ValidatingAdmissionPolicy plugin (its /metrics: the admission controller duration's sum over the window)
per PATCH is the latency the policy adds; for the kubelet's also the round trip the client sees.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from benchmarks.support.control_plane import control_plane
from benchmarks.support.measure import Figure, interleaved, thread_cpu_seconds
from benchmarks.support.paths import ROOT
from nfd_lite.api.client import FIELD_MANAGER, MERGE_PATCH, USER_AGENT
from nfd_lite.node.reconciler import OWNED_ANNOTATION
from tests.kube.controlplane import WRITER_NAMESPACE, ControlPlane
from tests.kube.nfd import KUBELET_ANNOTATIONS, KUBELET_LABELS
from tests.node.pki import Pair

RBAC_DIR = ROOT / "rbac"
SHIPPED_POLICY = RBAC_DIR / "admission-policy.yaml"
COUNTS = (30, 300, 1000)
BINDING_KIND = "ValidatingAdmissionPolicyBinding"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
LABEL_PREFIX = "nvidia.com/bench."  # under an allowed prefix, no GPU Operator control label
CONDITION_TYPES = ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
# The server names a request's field manager after its user agent up to the "/": a kubelet's is "kubelet",
# the manager of the status the Node was registered with (no eleventh managedFields entry).
KUBELET_AGENT = "kubelet/v1.37.2 (linux/amd64) kubernetes/0000000"
HEARTBEAT_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
# The admission plugin's time per request, summed by the server (seconds): the policy's own latency.
ADMISSION_SUM = re.compile(
    r"^apiserver_admission_controller_admission_duration_seconds_sum\{([^}]*)\} (\S+)$", re.MULTILINE
)
ADMISSION_LABELS = ('name="ValidatingAdmissionPolicy"', 'operation="UPDATE"', 'rejected="false"')
# Administrators' writes after the writer's first: (verb, field manager, key=value). Distinct managers, as
# a cluster run by several people and tools has them; gpu-operator's is a foreign label under nvidia.com/.
# Seven, so that with the kubelet's two entries (the Node, its status) and the writer's the Node holds ten
# Update entries, the server's cap: past it the server folds the oldest entries into one "ancient-changes"
# entry (which the policy as of 44b1c3a refused; tests/kube/test_busy_node.py covers that merge).
ADMIN_WRITES = (
    ("label", "kubectl-label", "topology.kubernetes.io/zone=eu-west-1a"),
    ("label", "terraform", "node.kubernetes.io/instance-type=p5.48xlarge"),
    ("label", "gpu-operator", "nvidia.com/gpu.deploy.driver=true"),
    ("label", "ops-alice", "team=ml-platform"),
    ("label", "ops-bob", "cost-center=4711"),
    ("annotate", "kubectl-annotate", "ops.example.com/maintenance-window=sun-0200"),
    ("annotate", "ops-carol", "example.com/owner=carol"),
)


class PolicyFileError(Exception):
    """The --policy file cannot be used (the message names the file and why)."""


@dataclass(frozen=True)
class PolicyFile:
    path: Path
    binding: dict[str, Any]  # its ValidatingAdmissionPolicyBinding, to create again after a deletion
    digest: str  # which version of the file was measured

    @classmethod
    def read(cls, path: Path) -> PolicyFile:
        try:
            text = path.read_text()
            documents = [d for d in yaml.safe_load_all(text) if d]
        except (OSError, yaml.YAMLError) as err:
            raise PolicyFileError(f"--policy {path}: cannot read it: {err}") from err
        kinds = [d.get("kind") if isinstance(d, dict) else None for d in documents]
        bindings = [d for d, kind in zip(documents, kinds, strict=True) if kind == BINDING_KIND]
        if len(bindings) != 1:
            raise PolicyFileError(
                f"--policy {path}: needs exactly one ValidatingAdmissionPolicyBinding, has {len(bindings)}"
            )
        return cls(path, bindings[0], hashlib.sha256(text.encode()).hexdigest()[:12])

    def describe(self) -> str:
        try:
            shown = self.path.resolve().relative_to(ROOT)
        except ValueError:
            shown = self.path
        return f"{shown} (sha256 {self.digest})"


def apply_rbac(kube: ControlPlane, policy: PolicyFile) -> None:
    """rbac/ as the README applies it, with ``policy`` in place of the shipped admission policy."""
    kube.ensure_namespace(WRITER_NAMESPACE)
    files = [f for f in sorted(RBAC_DIR.glob("*.yaml")) if f.name != SHIPPED_POLICY.name] + [policy.path]
    for file in files:
        kube.kubectl("apply", "--server-side", "--field-manager=gpu-labeller-tests", "-f", str(file))
    kube.settle_policies()


# ---- the Node, as a cluster has it ------------------------------------------------------------------


def _kubelet_status() -> dict[str, Any]:
    """What a kubelet reports for a GPU node (sizes as a real one's: conditions, addresses, images)."""
    stamp = "2025-01-01T00:00:00Z"
    conditions = [
        {"type": kind, "status": "False", "reason": f"Kubelet Has No {kind}", "message": "ok"}
        for kind in CONDITION_TYPES[:-1]
    ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready"}]
    resources = {"cpu": "192", "memory": "2113425040Ki", "pods": "110", "nvidia.com/gpu": "8"}
    resources |= {"ephemeral-storage": "3750157828Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    image = "registry.example.com/team/image-{}"
    images = [
        {"names": [f"{image.format(i)}@sha256:{i:064x}", f"{image.format(i)}:v1"], "sizeBytes": 10**8 + i}
        for i in range(20)
    ]
    software = {"kernelVersion": "6.8.0", "osImage": "Ubuntu 24.04 LTS", "kubeletVersion": "v1.37.0"}
    software |= {"containerRuntimeVersion": "containerd://2.0.0", "kubeProxyVersion": ""}
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{**c, "lastHeartbeatTime": stamp, "lastTransitionTime": stamp} for c in conditions],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}, {"type": "Hostname", "address": "gpu"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            **{name: "0" * 32 for name in ("machineID", "systemUUID", "bootID")},
            **software,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": images,
    }


def owned_keys(count: int) -> list[str]:
    return [f"{LABEL_PREFIX}{i:04d}" for i in range(count)]


def prepare_node(kube: ControlPlane, name: str, count: int) -> str:
    """The Node with ``count`` writer-owned labels and the foreign content around them; the writer's token."""
    meta = {"name": name, "labels": KUBELET_LABELS, "annotations": KUBELET_ANNOTATIONS}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
    kube.must("POST", "/api/v1/nodes?fieldManager=kubelet", node)
    status = {"status": _kubelet_status()}
    kube.must("PATCH", f"/api/v1/nodes/{name}/status?fieldManager=kubelet", status, content_type=MERGE_PATCH)
    token = kube.pod_token(name)
    keys = owned_keys(count)
    first = {
        "metadata": {
            "resourceVersion": kube.get_node(name)["metadata"]["resourceVersion"],
            "labels": {key: "true" for key in keys},
            "annotations": {OWNED_ANNOTATION: ",".join(keys)},  # already sorted
        }
    }
    path = f"/api/v1/nodes/{name}?fieldManager={FIELD_MANAGER}"
    kube.must("PATCH", path, first, token=token, content_type=MERGE_PATCH)
    for verb, manager, pair in ADMIN_WRITES:
        kube.kubectl(verb, "node", name, pair, f"--field-manager={manager}")
    check_managers(kube, name)
    return token


def check_managers(kube: ControlPlane, name: str) -> None:
    """The Node's ten managedFields entries are the ones set up, no more (the writer's PATCH is checked
    against every one of them, so another entry, or ancient-changes, would measure another Node)."""
    entries = kube.get_node(name)["metadata"].get("managedFields") or []
    managers = sorted(
        f"{e['manager']}{'/' + e['subresource'] if e.get('subresource') else ''}" for e in entries
    )
    expected = sorted(["kubelet", "kubelet/status", FIELD_MANAGER, *(m for _, m, _ in ADMIN_WRITES)])
    if managers != expected:  # a server that caps or records managers otherwise measures something else
        raise RuntimeError(f"node {name}: managedFields entries {managers}, expected {expected}")


def _connection(kube: ControlPlane, cert: Pair | None = None) -> http.client.HTTPSConnection:
    """One kept-alive connection to the server, as a client holds it (with ``cert``: a kubelet's)."""
    context = ssl.create_default_context(cafile=str(kube.ca))
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    return http.client.HTTPSConnection("127.0.0.1", kube.port, context=context, timeout=60)


def _send(connection: http.client.HTTPSConnection, path: str, body: Any, headers: dict[str, str]) -> Any:
    connection.request("PATCH", path, json.dumps(body).encode(), headers)
    response = connection.getresponse()
    answer = response.read()
    if response.status != 200:
        raise RuntimeError(f"PATCH {path}: {response.status} {answer[:400]!r}")
    return json.loads(answer)


class Writer:
    """The writer's PATCHes to its Node over one kept-alive connection, each changing one label's value."""

    def __init__(self, kube: ControlPlane, node: str, token: str, count: int) -> None:
        self.kube, self.node, self.keys = kube, node, owned_keys(count)
        self.record = ",".join(self.keys)
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "Content-Type": MERGE_PATCH,
            "User-Agent": USER_AGENT,
        }
        self.version = ""
        self.resync()
        self.sent = 0
        self.connection = _connection(kube)

    def resync(self) -> None:
        """The Node's resourceVersion as the writer's watch would deliver it after someone else's write."""
        self.version = self.kube.get_node(self.node)["metadata"]["resourceVersion"]

    def patch(self) -> None:
        key = self.keys[self.sent % len(self.keys)]
        self.sent += 1
        body = {
            "metadata": {
                "resourceVersion": self.version,
                "labels": {key: f"v{self.sent}"},
                "annotations": {OWNED_ANNOTATION: self.record},  # the writer sends its whole record
            }
        }
        path = f"/api/v1/nodes/{self.node}?fieldManager={FIELD_MANAGER}"
        self.version = _send(self.connection, path, body, self.headers)["metadata"]["resourceVersion"]

    def close(self) -> None:
        self.connection.close()


class Kubelet:
    """The Node's kubelet: its status updates, each moving every condition's heartbeat on 10 s."""

    def __init__(self, kube: ControlPlane, node: str) -> None:
        self.node = node
        # The Node authorizer and NodeRestriction let system:node:NAME write only its own Node.
        self.cert = kube.client_certificate(f"system:node:{node}", ("system:nodes",))
        self.headers = {
            "Accept": "application/json",
            "Content-Type": STRATEGIC_PATCH,
            "User-Agent": KUBELET_AGENT,
        }
        self.sent = 0
        self.connection = _connection(kube, self.cert)

    def patch(self) -> None:
        self.sent += 1
        stamp = (HEARTBEAT_EPOCH + timedelta(seconds=10 * self.sent)).strftime("%Y-%m-%dT%H:%M:%SZ")
        # As the kubelet computes it: a two-way strategic merge patch between the Node it read and the one
        # it reports (the conditions' order kept, each condition's changed field by its merge key).
        body = {
            "status": {
                "$setElementOrder/conditions": [{"type": kind} for kind in CONDITION_TYPES],
                "conditions": [{"lastHeartbeatTime": stamp, "type": kind} for kind in CONDITION_TYPES],
            }
        }
        _send(self.connection, f"/api/v1/nodes/{self.node}/status", body, self.headers)

    def close(self) -> None:
        self.connection.close()


# ---- the binding --------------------------------------------------------------------------------------


class Binding:
    """Deletes and creates the policy's binding, and waits until the server enforces what it says."""

    def __init__(self, kube: ControlPlane, policy: PolicyFile, probe_node: str, token: str) -> None:
        self.kube, self.policy, self.probe_node, self.token = kube, policy, probe_node, token
        self.name = str(policy.binding["metadata"]["name"])
        self.bound = True  # as applied

    def enforced(self) -> bool:
        """A dry-run write the policy refuses (a label outside the allowed prefixes, from the writer)."""
        answer = self.kube.request(
            "PATCH",
            f"/api/v1/nodes/{self.probe_node}?dryRun=All&fieldManager={FIELD_MANAGER}",
            {"metadata": {"labels": {"example.com/policy-probe": "x"}}},
            token=self.token,
            content_type=MERGE_PATCH,
        )
        if answer.status == 200:
            return False
        if answer.status == 403 and "ValidatingAdmissionPolicy" in answer.message:
            return True
        raise RuntimeError(f"policy probe on {self.probe_node}: {answer.status} {answer.message}")

    def set(self, bound: bool) -> None:
        if bound == self.bound:
            return
        if bound:
            self.kube.must("POST", BINDINGS, self.policy.binding)
        else:
            self.kube.must("DELETE", f"{BINDINGS}/{self.name}")
        self.wait(bound)
        self.bound = bound

    def wait(self, bound: bool, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.enforced() != bound:
            if time.monotonic() > deadline:
                state = "enforced" if bound else "lifted"
                raise RuntimeError(f"the policy of {self.policy.path} was not {state} within {timeout:.0f} s")
            time.sleep(0.2)


# ---- the run ------------------------------------------------------------------------------------------


def idle_cpu_ms_per_s(pid: int, seconds: float = 3.0) -> float:
    before = thread_cpu_seconds(pid)
    time.sleep(seconds)
    return (thread_cpu_seconds(pid) - before) * 1000 / seconds


def admission_seconds(kube: ControlPlane) -> float:
    """The server's time in the ValidatingAdmissionPolicy plugin so far, over every admitted UPDATE."""
    answer = kube.request("GET", "/metrics")
    if answer.status != 200:
        raise RuntimeError(f"GET /metrics: {answer.status} {answer.message[:200]}")
    text = answer.body.decode()
    found = [
        float(value)
        for labels, value in ADMISSION_SUM.findall(text)
        if all(label in labels.split(",") for label in ADMISSION_LABELS)
    ]
    if len(found) != 1:  # a server that names the metric otherwise measures nothing here
        raise RuntimeError(
            f"/metrics: {len(found)} admitted-UPDATE sums of the ValidatingAdmissionPolicy plugin"
        )
    return found[0]


@dataclass(frozen=True)
class Window:
    cpu_ms: float  # kube-apiserver's, per PATCH
    wall_ms: float  # the client's round trip, per PATCH
    admission_ms: float  # the server's time in the ValidatingAdmissionPolicy plugin, per PATCH


def measure(kube: ControlPlane, send: Callable[[], None], patches: int) -> Window:
    """``patches`` sends, with the server's CPU and admission time across them. The /metrics reads stay
    outside the CPU window; the server's own Lease renewals (UPDATEs too, which no policy matches) may
    fall inside the admission window, at a few microseconds each."""
    pid = kube.apiserver.pid
    admitted = admission_seconds(kube)
    began, before = time.perf_counter(), thread_cpu_seconds(pid)
    for _ in range(patches):
        send()
    cpu, ended = thread_cpu_seconds(pid), time.perf_counter()
    return Window(
        (cpu - before) * 1000 / patches,
        (ended - began) * 1000 / patches,
        (admission_seconds(kube) - admitted) * 1000 / patches,
    )


def figures(
    policy: Path | None = None,
    counts: tuple[int, ...] = COUNTS,
    runs: int = 8,
    patches: int = 50,
    warmup: int = 3,
) -> list[Figure]:
    chosen = PolicyFile.read(policy or SHIPPED_POLICY)
    with control_plane("policy-cost-") as kube:
        apply_rbac(kube, chosen)
        kube.create_node("policy-probe")
        binding = Binding(kube, chosen, "policy-probe", kube.pod_token("policy-probe"))
        binding.wait(True)
        writers = {n: Writer(kube, f"owned-{n}", prepare_node(kube, f"owned-{n}", n), n) for n in counts}
        kubelets = {n: Kubelet(kube, f"owned-{n}") for n in counts}
        idle = idle_cpu_ms_per_s(kube.apiserver.pid)
        wall: dict[int, list[float]] = {n: [] for n in counts}

        def run(bound: bool) -> dict[str, float]:
            binding.set(bound)
            got = {}
            for n in counts:
                writer, kubelet = writers[n], kubelets[n]
                writer.resync()  # the kubelet wrote since
                for _ in range(warmup):  # a fresh connection and caches after the switch: not counted
                    writer.patch()
                mine = measure(kube, writer.patch, patches)
                got[f"writer cpu {n}"], got[f"writer admission {n}"] = mine.cpu_ms, mine.admission_ms
                if bound:
                    wall[n].append(mine.wall_ms)
                for _ in range(warmup):
                    kubelet.patch()
                theirs = measure(kube, kubelet.patch, patches)
                got[f"kubelet cpu {n}"], got[f"kubelet wall {n}"] = theirs.cpu_ms, theirs.wall_ms
                got[f"kubelet admission {n}"] = theirs.admission_ms
            return got

        try:
            with_policy, without = interleaved(runs, lambda: run(True), lambda: run(False))
            for n in counts:  # the kubelet's updates went to its own entry, as a kubelet's do
                check_managers(kube, f"owned-{n}")
        finally:
            for writer in writers.values():
                writer.close()
            for kubelet in kubelets.values():
                kubelet.close()
    note = (
        f"policy {chosen.describe()}; {patches} PATCHes per run, each changing one label's value (as the "
        f"writer sends it); ratio: with / without the binding. kube-apiserver's CPU idle: {idle:.1f} ms/s, "
        "in every CPU figure for the PATCHes' wall time (with the policy: "
        + ", ".join(f"{n}: {min(wall[n]):.0f} ms" for n in counts)
        + " per PATCH at least). Admission: the server's time in the ValidatingAdmissionPolicy plugin"
    )
    kubelet_note = (
        f"{patches} kubelet status updates per run and Node (strategic-merge PATCH of nodes/NAME/status, "
        "every condition's lastHeartbeatTime, as system:node:NAME): matched by the policy's matchConstraints "
        "(nodes/status), left out by its matchConditions"
    )
    rows: list[tuple[str, str, str, int]] = [
        ("writer cpu", "kube-apiserver CPU per writer PATCH, {n} owned labels", "ms", 1),
        (
            "writer admission",
            "ValidatingAdmissionPolicy admission time per writer PATCH, {n} owned labels",
            "ms",
            2,
        ),
        ("kubelet cpu", "kube-apiserver CPU per kubelet status PATCH, {n} owned labels", "ms", 1),
        ("kubelet wall", "kubelet status PATCH round trip, {n} owned labels", "ms", 1),
        (
            "kubelet admission",
            "ValidatingAdmissionPolicy admission time per kubelet status PATCH, {n} owned labels",
            "µs",
            0,
        ),
    ]
    notes = {("writer cpu", counts[0]): note, ("kubelet cpu", counts[0]): kubelet_note}
    return [
        Figure(
            "policy",
            what.format(n=n),
            unit,
            [v * (1000 if unit == "µs" else 1) for v in with_policy[f"{key} {n}"]],
            [v * (1000 if unit == "µs" else 1) for v in without[f"{key} {n}"]],
            digits=digits,
            note=notes.get((key, n), ""),
        )
        for key, what, unit, digits in rows
        for n in counts
    ]
