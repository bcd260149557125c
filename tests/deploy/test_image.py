"""Builds the image with scripts/build-image.sh (buildah, chroot isolation, vfs, a debootstrap base) and
runs gfd --oneshot on a mock profile and nfd-lite --dry-run inside it as uid 65532. Takes minutes."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.deploy.chart import REPO


def _why_buildah_cannot_run() -> str | None:
    if os.geteuid() != 0:
        return "building needs root (buildah with chroot isolation and vfs storage); run the tests as root"
    if shutil.which("buildah") is None and shutil.which("apt-get") is None:
        return "buildah is not installed and apt-get is not available to install it"
    return None


@pytest.mark.timeout(1800)
@pytest.mark.skipif(_why_buildah_cannot_run() is not None, reason=_why_buildah_cannot_run() or "")
def test_build_image_and_run_both_commands_as_non_root() -> None:
    proc = subprocess.run(
        [str(REPO / "scripts" / "build-image.sh")], capture_output=True, text=True, timeout=1800, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "user 65532:65532" in proc.stderr
    assert "nfd-lite would set" in proc.stderr
    assert "ok: localhost/gpu-labeller:dev runs gfd and nfd-lite as uid 65532" in proc.stderr
