"""A release rehearsed end to end on the real node, from docs/deploy.md ("Releases") alone: the blocks marked
`<!-- first-hour: release-... -->` are run word for word, as the maintainer and then a user run them.

- `release-publish`: scripts/release.sh, the script .github/workflows/release.yaml runs, builds the image
  with buildah, pushes it as a manifest list to a real OCI registry (distribution v3.1.2, serving TLS from a
  CA of its own inside the node's network namespace, on the same loopback address here), packages the chart
  pinning that digest and `helm push`es it; its signing steps say they are skipped (no cosign here);
- `release-hosts-toml`: written into the node containerd's registry config_path, with the CA beside it;
- `release-install`: `helm install oci://REGISTRY/charts/gpu-labeller --version X.Y.Z --ca-file ca.crt`, no
  value for the image: containerd pulls the image from the registry by the chart's digest (it was in no
  containerd store before; the registry's access log shows containerd fetching the manifest list by that
  digest and the layers), the pod runs that digest and is Ready, the Node is labelled;
- `release-upgrade`: the next release, published the same way, upgraded to: its digest pulled the same way,
  the pod replaced, and no label ever absent (every state of the Node's labels recorded by a watch).

What the reader substitutes, and nothing else: the registry's address for `registry.example.com`, the
release's version for `X.Y.Z`, the registry's CA file for `ca.crt`, and containerd's config_path for
/etc/containerd/certs.d. Prints the time of each phase."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.deploy.markdown import Block, marked
from tests.kube.controlplane import KUBECTL, ROOT
from tests.kube.helm import TOOLS, helm
from tests.node.cluster import CONTAINERD_CONFIG, NodeCluster
from tests.node.history import LabelHistory
from tests.node.registry import Registry, trust_in_containerd
from tests.node.release import (
    owned,
    pod_ready,
    pod_report,
    prepare_gpu_node,
    release_pods,
    wait_until,
)

pytestmark = pytest.mark.timeout(1800)

DEPLOY = ROOT / "docs" / "deploy.md"
RELEASE = NAMESPACE = "gpu-labeller"
HELM = "helm4"  # the user's; the maintainer's release.sh runs `helm`, which is Helm 3 as in the workflow
PREVIOUS, THIS = "1.0.0-rc.1", "1.0.0"
REPOSITORY = "gpu-labeller/gpu-labeller"  # under the registry, as the docs' IMAGE names it
# The docs' placeholders.
REGISTRY, VERSION, CA, HOSTS_DIR = "registry.example.com", "X.Y.Z", "ca.crt", "/etc/containerd/certs.d"
PLACEHOLDERS = re.compile(r"example\.com|X\.Y\.Z|(^|=)ca\.crt$")
UNTRUSTED = "x509: certificate signed by unknown authority"
COMMAND_TIMEOUT = 900  # the publish builds the image
OWNERSHIP = "gpu-labeller.io/owned-labels"  # the writer's record on the Node


def shell_block(name: str) -> Block:
    block = marked(DEPLOY, name)
    assert block.commands and block.skipped == [], (
        f"{name}: lines the rehearsal would not run: {block.skipped}"
    )
    return block


def substitute(command: list[str], host: str, ca: Path, version: str) -> list[str]:
    """What the reader puts in: the registry's address, the release's version, the CA file's path."""
    out = []
    for arg in command:
        arg = arg.replace(REGISTRY, host).replace(VERSION, version)
        if arg == CA or arg.endswith(f"={CA}"):
            arg = arg[: -len(CA)] + str(ca)
        out.append(arg)
    return out


@dataclass
class Walk:
    """A shell in the checkout, as root, with KUBECONFIG set and kubectl and helm on its PATH; what it ran."""

    cluster: NodeCluster
    registry: Registry
    home: Path
    transcript: list[str] = field(default_factory=list)

    def run(self, command: list[str], version: str) -> subprocess.CompletedProcess[str]:
        argv = substitute(command, self.registry.host, self.registry.ca, version)
        assignments = [arg for arg in argv[: next(i for i, a in enumerate(argv) if "=" not in a)]]
        program, *args = argv[len(assignments) :]
        program = {"kubectl": str(KUBECTL), "helm": str(TOOLS.helm(HELM))}.get(program, program)
        env = {
            "PATH": f"{TOOLS.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.home),
            "KUBECONFIG": str(self.cluster.admin_kubeconfig),
            **{f"HELM_{kind}_HOME": str(self.home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
            **dict(assignment.split("=", 1) for assignment in assignments),
        }
        began = time.monotonic()
        done = subprocess.run(
            [program, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=COMMAND_TIMEOUT
        )
        self.transcript.append(
            f"$ {shlex.join(argv)}   # {time.monotonic() - began:.1f} s, exit {done.returncode}\n"
            f"{done.stdout}{done.stderr}"
        )
        if done.returncode != 0:
            # What the pods say (an image that cannot be pulled, and why) is what a reader would look at.
            raise AssertionError(
                f"`{shlex.join(argv)}` exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                f"{done.stderr[-3000:]}\n{pod_report(self.cluster, RELEASE)}"
            )
        return done

    def block(self, name: str, version: str) -> dict[str, subprocess.CompletedProcess[str]]:
        """Every command of the docs' block ``name``, in order, by its line in the docs."""
        return {shlex.join(command): self.run(command, version) for command in shell_block(name).commands}


def hosts_toml(directory: Path) -> str:
    """The docs' hosts.toml, as a node's admin writes it (before the registry's address is put in)."""
    return marked(DEPLOY, "release-hosts-toml").text.replace(HOSTS_DIR, str(directory))


def pulled_by_containerd(registry: Registry, digest: str) -> dict[str, int]:
    """What containerd fetched from the registry for the manifest list ``digest``: the list by that digest,
    and how many blobs (configs, layers), from the registry's access log."""
    requests = [r for r in registry.requests() if r.agent.startswith("containerd/") and r.status == 200]
    manifests = [r for r in requests if r.path == f"/v2/{REPOSITORY}/manifests/{digest}"]
    blobs = [r for r in requests if r.path.startswith(f"/v2/{REPOSITORY}/blobs/") and r.method == "GET"]
    return {"manifest list": len(manifests), "blobs": len(blobs)}


def images_in_containerd(cluster: NodeCluster, host: str) -> list[str]:
    listed = cluster.ctr("images", "ls", "-q")
    assert listed.returncode == 0, listed.stderr
    return [ref for ref in listed.stdout.split() if ref.startswith(f"{host}/")]


@dataclass
class Rehearsal:
    walk: Walk
    digests: dict[str, str] = field(default_factory=dict)
    installed: str = ""  # the version helm was last asked to install or upgrade to
    labels_before: dict[str, str] = field(default_factory=dict)  # the Node's, before the first command
    keys: set[str] = field(default_factory=set)
    pod_uid: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    def publish(self, version: str) -> str:
        began = time.monotonic()
        said = self.walk.block("release-publish", version)
        self.timings[f"publish {version}"] = time.monotonic() - began
        (log,) = [done.stderr for done in said.values()]
        # The workflow's signing steps ran and, without cosign and syft, said what they did not do.
        for step, tool in (("sbom", "syft"), ("sign-image", "cosign"), ("sign-chart", "cosign")):
            assert f"release: {step}: skipped, {tool} is not installed" in log, log[-3000:]
        found = re.search(rf"release: image: pushed \S+:{re.escape(version)}@(sha256:[0-9a-f]{{64}})", log)
        assert found, log[-3000:]
        self.digests[version] = found.group(1)
        return found.group(1)


@pytest.fixture(scope="module")
def rehearsal(real_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    """The node with nothing of ours, prepared as docs/deploy.md "Install" prepares a cluster (the
    RuntimeClass, a GPU-node label) and, in its network namespace, a registry no one trusts yet. Afterwards:
    the docs' removal with the release's chart, the trust and the pulled images gone."""
    cluster = real_node
    cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
    prepare_gpu_node(cluster)
    with Registry(cluster) as registry:
        tmp = tmp_path_factory.mktemp("release-rehearsal")
        state = Rehearsal(Walk(cluster, registry, tmp / "home"), labels_before=cluster.labels(cluster.node))
        try:
            yield state
        finally:
            try:
                remove(state, cluster, registry)
            finally:
                (tmp / "transcript.txt").write_text("\n".join(state.walk.transcript))


def remove(state: Rehearsal, cluster: NodeCluster, registry: Registry) -> None:
    """docs/deploy.md "Uninstall" with the chart the release was installed from, where its pods run (its
    prune pods need the same image); in any case then the release, its namespace and any label or record it
    left on the Node go, and what only this module made."""
    try:
        pods = release_pods(cluster, RELEASE) if state.installed else []
        if pods and all(pod_ready(pod) for pod in pods):
            chart = ["oci://ghcr.io/gpu-labeller/charts/gpu-labeller", "--version", "X.Y.Z"]
            ours = [
                f"oci://{REGISTRY}/gpu-labeller/charts/gpu-labeller",
                "--version",
                VERSION,
                "--ca-file",
                CA,
            ]
            for command in marked(DEPLOY, "uninstall").commands:
                joined = shlex.join(command).replace(shlex.join(chart), shlex.join(ours))
                state.walk.run(shlex.split(joined), state.installed)
    finally:
        helm(
            HELM,
            cluster,
            state.walk.home,
            "uninstall",
            RELEASE,
            "-n",
            NAMESPACE,
            "--wait",
            "--timeout",
            "100s",
        )
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
        if added := [key for key in cluster.labels(cluster.node) if key not in state.labels_before]:
            cluster.kubectl("label", "node", cluster.node, *(f"{key}-" for key in added))
        cluster.kubectl("annotate", "node", cluster.node, f"{OWNERSHIP}-", check=False)
        for ref in images_in_containerd(cluster, registry.host):
            cluster.ctr("images", "rm", ref)
        trust = cluster.registry_hosts / registry.host
        for path in (trust / "hosts.toml", trust / "ca.crt"):
            path.unlink(missing_ok=True)
        if trust.exists():
            trust.rmdir()


# ---- the tests ----------------------------------------------------------------------------------------


def test_every_line_of_the_release_blocks_is_a_command_the_rehearsal_runs() -> None:
    """Offline: the docs' release blocks hold only commands the rehearsal runs, with only the placeholders
    it substitutes; no insecure option is among them; the node's containerd reads hosts.toml where the docs
    say a node's does."""
    for name in ("release-publish", "release-install", "release-upgrade"):
        for command in shell_block(name).commands:
            left = [a for a in substitute(command, "127.0.0.1:5000", Path("/ca/ca.crt"), "1.2.3")]
            left = [a for a in left if PLACEHOLDERS.search(a)]
            assert left == [], f"{shlex.join(command)}: placeholders nobody substitutes: {left}"
            assert not any(re.search(r"insecure|plain-http|skip-verify", a) for a in command), command
    (publish,) = shell_block("release-publish").commands
    assert "scripts/release.sh" in publish and "PLATFORMS=linux/amd64" in publish, publish
    # The steps the workflow runs, signing included, in its order.
    steps = publish[publish.index("scripts/release.sh") + 1 :]
    assert steps == ["image", "provenance", "sbom", "sign-image", "package", "push-chart", "sign-chart"], (
        steps
    )
    (install,) = [c for c in shell_block("release-install").commands if c[:2] == ["helm", "install"]]
    assert "--set" not in install and not any(a.startswith("--set") for a in install), install
    toml = marked(DEPLOY, "release-hosts-toml")
    assert toml.language == "toml" and f'ca = "{HOSTS_DIR}/{REGISTRY}/ca.crt"' in toml.text, toml.text
    assert "skip_verify" not in toml.text
    assert '[plugins."io.containerd.grpc.v1.cri".registry]' in DEPLOY.read_text()
    section = '[plugins."io.containerd.grpc.v1.cri".registry]\n    config_path = "{w}/containerd/certs.d"'
    assert section in CONTAINERD_CONFIG


def test_a_release_is_pulled_by_the_node_from_the_registry_by_its_digest(rehearsal: Rehearsal) -> None:
    walk = rehearsal.walk
    cluster, registry = walk.cluster, walk.registry
    began = time.monotonic()
    digest = rehearsal.publish(PREVIOUS)
    ref = f"{registry.host}/{REPOSITORY}"

    # Nothing of it is on the node, and the registry's certificate is refused unless containerd has its CA.
    assert images_in_containerd(cluster, registry.host) == []
    assert digest not in cluster.ctr("content", "ls", "-q").stdout  # not under any other name either
    assert not [r for r in registry.requests() if r.agent.startswith("containerd/")]
    untrusted = cluster.workdir / "registry" / "untrusted-hosts" / registry.host
    untrusted.mkdir(parents=True)
    toml = hosts_toml(cluster.registry_hosts).replace(REGISTRY, registry.host)
    (untrusted / "hosts.toml").write_text("\n".join(line for line in toml.splitlines() if "ca =" not in line))
    socket = str(cluster.workdir / "containerd.sock")
    refused = cluster.namespaces.run(
        "ctr", "--address", socket, "-n", "release-rehearsal-untrusted", "images", "pull",
        "--hosts-dir", str(untrusted.parent), f"{ref}@{digest}", check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and UNTRUSTED in refused.stderr, refused.stderr
    cluster.namespaces.run(
        "ctr", "--address", socket, "namespaces", "rm", "release-rehearsal-untrusted", check=False
    )

    # The node's admin trusts the registry's CA as the docs say; then the user installs.
    trust_in_containerd(cluster, registry.host, toml, registry.ca)
    installed = time.monotonic()
    rehearsal.installed = PREVIOUS
    said = walk.block("release-install", PREVIOUS)
    rehearsal.timings["install to Ready"] = time.monotonic() - installed

    (pod,) = release_pods(cluster, RELEASE)
    assert pod_ready(pod), pod["status"]
    images = {c["image"] for c in pod["spec"]["containers"]}
    assert images == {f"{ref}:{PREVIOUS}@{digest}"}, images  # the chart's reference, no value given
    assert {s["imageID"] for s in pod["status"]["containerStatuses"]} == {f"{ref}@{digest}"}
    fetched = pulled_by_containerd(registry, digest)
    assert fetched["manifest list"] >= 1 and fetched["blobs"] >= 2, (fetched, registry.requests())
    assert images_in_containerd(cluster, registry.host), "containerd lists no image from the registry"
    shown = next(out.stdout for command, out in said.items() if command.startswith("kubectl get nodes"))
    assert re.search(rf"^{cluster.node}\s+\S+\s+\S+\s+\S+\s+\S+\s+true\s+\S+", shown, re.M), shown
    rehearsal.keys = set(owned(cluster.labels(cluster.node)))
    assert "nvidia.com/gpu.present" in rehearsal.keys
    rehearsal.pod_uid = pod["metadata"]["uid"]
    rehearsal.timings["release and install"] = time.monotonic() - began


def test_the_next_release_is_pulled_the_same_way_and_no_label_flaps(rehearsal: Rehearsal) -> None:
    assert rehearsal.pod_uid, "the install test did not get this far"
    walk = rehearsal.walk
    cluster, registry = walk.cluster, walk.registry
    began = time.monotonic()
    digest = rehearsal.publish(THIS)
    assert digest != rehearsal.digests[PREVIOUS]
    ref = f"{registry.host}/{REPOSITORY}"
    with LabelHistory(cluster, cluster.node) as history:
        upgraded = time.monotonic()
        rehearsal.installed = THIS
        walk.block("release-upgrade", THIS)
        rehearsal.timings["upgrade to Ready"] = time.monotonic() - upgraded

        def replaced() -> bool:
            pods = release_pods(cluster, RELEASE)
            return len(pods) == 1 and pod_ready(pods[0]) and pods[0]["metadata"]["uid"] != rehearsal.pod_uid

        wait_until(replaced, 120, "the upgrade's pod Ready")
        wait_until(
            lambda: rehearsal.keys <= set(owned(cluster.labels(cluster.node))), 60, "labels after the upgrade"
        )
    (pod,) = release_pods(cluster, RELEASE)
    assert {c["image"] for c in pod["spec"]["containers"]} == {f"{ref}:{THIS}@{digest}"}
    assert {s["imageID"] for s in pod["status"]["containerStatuses"]} == {f"{ref}@{digest}"}
    assert pulled_by_containerd(registry, digest)["manifest list"] >= 1, registry.requests()
    assert history.missing(rehearsal.keys) == [], "labels disappeared during the upgrade"
    assert len(history.states) >= 2, "the watch saw no change at all"
    rehearsal.timings["release and upgrade"] = time.monotonic() - began
    print("\nrelease rehearsal: " + ", ".join(f"{k} {v:.0f} s" for k, v in rehearsal.timings.items()))
