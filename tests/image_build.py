"""The project image, built once per test session by scripts/build-image.sh (buildah, chroot isolation,
vfs storage, a debootstrap base): the image test checks what the script reports, the real node runs it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.kube.controlplane import ROOT


def why_image_cannot_be_built() -> str | None:
    if os.geteuid() != 0:
        return "building needs root (buildah with chroot isolation and vfs storage); run the tests as root"
    if shutil.which("buildah") is None and shutil.which("apt-get") is None:
        return "buildah is not installed and apt-get is not available to install it"
    return None


def build_image(arch: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"ARCH": arch} if arch else {})}
    return subprocess.run(
        [str(ROOT / "scripts" / "build-image.sh")],
        capture_output=True,
        text=True,
        timeout=2700,
        env=env,
        check=False,
    )


@pytest.fixture(scope="session")
def project_image() -> subprocess.CompletedProcess[str]:
    """The host architecture's image, localhost/gpu-labeller:dev, built from this checkout."""
    reason = why_image_cannot_be_built()
    if reason:
        pytest.skip(reason)
    return build_image()
