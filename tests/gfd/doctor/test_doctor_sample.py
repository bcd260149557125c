"""The healthy sample in docs/doctor.md is what `gfd doctor` prints on the healthy fake host, with a real
NVML C library (the mock built from NVIDIA's go-nvml machines) loaded by the real bindings.

After a deliberate change to the doctor's output, regenerate the sample and review the diff:
    UPDATE_DOCS=1 .venv/bin/pytest tests/gfd/doctor/test_doctor_sample.py && git diff docs/doctor.md
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.parity import peers

DOC = peers.ROOT / "docs/doctor.md"
MARKER = "<!-- healthy sample: made by tests/gfd/doctor/test_doctor_sample.py -->"
SHOWN_ROOT = "/host"  # where `kubectl debug node` mounts the node's root
COMMAND = f"gfd doctor --host-root {SHOWN_ROOT} --cuda 12.8 | cat"


def _render(root: Path) -> tuple[int, str]:
    env = peers.mock_env("dgxa100", gpus=2)  # the fixture's PCI bus has two A100s
    done = subprocess.run(
        [sys.executable, "-m", "gfd.doctor", "--host-root", str(root), "--cuda", "12.8"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=peers.ROOT,
    )
    return done.returncode, f"$ {COMMAND}\n" + done.stdout.replace(str(root), SHOWN_ROOT)


def _block(text: str) -> re.Match[str]:
    match = re.search(re.escape(MARKER) + r"\n```\n(.*?)```\n", text, re.S)
    assert match, f"{DOC.name}: no code block after {MARKER}"
    return match


def _at_the_mocks_addresses(root: Path) -> Path:
    """The fixture's two GPUs moved on its PCI bus to where the mock's NVML says they sit."""
    devices = root / "sys/bus/pci/devices"
    for tree, mock in (("0000:07:00.0", "0000:10:00.0"), ("0000:0f:00.0", "0000:11:00.0")):
        (devices / tree).rename(devices / mock)
    return root


def test_healthy_host_passes_every_layer_with_a_real_nvml_library(host: Callable[[str], Path]) -> None:
    peers.require()
    code, out = _render(_at_the_mocks_addresses(host("healthy-pci")))
    assert code == 0, out
    assert "[PASS] 3 NVML" in out and "2 GPU(s)" in out
    assert "[FAIL]" not in out and "cannot be used" not in out
    doc = DOC.read_text()
    block = _block(doc)
    if os.environ.get("UPDATE_DOCS"):
        DOC.write_text(doc[: block.start(1)] + out + doc[block.end(1) :])
    assert _block(DOC.read_text()).group(1) == out, "docs/doctor.md is stale: regenerate it (see this file)"
