"""Deploy tests use the real helm (v3 and v4) and checkov, installed once by scripts/install-tools.sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.deploy.chart import HELMS, MATRIX, REPO, Tools, render


@pytest.fixture(scope="session")
def tools() -> Tools:
    # Cached under .cache/tools/ and .venv-checkov/: the first run downloads (about a minute), later runs
    # only check versions.
    proc = subprocess.run(
        [str(REPO / "scripts" / "install-tools.sh")], capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, f"scripts/install-tools.sh failed:\n{proc.stderr[-3000:]}"
    return Tools(bin=Path(proc.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="session")
def rendered(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    """(helm, matrix entry) -> rendered manifests, for every helm and every entry."""
    out = {}
    for which in HELMS:
        for name, values in MATRIX.items():
            out[which, name] = render(tools, which, values, tmp_path_factory.mktemp(f"{which}-{name}"))
    return out
