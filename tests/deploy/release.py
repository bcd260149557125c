"""The release workflow's chart steps run here as the workflow runs them (bash, with the tag, the
workflow's env and the runner's variables): what a release tag makes of the chart. And the chart as the
previous release shipped it, which the upgrade tests start from."""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.chart import CHART, REPO, Tools

WORKFLOWS = REPO / ".github" / "workflows"
RELEASE_WORKFLOW = WORKFLOWS / "release.yaml"
# The chart before the first release: the commit this chart's NetworkPolicy modes, chart publishing and
# upgrade tests were built on. Once a tag vX.Y.Z exists, the newest one is the previous release instead.
BEFORE_THE_FIRST_RELEASE = "e302e66116b174e82e08e39964583d8ce65b3120"


def workflow() -> dict[str, Any]:
    # PyYAML reads the bare key `on` as True (YAML 1.1); the workflow means the string.
    loaded: dict[Any, Any] = yaml.safe_load(RELEASE_WORKFLOW.read_text())
    loaded["on"] = loaded.pop(True)
    return loaded


def step_named(job: dict[str, Any], step_id: str) -> dict[str, Any]:
    (found,) = [s for s in job["steps"] if s.get("id") == step_id]
    return found


class StepRun:
    """Steps of one job run in order, as GitHub's runner runs a `run:` step without `shell:` (`bash -e`),
    in the repository, with GITHUB_REF_NAME set to ``tag``, RUNNER_TEMP and GITHUB_OUTPUT in ``tmp`` and
    the tools on PATH. ``outputs`` collects what each step wrote to GITHUB_OUTPUT, by step id; ``needs``
    holds the outputs of the jobs this one needs, by job."""

    def __init__(self, tools: Tools, tmp: Path, tag: str) -> None:
        self.tools = tools
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.tag = tag
        self.outputs: dict[str, dict[str, str]] = {}
        self.needs: dict[str, dict[str, str]] = {}
        self.env: dict[str, str] = dict(workflow()["env"])

    def expand(self, text: str) -> str:
        """The `${{ }}` expressions the chart steps use: env.NAME, steps.ID.outputs.NAME and
        needs.JOB.outputs.NAME."""

        def value(match: re.Match[str]) -> str:
            expression = match.group(1).strip()
            if found := re.fullmatch(r"env\.(\w+)", expression):
                return self.env[found.group(1)]
            if found := re.fullmatch(r"(steps|needs)\.([\w-]+)\.outputs\.([\w-]+)", expression):
                known = self.outputs if found.group(1) == "steps" else self.needs
                return known[found.group(2)][found.group(3)]
            raise AssertionError(f"no value here for ${{{{ {expression} }}}}")

        return re.sub(r"\$\{\{(.*?)\}\}", value, text)

    def run(self, step: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        output = self.tmp / "github-output"
        output.write_text("")
        env = {
            "PATH": f"{self.tools.bin}:/usr/bin:/bin",
            "HOME": str(self.tmp),
            "HELM_CACHE_HOME": str(self.tmp / ".helm-cache"),
            "HELM_CONFIG_HOME": str(self.tmp / ".helm-config"),
            "HELM_DATA_HOME": str(self.tmp / ".helm-data"),
            "GITHUB_REF_NAME": self.tag,
            "GITHUB_OUTPUT": str(output),
            "RUNNER_TEMP": str(self.tmp),
            **self.env,
            **{name: self.expand(str(value)) for name, value in (step.get("env") or {}).items()},
        }
        done = subprocess.run(
            ["bash", "-e", "-c", step["run"]],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if "id" in step:
            lines = output.read_text().splitlines()
            self.outputs[step["id"]] = dict(line.split("=", 1) for line in lines if "=" in line)
        return done


def package_chart(tools: Tools, version: str, tmp: Path, digest: str | None = None) -> Path:
    """The chart as the release workflow packages it for tag v``version``: its `helm package` .tgz, its image
    pinned to ``digest``, the manifest list's the image job pushed. Without one (tests whose image is in no
    registry), the same package less the pin, which the release itself refuses (REQUIRE_SIGNED)."""
    steps = StepRun(tools, tmp, f"v{version}")
    steps.needs["image"] = {"digest": digest or ""}
    if digest is None:
        steps.env["REQUIRE_SIGNED"] = "0"
    done = steps.run(step_named(workflow()["jobs"]["chart"], "package"))
    assert done.returncode == 0, f"the workflow's package step failed:\n{done.stdout}{done.stderr}"
    return Path(steps.outputs["package"]["chart"])


def previous_release() -> str:
    """The git revision of the previous release: the newest tag vX.Y.Z, or before the first release the
    commit this work started from."""
    tags = subprocess.run(
        ["git", "-C", str(REPO), "tag", "--list", "v*", "--sort=-v:refname", "--merged", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return tags[0] if tags else BEFORE_THE_FIRST_RELEASE


def previous_chart(tools: Tools, tmp: Path) -> Path:
    """The previous release's chart, packaged by `helm package` as it was then (its own version)."""
    revision = previous_release()
    tmp.mkdir(parents=True, exist_ok=True)
    archive = tmp / "previous.tar"
    done = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--output", str(archive), revision, str(CHART.relative_to(REPO))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, (
        f"git archive {revision}: {done.stderr.strip()} (the upgrade tests need the repository's history)"
    )
    source = tmp / "previous"
    with tarfile.open(archive) as tar:
        tar.extractall(source, filter="data")
    packaged = subprocess.run(
        [
            str(tools.helm("helm3")),
            "package",
            str(source / CHART.relative_to(REPO)),
            "--destination",
            str(tmp),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(tmp)},
        check=False,
    )
    assert packaged.returncode == 0, packaged.stderr
    return Path(packaged.stdout.strip().rsplit(": ", 1)[-1])
