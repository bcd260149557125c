"""Values written for the previous release still validate with this chart (no value was renamed or
removed) and mean what they meant: the previous chart's own defaults (what `helm upgrade --reuse-values`
carries over), every values set the previous release's tests used, and what its docs told users to set."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import CHART, HELMS, RELEASE, REPO, Tools, documents, run_helm
from tests.deploy.release import previous_release


def previous_file(path: str) -> str:
    revision = previous_release()
    done = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{revision}:{path}"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"git show {revision}:{path}: {done.stderr.strip()} (needs the history)"
    return done.stdout


def previous_matrix() -> dict[str, dict[str, Any]]:
    """The values sets the previous release's deploy tests rendered (tests/deploy/chart.py, MATRIX)."""
    module = types.ModuleType("previous_release_chart_matrix")
    module.__file__ = str(REPO / "tests" / "deploy" / "chart.py")  # it locates the repository from here
    sys.modules[module.__name__] = module  # dataclasses look their module up
    try:
        source = previous_file("tests/deploy/chart.py")
        exec(compile(source, "previous tests/deploy/chart.py", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    matrix: dict[str, dict[str, Any]] = module.MATRIX
    return matrix


# What the previous README and docs/deploy.md told users to pass.
DOCUMENTED = {
    "own registry": {"image": {"repository": "registry.example.com/gpu-labeller"}},
    "helm template with the API server's address": {"networkPolicy": {"apiServerCIDRs": ["10.0.0.5/32"]}},
    "a control-plane subnet and port": {
        "networkPolicy": {"apiServerCIDRs": ["10.0.0.0/24"], "apiServerPorts": [8443]}
    },
}


def _lint(tools: Tools, which: str, values: dict[str, Any], tmp: Path) -> subprocess.CompletedProcess[str]:
    return run_helm(
        tools, which, "lint", "--strict", str(CHART), "-n", "gpu-labeller", values=values, tmp=tmp
    )


@pytest.mark.parametrize("which", HELMS)
def test_the_previous_charts_defaults_validate(tools: Tools, tmp_path: Path, which: str) -> None:
    values = yaml.safe_load(previous_file("charts/gpu-labeller/values.yaml"))
    proc = _lint(tools, which, values, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_values_set_the_previous_release_tested_validates(tools: Tools, tmp_path: Path) -> None:
    matrix = previous_matrix()
    assert len(matrix) >= 10
    failed = {}
    for name, values in matrix.items():
        proc = _lint(tools, "helm4", values, tmp_path)
        if proc.returncode != 0:
            failed[name] = proc.stdout[-600:] + proc.stderr[-600:]
    assert not failed, failed


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_documented_values_of_the_previous_release_mean_the_same(
    tools: Tools, tmp_path: Path, name: str
) -> None:
    values = DOCUMENTED[name]
    assert _lint(tools, "helm3", values, tmp_path).returncode == 0
    proc = run_helm(tools, "helm3", "template", RELEASE, str(CHART), values=values, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (policy,) = [
        d
        for d in documents(proc.stdout)
        if d["kind"] == "NetworkPolicy" and "-test" not in d["metadata"]["name"]
    ]
    api = policy["spec"]["egress"][1:]
    given = values.get("networkPolicy", {})
    ports = [{"port": p, "protocol": "TCP"} for p in given.get("apiServerPorts", [443, 6443])]
    if "apiServerCIDRs" in given:  # the addresses given, and no others (nothing is looked up any more)
        assert api == [{"ports": ports, "to": [{"ipBlock": {"cidr": c}} for c in given["apiServerCIDRs"]]}]
    else:
        assert api == [{"ports": ports}]
