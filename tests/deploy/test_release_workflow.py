"""The release workflow (.github/workflows/release.yaml), checked offline: actionlint (with shellcheck on
every `run:` script) finds nothing; its steps are scripts/release.sh's, the script the rehearsal on the real
node runs; what it publishes is what the chart pulls: both platforms a GPU node can be (amd64 servers,
arm64 Jetson boards), under the chart's default image name and appVersion tag, signed; and the chart
itself, packaged by the workflow's own steps (run here) with the tag as version and appVersion and its
image pinned by the pushed digest, pushed as an OCI artifact beside the image and signed the same way."""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import CHART, HELMS, REPO, Tools, documents, run_helm
from tests.deploy.release import (
    RELEASE_WORKFLOW,
    WORKFLOWS,
    StepRun,
    package_chart,
    step_named,
    workflow,
)

RELEASE = RELEASE_WORKFLOW


def actionlint(tools: Tools, *files: Path) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(tools.bin / "actionlint"),
        "-no-color",
        "-oneline",
        "-shellcheck",
        str(tools.bin / "shellcheck"),
        "-pyflakes",
        "",
        *map(str, files),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)


def expand_env(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{\{\s*env\.(\w+)\s*\}\}", lambda m: env[m.group(1)], text)


def step_using(job: dict[str, Any], action: str) -> dict[str, Any]:
    (found,) = [s for s in job["steps"] if s.get("uses", "").split("@")[0] == action]
    return found


def test_actionlint_and_shellcheck_find_nothing(tools: Tools) -> None:
    files = sorted(WORKFLOWS.glob("*.y*ml"))
    assert RELEASE in files
    proc = actionlint(tools, *files)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_a_broken_workflow(tools: Tools, tmp_path: Path) -> None:
    # The same workflow with an input login-action does not have and a shell error in a run script.
    broken = RELEASE.read_text().replace("registry: ghcr.io", "registri: ghcr.io", 1)
    broken = broken.replace(
        "run: |\n          sudo env", 'run: |\n          cd $HOME/"$x\n          sudo env', 1
    )
    assert broken.count("registri") == 1 and '"$x' in broken
    copy = tmp_path / ".github" / "workflows" / "release.yaml"
    copy.parent.mkdir(parents=True)
    copy.write_text(broken)
    proc = actionlint(tools, copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'input "registri" is not defined' in proc.stdout
    assert "shellcheck reported issue" in proc.stdout


def test_runs_on_release_tags_only() -> None:
    assert workflow()["on"] == {"push": {"tags": ["v*"]}}


def release_steps(step: dict[str, Any]) -> list[str]:
    """The scripts/release.sh steps a workflow step runs, in order."""
    (line,) = [line for line in step["run"].splitlines() if "scripts/release.sh" in line]
    return line.split("scripts/release.sh", 1)[1].split()


def step_running(job: dict[str, Any], first: str) -> dict[str, Any]:
    (found,) = [
        s for s in job["steps"] if "scripts/release.sh" in s.get("run", "") and release_steps(s)[0] == first
    ]
    return found


def test_every_step_is_the_release_scripts_in_its_order() -> None:
    """The workflow runs scripts/release.sh's steps, each once and in the script's order, as the rehearsal
    does: nothing is built, pushed, packaged or signed by the workflow alone."""
    jobs = workflow()["jobs"]
    ran = [
        step
        for job in ("image", "chart")
        for s in jobs[job]["steps"]
        if "scripts/release.sh" in s.get("run", "")
        for step in release_steps(s)
    ]
    assert ran == ["image", "provenance", "sbom", "sign-image", "package", "push-chart", "sign-chart"]
    for job in jobs.values():
        assert not [
            s
            for s in job["steps"]
            if re.search(r"\b(buildah|cosign|syft|helm (push|package))\b", s.get("run", ""))
        ]
    # Each is run with the tag's version, and the real release demands signing and a pinned chart.
    for job in ("image", "chart"):
        for s in jobs[job]["steps"]:
            if "scripts/release.sh" in s.get("run", ""):
                assert "VERSION=${GITHUB_REF_NAME#v}" in s["run"].replace('"', ""), s["run"]
    assert workflow()["env"]["REQUIRE_SIGNED"] == "1"


def test_publishes_both_platforms_under_the_charts_default_image() -> None:
    wf = workflow()
    job = wf["jobs"]["image"]
    assert set(wf["env"]["PLATFORMS"].split(",")) == {"linux/amd64", "linux/arm64"}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == ""  # so the chart pulls its appVersion, the tag published here
    assert wf["env"]["IMAGE"] == values["image"]["repository"]
    build = step_running(job, "image")
    # As root (buildah), with the workflow's image, platforms and credentials passed through sudo.
    assert build["run"].lstrip().startswith("sudo env")
    for name in ("IMAGE", "PLATFORMS", "REQUIRE_SIGNED", "GITHUB_OUTPUT"):
        assert f'"{name}=${name}"' in build["run"], name
    assert '"REGISTRY_AUTH_FILE=$HOME/.docker/config.json"' in build["run"]
    step_using(job, "docker/login-action")
    # The digest the image step pushed is the job's output, for the chart's pin.
    assert job["outputs"]["digest"] == f"${{{{ steps.{build['id']}.outputs.image-digest }}}}"


def test_signed_keyless_with_an_sbom_and_provenance() -> None:
    wf = workflow()
    job = wf["jobs"]["image"]
    assert job["permissions"]["id-token"] == "write"  # the OIDC identity cosign signs with
    assert job["permissions"]["packages"] == "write"
    assert wf["permissions"] == {"contents": "read"}
    step_using(job, "sigstore/cosign-installer")
    step_using(job, "anchore/sbom-action/download-syft")
    sign = step_running(job, "provenance")
    assert release_steps(sign) == ["provenance", "sbom", "sign-image"]
    kept = step_using(job, "actions/upload-artifact")["with"]["path"]
    assert f"steps.{sign['id']}.outputs.sbom" in kept and f"steps.{sign['id']}.outputs.provenance" in kept


def test_smoke_test_profile_is_in_the_image() -> None:
    # The Dockerfile copies profiles/ to /usr/share/gpu-labeller/profiles/.
    used = re.findall(r"/usr/share/gpu-labeller/profiles/([\w.-]+\.yaml)", RELEASE.read_text())
    assert used
    assert all((REPO / "profiles" / name).is_file() for name in used), used


def test_the_chart_is_published_after_the_image_beside_it_and_signed() -> None:
    wf = workflow()
    chart = wf["jobs"]["chart"]
    assert chart["needs"] == "image"  # never a chart whose image is not there yet
    assert chart["permissions"]["id-token"] == "write" and chart["permissions"]["packages"] == "write"
    # Same registry and owner as the image: ghcr.io/gpu-labeller/{gpu-labeller,charts/gpu-labeller}.
    image, charts = wf["env"]["IMAGE"], wf["env"]["CHARTS"]
    assert charts.rsplit("/", 1)[0] == image.rsplit("/", 1)[0]
    package = step_named(chart, "package")
    assert release_steps(package) == ["package"]
    assert package["env"]["IMAGE_DIGEST"] == "${{ needs.image.outputs.digest }}"  # pinned to what was pushed
    push = step_running(chart, "push-chart")
    assert release_steps(push) == ["push-chart", "sign-chart"]
    assert 'helm registry login "${CHARTS%%/*}"' in push["run"]  # helm's credentials; cosign's are Docker's
    step_using(chart, "docker/login-action")
    step_using(chart, "sigstore/cosign-installer")
    assert step_using(chart, "azure/setup-helm")["with"]["version"] == "v3.19.0"  # the helm tests use


DIGEST = "sha256:" + "5" * 64


def test_the_workflow_packages_the_chart_with_the_tag_as_version_and_app_version(
    tools: Tools, tmp_path: Path
) -> None:
    packaged = package_chart(tools, "1.2.3", tmp_path, DIGEST)
    assert packaged.name == "gpu-labeller-1.2.3.tgz"
    with tarfile.open(packaged) as tar:
        member = tar.extractfile("gpu-labeller/Chart.yaml")
        assert member is not None
        chart = yaml.safe_load(member.read())
    assert (chart["version"], chart["appVersion"]) == ("1.2.3", "1.2.3")
    # Installed with no --set, the packaged chart pulls the image this release pushed, by its digest.
    want = f"{workflow()['env']['IMAGE']}:1.2.3@{DIGEST}"
    for which in HELMS:
        docs = documents(
            run_helm(tools, which, "template", "gpu-labeller", str(packaged), tmp=tmp_path).stdout
        )
        images = {
            c["image"] for d in docs if d["kind"] in ("DaemonSet", "Pod") for c in _pod(d)["containers"]
        }
        assert images == {want}, which
    # Artifact Hub lists and scans the same image, for the platforms the release built.
    (listed,) = yaml.safe_load(chart["annotations"]["artifacthub.io/images"])
    assert listed["image"] == want
    assert listed["platforms"] == workflow()["env"]["PLATFORMS"].split(",")


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"] if doc["kind"] == "DaemonSet" else doc["spec"]
    return spec


def test_the_release_refuses_a_chart_without_the_pin(tools: Tools, tmp_path: Path) -> None:
    steps = StepRun(tools, tmp_path, "v1.2.3")
    steps.needs["image"] = {"digest": ""}  # an image job that reported no digest
    done = steps.run(step_named(workflow()["jobs"]["chart"], "package"))
    assert done.returncode != 0
    assert "package: no image digest to pin" in done.stderr, done.stderr
    assert not list(tmp_path.rglob("*.tgz"))


def test_the_render_check_refuses_a_chart_that_pulls_another_image(tools: Tools, tmp_path: Path) -> None:
    """A template that names an image of its own (a test pod's busybox, say) would ship an image the
    release did not build or sign: the package step refuses it, naming both."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "extra.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: extra\nspec:\n  containers:\n"
        "    - name: extra\n      image: docker.io/library/busybox:1\n"
    )
    steps = StepRun(tools, tmp_path, "v1.2.3")
    steps.needs["image"] = {"digest": DIGEST}
    steps.env["CHART_DIR"] = str(chart)
    done = steps.run(step_named(workflow()["jobs"]["chart"], "package"))
    assert done.returncode != 0
    want = f"{workflow()['env']['IMAGE']}:1.2.3@{DIGEST}"
    assert f"pulls docker.io/library/busybox:1\n{want}, not {want}" in done.stderr, done.stderr
    assert not list(tmp_path.rglob("*.tgz"))


@pytest.mark.parametrize("tag", ["vnext", "v1.2.3.4", "v1.2.3+build.5"])
def test_a_tag_that_is_no_version_publishes_no_chart(tools: Tools, tmp_path: Path, tag: str) -> None:
    steps = StepRun(tools, tmp_path, tag)
    steps.needs["image"] = {"digest": DIGEST}
    done = steps.run(step_named(workflow()["jobs"]["chart"], "package"))
    assert done.returncode != 0
    assert f"VERSION={tag[1:]}" in done.stderr, done.stderr
    assert not list(tmp_path.rglob("*.tgz"))
