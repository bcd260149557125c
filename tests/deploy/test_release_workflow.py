"""The release workflow (.github/workflows/release.yaml), checked offline: actionlint (with shellcheck on
every `run:` script) finds nothing, and what it publishes is what the chart pulls: both platforms a GPU node
can be (amd64 servers, arm64 Jetson boards), under the chart's default image name and appVersion tag,
signed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.chart import CHART, REPO, Tools

WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yaml"


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


def workflow() -> dict[str, Any]:
    # PyYAML reads the bare key `on` as True (YAML 1.1); the workflow means the string.
    loaded: dict[Any, Any] = yaml.safe_load(RELEASE.read_text())
    loaded["on"] = loaded.pop(True)
    return loaded


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
    # The version is the git tag without its v, and the job stops unless that is the chart's appVersion.
    (check,) = [s for s in job["steps"] if s.get("id") == "version"]
    assert 'version="${GITHUB_REF_NAME#v}"' in check["run"]
    assert "charts/gpu-labeller/Chart.yaml" in check["run"] and "exit 1" in check["run"]
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
