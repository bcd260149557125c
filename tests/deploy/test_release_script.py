"""scripts/release.sh's steps that need no registry, offline: the signing steps call cosign and syft (here
recorders standing in for them, on PATH) on the pushed digests, keyless or with a key and no transparency log,
and are skipped, saying so, where those tools are missing, unless the release demands them; the provenance
statement names the commit and the release.
And the chart's own pin: image.digest rendered into every container, Artifact Hub's annotations naming the
chart's default image."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart import CHART, HELMS, REPO, Tools, documents, run_helm
from tests.deploy.release import workflow

SCRIPT = REPO / "scripts" / "release.sh"
IMAGE = "registry.example.com/team/gpu-labeller"
DIGEST = "sha256:" + "a" * 64
CHART_DIGEST = "sha256:" + "c" * 64
STEPS = "image provenance sbom sign-image package push-chart sign-chart"
# Stands for cosign or syft: records its arguments, one call a line; syft writes the file it is asked for.
RECORDER = """#!/bin/sh
printf '%s\\n' "$*" >>"$RECORD"
for arg in "$@"; do
  case $arg in cyclonedx-json=*) echo '{"bomFormat": "CycloneDX"}' >"${arg#cyclonedx-json=}" ;; esac
done
"""


def release(
    tmp: Path, *steps: str, tools: tuple[str, ...] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    """scripts/release.sh STEPS with VERSION 1.2.3, IMAGE and OUT in ``tmp``; ``tools`` recorders on PATH."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        (bin_dir / tool).write_text(RECORDER)
        (bin_dir / tool).chmod(0o755)
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp),
        "RECORD": str(tmp / "calls"),
        "VERSION": "1.2.3",
        "IMAGE": IMAGE,
        "OUT": str(tmp / "out"),
        "REVISION": "0123abc",
        **env,
    }
    return subprocess.run(
        [str(SCRIPT), *steps], capture_output=True, text=True, env=environment, timeout=60, check=False
    )


def calls(tmp: Path) -> list[str]:
    record = tmp / "calls"
    return record.read_text().splitlines() if record.exists() else []


def test_the_image_is_signed_by_its_digest_with_provenance_and_sbom_attested(tmp_path: Path) -> None:
    done = release(
        tmp_path, "provenance", "sbom", "sign-image", tools=("cosign", "syft"),
        IMAGE_DIGEST=DIGEST, REQUIRE_SIGNED="1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    ref = f"{IMAGE}@{DIGEST}"
    assert calls(tmp_path) == [
        f"scan registry:{ref} --output cyclonedx-json={out}/gpu-labeller-1.2.3.cdx.json",
        f"sign --yes {ref}",
        f"attest --yes --type slsaprovenance1 --predicate {out}/gpu-labeller-1.2.3.provenance.json {ref}",
        f"attest --yes --type cyclonedx --predicate {out}/gpu-labeller-1.2.3.cdx.json {ref}",
    ]
    provenance = json.loads((out / "gpu-labeller-1.2.3.provenance.json").read_text())
    definition = provenance["buildDefinition"]
    assert definition["resolvedDependencies"][0]["digest"] == {"gitCommit": "0123abc"}
    assert definition["externalParameters"]["version"] == "1.2.3"
    assert definition["externalParameters"]["platforms"] == ["linux/amd64", "linux/arm64"]


def test_the_chart_is_signed_by_the_digest_its_push_reported(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "chart-digest").write_text(CHART_DIGEST + "\n")
    done = release(tmp_path, "sign-chart", tools=("cosign",), CHARTS="registry.example.com/team/charts")
    assert done.returncode == 0, done.stderr
    assert calls(tmp_path) == [f"sign --yes registry.example.com/team/charts/gpu-labeller@{CHART_DIGEST}"]


def test_with_a_key_image_and_chart_are_signed_by_digest_with_it_and_nothing_goes_to_rekor(
    tmp_path: Path,
) -> None:
    """Where Fulcio and Rekor cannot be reached (the rehearsal): COSIGN_KEY signs, no upload to the public
    log, and cosign trusts the registry through REGISTRY_CA, as buildah and helm do."""
    key, ca = tmp_path / "cosign.key", tmp_path / "ca.crt"
    key.write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "chart-digest").write_text(CHART_DIGEST + "\n")
    (tmp_path / "out" / "gpu-labeller-1.2.3.cdx.json").write_text('{"bomFormat": "CycloneDX"}')
    done = release(
        tmp_path, "provenance", "sign-image", "sign-chart", tools=("cosign",), IMAGE_DIGEST=DIGEST,
        COSIGN_KEY=str(key), COSIGN_PASSWORD="", REGISTRY_CA=str(ca),
        CHARTS="registry.example.com/team/charts",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out, ref = tmp_path / "out", f"{IMAGE}@{DIGEST}"
    signing = f"--yes --key {key} --tlog-upload=false --registry-cacert {ca}"
    assert calls(tmp_path) == [
        f"sign {signing} {ref}",
        f"attest {signing} --type slsaprovenance1 --predicate {out}/gpu-labeller-1.2.3.provenance.json {ref}",
        f"attest {signing} --type cyclonedx --predicate {out}/gpu-labeller-1.2.3.cdx.json {ref}",
        f"sign {signing} registry.example.com/team/charts/gpu-labeller@{CHART_DIGEST}",
    ]


def test_a_missing_key_file_is_one_line_naming_it(tmp_path: Path) -> None:
    done = release(tmp_path, "sign-image", tools=("cosign",), IMAGE_DIGEST=DIGEST, COSIGN_KEY="nokey.key")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "release: error: COSIGN_KEY=nokey.key is no file (cosign generate-key-pair writes one)"
    ]
    assert calls(tmp_path) == []


def test_without_cosign_and_syft_the_signing_steps_say_they_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "chart-digest").write_text(CHART_DIGEST + "\n")
    done = release(tmp_path, "sbom", "sign-image", "sign-chart", IMAGE_DIGEST=DIGEST)
    assert done.returncode == 0, done.stderr
    for step, tool in (("sbom", "syft"), ("sign-image", "cosign"), ("sign-chart", "cosign")):
        assert f"release: {step}: skipped, {tool} is not installed" in done.stderr


@pytest.mark.parametrize(("step", "tool"), [("sbom", "syft"), ("sign-image", "cosign")])
def test_a_release_that_must_be_signed_fails_without_the_tool(tmp_path: Path, step: str, tool: str) -> None:
    done = release(tmp_path, step, IMAGE_DIGEST=DIGEST, REQUIRE_SIGNED="1")
    assert done.returncode != 0
    assert f"release: error: {step} needs {tool}, which is not installed (REQUIRE_SIGNED=1)" in done.stderr


def test_an_unknown_step_or_a_bad_digest_is_one_line_naming_it(tmp_path: Path) -> None:
    done = release(tmp_path, "publish")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"release: error: unknown step 'publish' (steps: {STEPS})"]
    done = release(tmp_path, "sign-image", IMAGE_DIGEST="latest")
    assert done.returncode != 0
    assert "release: error: image digest 'latest' is no sha256:<64 hex>" in done.stderr


# ---- the chart's pin and Artifact Hub's annotations ------------------------------------------------------


@pytest.mark.parametrize("which", HELMS)
def test_image_digest_pins_every_container(tools: Tools, tmp_path: Path, which: str) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    repository = values["image"]["repository"]
    for given, want in (
        ({}, f"{repository}:{app_version}"),
        ({"image": {"digest": DIGEST}}, f"{repository}:{app_version}@{DIGEST}"),
        ({"image": {"tag": "9.9.9", "digest": DIGEST}}, f"{repository}:9.9.9@{DIGEST}"),
    ):
        proc = run_helm(tools, which, "template", "gpu-labeller", str(CHART), values=given, tmp=tmp_path)
        assert proc.returncode == 0, proc.stderr
        pods = [
            d["spec"]["template"]["spec"] if d["kind"] == "DaemonSet" else d["spec"]
            for d in documents(proc.stdout)
            if d["kind"] in ("DaemonSet", "Pod")
        ]
        images = {c["image"] for pod in pods for c in pod["containers"] + pod.get("initContainers", [])}
        assert images == {want}, given


def test_artifact_hub_annotations_name_the_default_image_and_the_license() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    annotations = chart["annotations"]
    (image,) = yaml.safe_load(annotations["artifacthub.io/images"])
    assert image["image"] == f"{values['image']['repository']}:{chart['appVersion']}"
    assert image["platforms"] == workflow()["env"]["PLATFORMS"].split(",")
    license_ = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]
    assert annotations["artifacthub.io/license"] == license_
    # Keyless: no key whose url Artifact Hub could show (a signKey without one is refused at indexing).
    assert "artifacthub.io/signKey" not in annotations
    (link,) = yaml.safe_load(annotations["artifacthub.io/links"])
    assert link["url"].endswith("/docs/deploy.md#releases")
    assert "\n### Releases\n" in (REPO / "docs" / "deploy.md").read_text()
