"""`helm show readme` on the chart, as a user sees it before installing: the install and test commands, and
pointers that lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.deploy.chart import CHART, HELMS, REPO, Tools, run_helm

TOOLS = Tools(bin=REPO / ".cache" / "tools" / "bin")


@pytest.mark.parametrize("which", HELMS)
def test_helm_show_readme_says_how_to_install_test_and_where_to_read_on(tmp_path: Path, which: str) -> None:
    shown = run_helm(TOOLS, which, "show", "readme", str(CHART), tmp=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.rstrip() == (CHART / "README.md").read_text().rstrip()  # helm adds a line break
    for command in (
        "helm install gpu-labeller oci://ghcr.io/gpu-labeller/charts/gpu-labeller --version X.Y.Z"
        " -n gpu-labeller",
        "helm test gpu-labeller -n gpu-labeller --logs",
        "kubectl label namespace gpu-labeller pod-security.kubernetes.io/enforce=restricted",
    ):
        assert command in text
    # Every file it points to is in the repository its home page names.
    named = set(re.findall(r"`((?:docs/[\w-]+|values)\.(?:md|yaml)|values\.schema\.json)`", text))
    assert {"docs/deploy.md", "docs/device-plugin.md", "docs/doctor.md", "values.yaml"} <= named
    for path in named:
        assert (REPO / path).is_file() or (CHART / path).is_file(), path
