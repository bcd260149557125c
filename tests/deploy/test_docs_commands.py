"""The install the docs walk a newcomer through, taken from the Markdown itself so docs and tests cannot
drift: the README's RuntimeClass manifest, the label that selects a GPU node and its removal, the install
notes that say which nodes the DaemonSet selects, the Pod Security level each documented install gives its
namespace, and the source build that pushes the tag the chart pulls. Rendered with the real helm."""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from nfd_lite.files.policy import Policy
from tests.deploy.chart import CHART, HELMS, REPO, Tools, documents, one, run_helm
from tests.deploy.markdown import blocks, section
from tests.deploy.pss import level
from tests.deploy.test_chart import _selects

README = REPO / "README.md"
DEPLOY = REPO / "docs" / "deploy.md"
JETSON = REPO / "docs" / "jetson.md"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
PSS_ORDER = ("restricted", "baseline", "privileged")
PSS_ENFORCE = "pod-security.kubernetes.io/enforce"
# DRA mode needs resource.k8s.io/v1; every other mode renders the same on any supported version.
KUBE_VERSION = "1.34.0"


# --- the chart as a command renders it ------------------------------------------------------------------


def helm_render(
    tools: Tools, which: str, command: list[str], tmp: Path, reuse: Sequence[str] = ()
) -> dict[str, Any]:
    """The DaemonSet's pod spec that the documented ``helm install``/``upgrade`` ``command`` gives, with this
    checkout's chart in place of the chart it names (and ``reuse``, the install's values, under an upgrade
    that reuses them)."""
    sets = [*reuse, *values_of(command)]
    proc = run_helm(
        tools,
        which,
        "template",
        command[2],
        str(CHART),
        "--namespace",
        namespace_of(command),
        "--kube-version",
        KUBE_VERSION,
        *sets,
        tmp=tmp,
    )
    assert proc.returncode == 0, f"{shlex.join(command)} does not render:\n{proc.stderr}"
    spec: dict[str, Any] = one(documents(proc.stdout), "DaemonSet")["spec"]["template"]["spec"]
    return spec


def values_of(command: list[str]) -> list[str]:
    out = []
    for flag, value in itertools.pairwise(command):
        # Placeholders (`--set ...`, `image.digest=sha256:...`) stand for the reader's own values.
        if flag in ("--set", "--set-json", "--set-string") and "..." not in value:
            out += [flag, value]
    return out


def namespace_of(command: list[str]) -> str:
    for flag, value in itertools.pairwise(command):
        if flag in ("-n", "--namespace"):
            return value
    raise AssertionError(f"{shlex.join(command)} names no namespace")


# --- 1. the RuntimeClass the Deploy block creates ---------------------------------------------------------


@pytest.mark.parametrize("version", ["1.30.0", latest_version()])
def test_the_readme_deploy_block_creates_the_runtime_class_the_chart_names(version: str) -> None:
    (deploy,) = section(README, "Deploy")[:1]
    manifests = [yaml.safe_load(body) for body in deploy.heredocs]
    (runtime_class,) = [m for m in manifests if m.get("kind") == "RuntimeClass"]
    kubernetes_validate.validate(runtime_class, version, strict=True)
    assert runtime_class["metadata"]["name"] == VALUES["runtimeClassName"]
    # The handler name containerd gets from `nvidia-ctk runtime configure` and from the GPU Operator.
    assert runtime_class["handler"] == "nvidia"
    assert ["kubectl", "apply", "-f", "-"] in deploy.commands


# --- 2. the label that selects a GPU node, and its removal ------------------------------------------------

_KUBELET = {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": "gpu-1"}


def _node_labels_documented(path: Path) -> list[tuple[str, str]]:
    out = []
    for block in blocks(path):
        for cmd in block.commands:
            if cmd[:3] == ["kubectl", "label", "node"] and "=" in cmd[-1]:
                key, _, value = cmd[-1].partition("=")
                out.append((key, value))
    return out


@pytest.mark.parametrize("which", HELMS)
def test_the_documented_gpu_node_label_selects_the_node_and_stays_the_admins(
    tools: Tools, tmp_path: Path, which: str
) -> None:
    install = section(README, "Deploy")[0].commands
    helm = next(c for c in install if c[:2] == ["helm", "install"])
    affinity = helm_render(tools, which, helm, tmp_path)["affinity"]
    assert not _selects(affinity, _KUBELET)  # a node nothing marks gets no pod (no nvidia runtime there)
    writer = Policy.from_prefixes(VALUES["nfdLite"]["allowPrefixes"])
    labels = _node_labels_documented(README) + _node_labels_documented(DEPLOY)
    assert labels, "the docs say how to mark a GPU node"
    uninstall = [c for b in section(DEPLOY, "Uninstall") for c in b.commands]
    for key, value in labels:
        assert _selects(affinity, {**_KUBELET, key: value}), f"{key}={value} does not select the node"
        # A key the writer could write is one it may never own (the policy refuses adopting it), so prune
        # would leave it steering GPU work to the node: the docs must bootstrap with one it never writes.
        assert writer.problem(key) is not None, (
            f"the writer may write {key}, so one set by hand is never its own and outlives pruneLabels"
        )
        assert ["kubectl", "label", "nodes", "--all", f"{key}-"] in uninstall, f"Uninstall leaves {key}"


# --- 3. the install notes name the selecting labels --------------------------------------------------------


def _matches(selector: str, labels: dict[str, str]) -> bool:
    """A kubectl label selector (=, in, notin, exists, !exists) over ``labels``."""
    for part in re.split(r",(?![^()]*\))", selector):
        if m := re.fullmatch(r"(\S+) (in|notin) \((.*)\)", part):
            key, op, values = m.group(1), m.group(2), m.group(3).split(",")
            if (op == "in") != (key in labels and labels[key] in values):
                return False
        elif part.startswith("!"):
            if part[1:] in labels:
                return False
        elif "=" in part:
            key, _, value = part.partition("=")
            if labels.get(key) != value:
                return False
        elif part not in labels:
            return False
    return True


_NODES = {
    "kubelet only": _KUBELET,
    "NFD PCI": {**_KUBELET, "feature.node.kubernetes.io/pci-10de.present": "true"},
    "NFD PCI false": {**_KUBELET, "feature.node.kubernetes.io/pci-10de.present": "false"},
    "GPU Operator": {**_KUBELET, "nvidia.com/gpu.present": "true"},
    "GKE": {**_KUBELET, "cloud.google.com/gke-accelerator": "nvidia-l4"},
    "EKS": {**_KUBELET, "k8s.amazonaws.com/accelerator": "nvidia-tesla-t4"},
    "AKS": {**_KUBELET, "kubernetes.azure.com/accelerator": "nvidia"},
    "labelled by hand": {**_KUBELET, "gpu-labeller.io/gpu-node": "true"},
    "labelled false": {**_KUBELET, "gpu-labeller.io/gpu-node": "false"},
    "jetson": {**_KUBELET, "kubernetes.io/arch": "arm64"},
    "arm64 with NFD PCI": {
        **_KUBELET,
        "kubernetes.io/arch": "arm64",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    },
    "arm64 GKE": {
        **_KUBELET,
        "kubernetes.io/arch": "arm64",
        "cloud.google.com/gke-accelerator": "nvidia-gh200",
    },
}


@pytest.mark.parametrize(
    ("values", "by_hand"),
    [
        ({}, True),
        ({"jetson": {"enabled": True}, "runtimeClassName": ""}, False),
        ({"nodeSelector": {"example.com/rack": "r1"}}, True),
    ],
    ids=["defaults", "jetson", "node-selector"],
)
def test_the_install_notes_list_the_nodes_the_daemonset_selects(
    tools: Tools, tmp_path: Path, values: dict[str, Any], by_hand: bool
) -> None:
    args = ("install", "--dry-run=client", "gpu-labeller", str(CHART), "-n", "gpu-labeller")
    proc = run_helm(tools, "helm4", *args, values=values, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.partition("NOTES:")[2]
    selectors = re.findall(r"^   kubectl get nodes -l '([^']+)'$", notes, re.M)
    assert selectors, notes
    rendered = yaml.safe_load_all(proc.stdout.partition("NOTES:")[0].partition("MANIFEST:")[2])
    spec = one([d for d in rendered if d], "DaemonSet")["spec"]["template"]["spec"]
    node_selector = spec.get("nodeSelector", {})
    for name, labels in _NODES.items():
        for labels_here in (labels, {**labels, **node_selector}):
            scheduled = _selects(spec["affinity"], labels_here) and all(
                labels_here.get(k) == v for k, v in node_selector.items()
            )
            listed = any(_matches(s, labels_here) for s in selectors)
            assert listed == scheduled, (
                f"{name}: the notes' commands list it {listed}, the scheduler {scheduled}"
            )
    # What to run when none is there, and what the DaemonSet says then.
    assert "kubectl -n gpu-labeller rollout status daemonset/gpu-labeller --timeout=5m" in notes
    assert "kubectl -n gpu-labeller get daemonset gpu-labeller" in notes
    assert "DESIRED 0: no node matches the commands above" in notes
    if by_hand:
        assert "kubectl label node NODE gpu-labeller.io/gpu-node=true" in notes
        assert "kubectl label nodes --all gpu-labeller.io/gpu-node-" in notes
    else:
        assert "gpu-labeller.io/gpu-node" not in notes  # Jetson mode does not select by it


def test_the_readme_waits_for_the_rollout_before_looking_at_the_nodes() -> None:
    commands = section(README, "Deploy")[0].commands
    rollout = commands.index(
        ["kubectl", "-n", "gpu-labeller", "rollout", "status", "daemonset/gpu-labeller", "--timeout=5m"]
    )
    nodes = next(i for i, c in enumerate(commands) if c[:3] == ["kubectl", "get", "nodes"])
    assert commands.index(next(c for c in commands if c[:2] == ["helm", "install"])) < rollout < nodes


# --- 4. every documented install gets the Pod Security level its pods need --------------------------------


def _installs(path: Path) -> list[tuple[list[str], str | None, list[str]]]:
    """(helm command, the enforce level its namespace has by then, the install's values it reuses), walking
    the document's shell blocks in order as a reader would."""
    enforce: dict[str, str | None] = {}
    installed: dict[tuple[str, str], list[str]] = {}
    out = []
    for block in blocks(path):
        for cmd in block.commands:
            if cmd[:3] == ["kubectl", "create", "namespace"]:
                enforce[cmd[3]] = None
            elif cmd[:3] == ["kubectl", "label", "namespace"]:
                for arg in cmd[4:]:
                    if arg.startswith(PSS_ENFORCE + "="):
                        enforce[cmd[3]] = arg.partition("=")[2]
            elif cmd[:2] in (["helm", "install"], ["helm", "upgrade"]):
                ns = namespace_of(cmd)
                if "--create-namespace" in cmd:
                    enforce.setdefault(ns, None)
                reuse = [] if cmd[1] == "install" else installed.get((cmd[2], ns), [])
                if not {"--reuse-values", "--reset-then-reuse-values"} & set(cmd):
                    reuse = []
                out.append((cmd, enforce.get(ns), reuse))
                if cmd[1] == "install":
                    installed[cmd[2], ns] = values_of(cmd)
    return out


@pytest.mark.parametrize("doc", [README, DEPLOY, JETSON], ids=lambda p: p.name)
def test_every_documented_install_sets_the_pod_security_level_its_pods_need(
    tools: Tools, tmp_path: Path, doc: Path
) -> None:
    walked = _installs(doc)
    assert any(cmd[1] == "install" for cmd, _, _ in walked)
    for i, (cmd, ns_level, reuse) in enumerate(walked):
        pod_level = level(helm_render(tools, "helm3", cmd, tmp_path / str(i), reuse))
        where = f"{doc.name}: {shlex.join(cmd)}"
        assert ns_level is not None, (
            f"{where}: its namespace is never labelled {PSS_ENFORCE} (pods need {pod_level})"
        )
        # The namespace admits the pods (a DaemonSet is only warned about: its pods are refused later) ...
        assert PSS_ORDER.index(pod_level) <= PSS_ORDER.index(ns_level), (
            f"{where}: {ns_level} refuses {pod_level} pods"
        )
        # ... and an install asks for no more than they need.
        if cmd[1] == "install":
            assert pod_level == ns_level, (
                f"{where}: the namespace enforces {ns_level}, the pods need only {pod_level}"
            )


# --- 5. a build from a checkout is pulled by `--set image.repository` alone --------------------------------


def _source_build(path: Path) -> tuple[list[str], list[str]]:
    """The documented build-and-push command and the helm install that follows it in the same block."""
    for block in blocks(path):
        builds = [c for c in block.commands if any(a.endswith("scripts/build-image.sh") for a in c)]
        installs = [c for c in block.commands if c[:2] == ["helm", "install"]]
        if builds and installs:
            return builds[0], installs[0]
    raise AssertionError(f"{path.name} shows no build-image.sh command beside a helm install")


def _dry_run(build: list[str], **extra: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        **dict(a.split("=", 1) for a in build if "=" in a and "/" not in a.split("=")[0]),
        **extra,
    }
    script = next(a for a in build if a.endswith("scripts/build-image.sh"))
    proc = subprocess.run(
        [str(REPO / script), "--dry-run"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.splitlines())


@pytest.mark.parametrize("doc", [README, DEPLOY], ids=lambda p: p.name)
def test_the_documented_source_build_pushes_the_tag_the_chart_pulls(
    tools: Tools, tmp_path: Path, doc: Path
) -> None:
    build, install = _source_build(doc)
    sets = values_of(install)
    assert [s for s in sets[1::2] if not s.startswith("image.repository=")] == [], "one value: the repository"
    repository = sets[1].partition("=")[2]
    pulled = {c["image"] for c in helm_render(tools, "helm3", install, tmp_path)["containers"]}
    for arch in ("amd64", "arm64"):
        plan = _dry_run(build, ARCH=arch)
        assert plan["push"] == f"docker://{next(iter(pulled))}", plan
        assert plan["helm"] == f"--set image.repository={repository}"
    assert len(pulled) == 1


def test_the_documented_docker_build_tags_what_the_chart_pulls(tools: Tools, tmp_path: Path) -> None:
    (line,) = [
        raw
        for raw in DEPLOY.read_text().splitlines()
        if raw.startswith("docker build -t registry.example.com/")
    ]
    # The tag argument as the reader's shell expands it, in the checkout.
    tag_arg = line.removeprefix("docker build -t ").removesuffix(" .")
    tag = subprocess.run(
        ["bash", "-c", f"printf %s {tag_arg}"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    repository, _, _ = tag.rpartition(":")
    install = ["helm", "install", "gpu-labeller", "charts/gpu-labeller", "-n", "gpu-labeller"]
    spec = helm_render(tools, "helm3", [*install, "--set", f"image.repository={repository}"], tmp_path)
    assert {c["image"] for c in spec["containers"]} == {tag}
