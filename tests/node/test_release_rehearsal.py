"""A release rehearsed end to end on the real node, from docs/deploy.md ("Releases") alone: the blocks marked
`<!-- first-hour: release-... -->` are run word for word, as the maintainer and then a user run them.

- `release-key`: `cosign generate-key-pair`, since keyless signing needs Sigstore's Fulcio and Rekor, which
  cannot be reached from here: the rehearsal signs with a key it generates (the workflow stays keyless);
- `release-publish`: scripts/release.sh, the script .github/workflows/release.yaml runs, builds the image
  with buildah, pushes it as a manifest list to a real OCI registry (distribution v3.1.2, serving TLS from a
  CA of its own inside the node's network namespace, on the same loopback address here), writes the build
  provenance and a CycloneDX SBOM of the image's Python environment (cyclonedx-py), signs the image's digest
  with that key and attests both (cosign v2.6.5, nothing sent to Rekor), packages the chart pinning that
  digest, `helm push`es it and signs the chart's digest;
- `release-verify`: `cosign verify` and `cosign verify-attestation` with `cosign.pub`, as a user checks the
  release before installing: the signatures name the digests release.sh pushed, the provenance the release,
  the SBOM gpu-labeller and its dependencies;
- `release-hosts-toml`: written into the node containerd's registry config_path, with the CA beside it;
- `release-install`: `helm install oci://REGISTRY/charts/gpu-labeller --version X.Y.Z --ca-file ca.crt`, no
  value for the image: containerd pulls the image from the registry by the chart's digest (it was in no
  containerd store before; the registry's access log shows containerd fetching the manifest list by that
  digest and the layers), the pod runs that digest and is Ready, the Node is labelled;
- `release-upgrade`: the next release, published the same way, upgraded to: its digest pulled the same way,
  the pod replaced, and no label ever absent (every state of the Node's labels recorded by a watch).

Tampering is caught (a test of its own): the previous release's image tag moved to a changed manifest list
and its chart pushed again, changed, under the same version, fail every verification with the messages
docs/deploy.md explains; signed and attested with another key, they fail with the others.

What the reader substitutes, and nothing else: the registry's address for `registry.example.com`, the
release's version for `X.Y.Z`, the registry's CA file for `ca.crt`, the key pair's files for `cosign.key` and
`cosign.pub`, and containerd's config_path for /etc/containerd/certs.d. Prints the time of each phase."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
KEY_FILES = ("cosign.key", "cosign.pub")  # release-key's, in the directory it runs in
PLACEHOLDERS = re.compile(r"example\.com|X\.Y\.Z|(^|=)(ca\.crt|cosign\.key|cosign\.pub)$")
UNTRUSTED = "x509: certificate signed by unknown authority"
# Where the maintainer's and the user's shell finds cosign and the SBOM tool: the peer, and the test venv's.
SIGNING_TOOLS = {
    "cosign": ROOT / ".cache" / "peers" / "cosign" / "cosign",
    "cyclonedx-py": ROOT / ".venv" / "bin" / "cyclonedx-py",
}
PASSWORD = "rehearsal"  # cosign.key's, in the maintainer's environment as cosign reads it (COSIGN_PASSWORD)
# What a failed `cosign verify` / `verify-attestation` says (docs/deploy.md explains each): a digest no one
# signed (the tag moved to a changed artifact), and one signed with another key.
UNSIGNED = {
    "verify": "Error: no signatures found",
    "verify-attestation": "Error: no matching attestations: \n",
}
OTHER_KEY = {
    "verify": "Error: no matching signatures: invalid signature when validating ASN.1 encoded signature",
    "verify-attestation": (
        "Error: no matching attestations: accepted signatures do not match threshold, Found: 0, Expected 1"
    ),
}
COMMAND_TIMEOUT = 900  # the publish builds the image
OWNERSHIP = "gpu-labeller.io/owned-labels"  # the writer's record on the Node
RELEASED = ROOT / ".cache" / "release"  # release.sh's OUT where the docs set none: OUT/VERSION/


def shell_block(name: str) -> Block:
    block = marked(DEPLOY, name)
    assert block.commands and block.skipped == [], (
        f"{name}: lines the rehearsal would not run: {block.skipped}"
    )
    return block


def substitute(command: list[str], host: str, ca: Path, version: str, keys: Path) -> list[str]:
    """What the reader puts in: the registry's address, the release's version, the CA file's path, the key
    pair's paths (in ``keys``)."""
    out = []
    for arg in command:
        arg = arg.replace(REGISTRY, host).replace(VERSION, version)
        for name, path in ((CA, ca), *((key, keys / key) for key in KEY_FILES)):
            if arg == name or arg.endswith(f"={name}"):
                arg = arg[: -len(name)] + str(path)
        out.append(arg)
    return out


@dataclass
class Walk:
    """A shell in the checkout, as root, with KUBECONFIG and COSIGN_PASSWORD set and kubectl, helm, cosign
    and cyclonedx-py on its PATH; what it ran. ``keys`` is where the key pair is made and kept."""

    cluster: NodeCluster
    registry: Registry
    home: Path
    keys: Path
    transcript: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.bin = self.home / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.keys.mkdir(parents=True, exist_ok=True)
        for name, path in SIGNING_TOOLS.items():
            if not os.access(path, os.X_OK):
                raise AssertionError(
                    f"{path} is missing: run scripts/install-tools.sh (and scripts/test.sh's venv)"
                )
            (self.bin / name).unlink(missing_ok=True)
            (self.bin / name).symlink_to(path)

    def run(
        self, command: list[str], version: str, *, cwd: Path = ROOT, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = substitute(command, self.registry.host, self.registry.ca, version, self.keys)
        assignments = [arg for arg in argv[: next(i for i, a in enumerate(argv) if "=" not in a)]]
        program, *args = argv[len(assignments) :]
        program = {"kubectl": str(KUBECTL), "helm": str(TOOLS.helm(HELM))}.get(program, program)
        env = {
            "PATH": f"{self.bin}:{TOOLS.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.home),
            "KUBECONFIG": str(self.cluster.admin_kubeconfig),
            "COSIGN_PASSWORD": PASSWORD,
            **{f"HELM_{kind}_HOME": str(self.home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
            **dict(assignment.split("=", 1) for assignment in assignments),
        }
        began = time.monotonic()
        done = subprocess.run(
            [program, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=COMMAND_TIMEOUT
        )
        self.transcript.append(
            f"$ {shlex.join(argv)}   # {time.monotonic() - began:.1f} s, exit {done.returncode}\n"
            f"{done.stdout}{done.stderr}"
        )
        if check and done.returncode != 0:
            # What the pods say (an image that cannot be pulled, and why) is what a reader would look at.
            raise AssertionError(
                f"`{shlex.join(argv)}` exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                f"{done.stderr[-3000:]}\n{pod_report(self.cluster, RELEASE)}"
            )
        return done

    def block(
        self, name: str, version: str, *, cwd: Path = ROOT, check: bool = True
    ) -> dict[str, subprocess.CompletedProcess[str]]:
        """Every command of the docs' block ``name``, in order, by its line in the docs."""
        return {
            shlex.join(command): self.run(command, version, cwd=cwd, check=check)
            for command in shell_block(name).commands
        }


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


def attestations(said: str) -> list[dict[str, Any]]:
    """The in-toto statements `cosign verify-attestation` printed, one DSSE envelope a line."""
    envelopes = [json.loads(line) for line in said.splitlines() if line.strip()]
    return [json.loads(base64.b64decode(envelope["payload"])) for envelope in envelopes]


def signed_digests(said: str) -> set[str]:
    """The digests whose signatures `cosign verify` verified (it prints their payloads as one JSON list)."""
    payloads = [p for line in said.splitlines() if line.strip() for p in json.loads(line)]
    return {p["critical"]["image"]["docker-manifest-digest"] for p in payloads}


def verb(command: str) -> str:
    """verify or verify-attestation: which of cosign's checks a command of the docs' block is."""
    return shlex.split(command)[1]


@dataclass
class Rehearsal:
    walk: Walk
    digests: dict[str, str] = field(default_factory=dict)
    chart_digests: dict[str, str] = field(default_factory=dict)
    installed: str = ""  # the version helm was last asked to install or upgrade to
    labels_before: dict[str, str] = field(default_factory=dict)  # the Node's, before the first command
    keys: set[str] = field(default_factory=set)
    pod_uid: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    def publish(self, version: str) -> str:
        """The docs' release-publish, then release-verify as a user runs it; the image's digest."""
        began = time.monotonic()
        said = self.walk.block("release-publish", version)
        self.timings[f"publish {version}"] = time.monotonic() - began
        (log,) = [done.stderr for done in said.values()]
        assert "skipped" not in log, log[-3000:]  # every step of the workflow's ran, signing included
        assert "lists the Python environment" in log, log[-3000:]  # the SBOM is cyclonedx-py's here
        found = re.search(rf"release: image: pushed \S+:{re.escape(version)}@(sha256:[0-9a-f]{{64}})", log)
        assert found, log[-3000:]
        self.digests[version] = found.group(1)
        chart = re.search(
            rf"release: push-chart: pushed \S+:{re.escape(version)}@(sha256:[0-9a-f]{{64}})", log
        )
        assert chart, log[-3000:]
        self.chart_digests[version] = chart.group(1)
        began = time.monotonic()
        self.verify(version)
        self.timings[f"verify {version}"] = time.monotonic() - began
        return found.group(1)

    def verify(self, version: str) -> None:
        """The docs' release-verify: each check passes on what release.sh pushed, and says so."""
        image, chart = self.digests[version], self.chart_digests[version]
        said = self.walk.block("release-verify", version)
        checked: dict[str, Any] = {}
        for command, done in said.items():
            if verb(command) == "verify":
                checked[shlex.split(command)[-1].rsplit(":", 1)[0]] = signed_digests(done.stdout)
            else:
                (statement,) = attestations(done.stdout)
                assert [s["digest"] for s in statement["subject"]] == [
                    {"sha256": image.removeprefix("sha256:")}
                ]
                checked[statement["predicateType"]] = statement["predicate"]
        assert checked.pop(f"{REGISTRY}/{REPOSITORY}") == {image}
        assert checked.pop(f"{REGISTRY}/gpu-labeller/charts/gpu-labeller") == {chart}
        provenance = checked.pop("https://slsa.dev/provenance/v1")
        assert provenance["buildDefinition"]["externalParameters"]["version"] == version, provenance
        sbom = checked.pop("https://cyclonedx.org/bom")
        listed = {c["name"] for c in sbom["components"]}
        assert {"gpu-labeller", "kubernetes", "PyYAML", "msgspec"} <= listed, listed
        assert checked == {}, checked


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
        walk = Walk(cluster, registry, tmp / "home", tmp / "keys")
        state = Rehearsal(walk, labels_before=cluster.labels(cluster.node))
        try:
            # Keyless signing needs Fulcio and Rekor, which cannot be reached from here: the maintainer's key,
            # generated as the docs say, signs instead.
            said = walk.block("release-key", "", cwd=walk.keys)
            assert all((walk.keys / key).is_file() for key in KEY_FILES), said
            print("\nrelease rehearsal: signing with a key generated here (keyless needs Fulcio and Rekor)")
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
    for name in ("release-key", "release-publish", "release-verify", "release-install", "release-upgrade"):
        for command in shell_block(name).commands:
            left = substitute(command, "127.0.0.1:5000", Path("/ca/ca.crt"), "1.2.3", Path("/keys"))
            left = [a for a in left if PLACEHOLDERS.search(a)]
            assert left == [], f"{shlex.join(command)}: placeholders nobody substitutes: {left}"
            insecure = [a for a in command if re.search(r"insecure|plain-http|skip-verify|allow-http", a)]
            assert insecure == [], command
    assert shell_block("release-key").commands == [["cosign", "generate-key-pair"]]
    (publish,) = shell_block("release-publish").commands
    assert "scripts/release.sh" in publish and "PLATFORMS=linux/amd64" in publish, publish
    assert "COSIGN_KEY=cosign.key" in publish and "REGISTRY_CA=ca.crt" in publish, publish
    # What a user verifies: both signatures and both attestations release.sh makes, with the key, trusting
    # the registry's CA, and not looking for the transparency log key-signed releases are not in.
    checks = set()
    for command in shell_block("release-verify").commands:
        assert command[:2] in (["cosign", "verify"], ["cosign", "verify-attestation"]), command
        for option, value in (("--key", "cosign.pub"), ("--registry-cacert", CA)):
            assert command[command.index(option) + 1] == value, command
        assert "--private-infrastructure" in command, command
        kind = command[command.index("--type") + 1] if "--type" in command else "signature"
        checks.add((kind, command[-1]))
    image, chart = (
        f"{REGISTRY}/{REPOSITORY}:{VERSION}",
        f"{REGISTRY}/gpu-labeller/charts/gpu-labeller:{VERSION}",
    )
    assert checks == {
        ("signature", image), ("slsaprovenance1", image), ("cyclonedx", image), ("signature", chart)
    }, checks  # fmt: skip
    script = (ROOT / "scripts" / "release.sh").read_text()
    assert '"provenance.json slsaprovenance1" "cdx.json cyclonedx"' in script  # the types it attests
    # A failed check's messages are the docs', each explained.
    text = DEPLOY.read_text()
    for message in (*UNSIGNED.values(), *OTHER_KEY.values()):
        assert f"`{message.strip()}`" in text, message
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


def push_changed_chart(walk: Walk, version: str, tmp: Path) -> str:
    """The released chart of ``version`` with its image swapped for someone else's, pushed again under the
    same version, as someone who may push could; its digest."""
    with tarfile.open(RELEASED / version / f"gpu-labeller-{version}.tgz") as packaged:
        packaged.extractall(tmp / "changed", filter="data")
    values = tmp / "changed" / "gpu-labeller" / "values.yaml"
    swapped = f"  repository: {walk.registry.host}/someone-else/gpu-labeller"
    text, n = re.subn(r"^  repository: .*$", swapped, values.read_text(), count=1, flags=re.M)
    assert n == 1, values.read_text()
    values.write_text(text)
    walk.run(["helm", "package", str(values.parent), "--destination", str(tmp)], version)
    charts = f"oci://{walk.registry.host}/gpu-labeller/charts"
    packaged_again = tmp / f"gpu-labeller-{version}.tgz"
    said = walk.run(
        ["helm", "push", str(packaged_again), charts, "--ca-file", str(walk.registry.ca)], version
    )
    found = re.search(r"^Digest: (sha256:[0-9a-f]{64})", said.stdout + said.stderr, re.M)
    assert found, said.stdout + said.stderr
    return found.group(1)


def test_a_release_changed_after_signing_or_signed_with_another_key_fails_verification(
    rehearsal: Rehearsal, tmp_path: Path
) -> None:
    """The previous release, signed and verified when it was published (and no longer installed): its image
    tag moved to a changed manifest list, its chart pushed again, changed, under the same version. The docs'
    release-verify then fails on every check as a user sees it; once someone else's key has signed and
    attested the changed ones, it fails with the other message."""
    assert PREVIOUS in rehearsal.chart_digests, "the install test did not get this far"
    walk = rehearsal.walk
    registry = walk.registry
    began = time.monotonic()
    changed = {"org.opencontainers.image.description": "changed after signing"}
    image = registry.change_manifest(REPOSITORY, PREVIOUS, changed)
    assert image != rehearsal.digests[PREVIOUS]
    chart = push_changed_chart(walk, PREVIOUS, tmp_path)
    assert chart != rehearsal.chart_digests[PREVIOUS]

    def failures() -> dict[str, str]:
        said = walk.block("release-verify", PREVIOUS, check=False)
        for command, done in said.items():
            assert done.returncode != 0, f"`{command}` passed after the change:\n{done.stdout}{done.stderr}"
        return {command: done.stderr for command, done in said.items()}

    for command, stderr in failures().items():
        assert UNSIGNED[verb(command)] in stderr, (command, stderr)

    # Someone else's key, generated the same way, signs both and attests the image as release.sh does.
    other = tmp_path / "other"
    other.mkdir()
    walk.run(["cosign", "generate-key-pair"], PREVIOUS, cwd=other)
    key, ca = str(other / "cosign.key"), str(registry.ca)
    signing = ["--yes", "--key", key, "--tlog-upload=false", "--registry-cacert", ca]
    ref = f"{registry.host}/{REPOSITORY}@{image}"
    walk.run(["cosign", "sign", *signing, ref], PREVIOUS)
    for kind, suffix in (("slsaprovenance1", "provenance.json"), ("cyclonedx", "cdx.json")):
        predicate = RELEASED / PREVIOUS / f"gpu-labeller-{PREVIOUS}.{suffix}"
        walk.run(["cosign", "attest", *signing, "--type", kind, "--predicate", str(predicate), ref], PREVIOUS)
    walk.run(
        ["cosign", "sign", *signing, f"{registry.host}/gpu-labeller/charts/gpu-labeller@{chart}"], PREVIOUS
    )
    for command, stderr in failures().items():
        assert OTHER_KEY[verb(command)] in stderr, (command, stderr)
    print(f"\nrelease rehearsal: tampering caught in {time.monotonic() - began:.0f} s")
