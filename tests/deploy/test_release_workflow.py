"""The release workflow (.github/workflows/release.yaml), checked offline: actionlint (with shellcheck on
every `run:` script) finds nothing; what it publishes is what the chart pulls: both platforms a GPU node
can be (amd64 servers, arm64 Jetson boards), under the chart's default image name and appVersion tag,
signed; and the chart itself, packaged by the workflow's own steps (run here) with the tag as version and
appVersion, pushed as an OCI artifact beside the image and signed the same way."""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import CHART, REPO, Tools, documents, run_helm
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
    # The same workflow with an input build-push-action does not have and a shell error in a run script.
    broken = RELEASE.read_text().replace("platforms: ${{ env.PLATFORMS }}", "platform: ${{ env.PLATFORMS }}")
    broken = broken.replace(
        'version="${GITHUB_REF_NAME#v}"', 'version="${GITHUB_REF_NAME#v}"\n          cd $HOME/"$x'
    )
    copy = tmp_path / ".github" / "workflows" / "release.yaml"
    copy.parent.mkdir(parents=True)
    copy.write_text(broken)
    proc = actionlint(tools, copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'input "platform" is not defined' in proc.stdout
    assert "shellcheck reported issue" in proc.stdout


def test_runs_on_release_tags_only() -> None:
    assert workflow()["on"] == {"push": {"tags": ["v*"]}}


def test_publishes_both_platforms_under_the_charts_default_image() -> None:
    wf = workflow()
    job = wf["jobs"]["image"]
    build = step_using(job, "docker/build-push-action")["with"]
    platforms = expand_env(build["platforms"], wf["env"]).split(",")
    assert "linux/arm64" in platforms and "linux/amd64" in platforms
    assert build["push"] is True
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == ""  # so the chart pulls its appVersion, the tag published here
    assert (
        expand_env(build["tags"], wf["env"])
        == f"{values['image']['repository']}:${{{{ steps.version.outputs.version }}}}"
    )
    # The version is the git tag without its v: the image's tag and the chart's version and appVersion.
    (version,) = [s for s in job["steps"] if s.get("id") == "version"]
    assert 'version="${GITHUB_REF_NAME#v}"' in version["run"]
    # arm64 is emulated on the amd64 runner.
    assert "arm64" in step_using(job, "docker/setup-qemu-action")["with"]["platforms"]


def test_signed_keyless_with_an_sbom() -> None:
    wf = workflow()
    job = wf["jobs"]["image"]
    assert job["permissions"]["id-token"] == "write"  # the OIDC identity cosign signs with
    assert job["permissions"]["packages"] == "write"
    assert wf["permissions"] == {"contents": "read"}
    build = step_using(job, "docker/build-push-action")["with"]
    assert build["sbom"] is True
    step_using(job, "sigstore/cosign-installer")
    sbom = step_using(job, "anchore/sbom-action")["with"]
    (sign,) = [s for s in job["steps"] if "cosign sign" in s.get("run", "")]
    assert 'cosign sign --yes "$REF"' in sign["run"]
    assert '--predicate "$SBOM"' in sign["run"] and sign["env"]["SBOM"] == sbom["output-file"]
    assert sign["env"]["REF"].endswith("@${{ steps.build.outputs.digest }}")  # signs the digest, not a tag


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
    (push,) = [s for s in chart["steps"] if "helm push" in s.get("run", "")]
    assert 'helm push "$CHART" "oci://$CHARTS"' in push["run"]
    assert push["env"]["CHART"] == "${{ steps.package.outputs.chart }}"
    # Signed by the digest the push reports, not by a tag someone could move.
    assert 'cosign sign --yes "$CHARTS/gpu-labeller@$digest"' in push["run"]
    step_using(chart, "sigstore/cosign-installer")
    assert step_using(chart, "azure/setup-helm")["with"]["version"] == "v3.19.0"  # the helm tests use


def test_the_workflow_packages_the_chart_with_the_tag_as_version_and_app_version(
    tools: Tools, tmp_path: Path
) -> None:
    packaged = package_chart(tools, "1.2.3", tmp_path)
    assert packaged.name == "gpu-labeller-1.2.3.tgz"
    with tarfile.open(packaged) as tar:
        member = tar.extractfile("gpu-labeller/Chart.yaml")
        assert member is not None
        chart = yaml.safe_load(member.read())
    assert (chart["version"], chart["appVersion"]) == ("1.2.3", "1.2.3")
    # Installed with no --set, the packaged chart pulls the image this release pushed.
    docs = documents(run_helm(tools, "helm4", "template", "gpu-labeller", str(packaged), tmp=tmp_path).stdout)
    images = {c["image"] for d in docs if d["kind"] in ("DaemonSet", "Pod") for c in _pod(d)["containers"]}
    assert images == {f"{workflow()['env']['IMAGE']}:1.2.3"}


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"] if doc["kind"] == "DaemonSet" else doc["spec"]
    return spec


def test_the_workflows_render_check_passes_the_packaged_chart_and_catches_another_image(
    tools: Tools, tmp_path: Path
) -> None:
    job = workflow()["jobs"]["chart"]
    (check,) = [s for s in job["steps"] if "helm template" in s.get("run", "")]
    steps = StepRun(tools, tmp_path, "v1.2.3")
    assert steps.run(step_named(job, "package")).returncode == 0
    done = steps.run(check)
    assert done.returncode == 0, done.stdout + done.stderr
    # The same check on a chart whose default image is someone else's fails, naming both.
    steps.env["IMAGE"] = "ghcr.io/someone/else"
    done = steps.run(check)
    assert done.returncode != 0
    assert "pulls ghcr.io/gpu-labeller/gpu-labeller:1.2.3, not ghcr.io/someone/else:1.2.3" in done.stdout


@pytest.mark.parametrize("tag", ["vnext", "v1.2.3.4"])
def test_a_tag_that_is_no_version_publishes_no_chart(tools: Tools, tmp_path: Path, tag: str) -> None:
    done = StepRun(tools, tmp_path, tag).run(step_named(workflow()["jobs"]["chart"], "package"))
    assert done.returncode != 0
    assert not list(tmp_path.glob("*.tgz"))
