"""checkov, offline, over the rendered chart (every matrix entry), the chart through checkov's own helm
framework, rbac/ and the Dockerfile: no failed check. Skips are inline, each with its reason."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import CHART, MATRIX, RBAC, REPO, Tools


def checkov(tools: Tools, tmp_path: Path, framework: str, *target: str) -> dict[str, Any]:
    # helm must be on PATH: without it checkov's helm framework silently scans nothing.
    env = {**os.environ, "PATH": f"{tools.bin}:/usr/bin:/bin", "HOME": str(tmp_path)}
    cmd = [
        str(tools.checkov),
        "--skip-download",
        "--compact",
        "-o",
        "json",
        "--framework",
        framework,
        *target,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.stdout.strip(), f"checkov printed nothing:\n{proc.stderr[-3000:]}"
    reports: list[dict[str, Any]] = []
    decoder, text, pos = json.JSONDecoder(), proc.stdout, 0
    while pos < len(text.rstrip()):
        obj, pos = decoder.raw_decode(text, pos)
        reports += obj if isinstance(obj, list) else [obj]
        while pos < len(text) and text[pos].isspace():
            pos += 1
    (report,) = [r for r in reports if r.get("check_type") == framework]
    return report


def assert_clean(report: dict[str, Any], minimum_passed: int) -> None:
    failed = [
        f"{c['check_id']} {c['check_name']} @ {c['resource']} ({c.get('file_path')})"
        for c in report["results"]["failed_checks"]
    ]
    assert failed == [], "\n".join(failed)
    assert report["summary"]["passed"] >= minimum_passed, "checkov checked (almost) nothing"
    for c in report["results"].get("skipped_checks", []):
        reason = c.get("check_result", {}).get("suppress_comment") or ""
        assert len(reason) > 20, f"{c['check_id']} skipped without a reason"


def test_checkov_rendered_matrix(tools: Tools, rendered: dict[tuple[str, str], str], tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    out.mkdir()
    for entry in MATRIX:
        (out / f"{entry}.yaml").write_text(rendered["helm3", entry])
    report = checkov(tools, tmp_path, "kubernetes", "-d", str(out))
    assert_clean(report, minimum_passed=100 * len(MATRIX))
    assert report["summary"]["resource_count"] >= 6 * len(MATRIX)


def test_checkov_chart_through_its_helm_framework(tools: Tools, tmp_path: Path) -> None:
    # checkov renders with `helm template` and no --namespace; give the objects the real one.
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"namespaceOverride": "gpu-labeller"}))
    report = checkov(tools, tmp_path, "helm", "-d", str(CHART), "--var-file", str(values))
    assert_clean(report, minimum_passed=100)


def test_checkov_rbac_dir(tools: Tools, tmp_path: Path) -> None:
    report = checkov(tools, tmp_path, "kubernetes", "-d", str(RBAC))
    assert_clean(report, minimum_passed=10)
    assert report["summary"]["resource_count"] >= 4


@pytest.mark.parametrize("dockerfile", ["Dockerfile"])
def test_checkov_dockerfile(tools: Tools, tmp_path: Path, dockerfile: str) -> None:
    report = checkov(tools, tmp_path, "dockerfile", "-f", str(REPO / dockerfile))
    assert_clean(report, minimum_passed=20)
