"""Container images for the test node without a registry: single-layer OCI archives written here, and the
project's own image exported from buildah's storage. containerd imports each (``ctr images import``) and
every pod uses ``imagePullPolicy: Never``.

The small images hold only what their program needs: the pause container (Kubernetes' own pause.c,
compiled static), a static busybox for test workloads, and NVIDIA's device plugin with the C library it
links against. None carries an NVML library: that arrives as on a real node, from the runtime."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.kube.controlplane import ROOT

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # the sandbox image kubelet 1.37 and containerd expect
BUSYBOX_IMAGE = "localhost/gpu-labeller-test/busybox:1"
DEVICE_PLUGIN_IMAGE = "localhost/gpu-labeller-test/nvidia-device-plugin:v0.19.3"
PROJECT_IMAGE = "localhost/gpu-labeller:dev"  # what scripts/build-image.sh tags
DEVICE_PLUGIN = ROOT / ".cache" / "peers" / "nvidia-gfd" / "nvidia-device-plugin"
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
BUSYBOX_APPLETS = ("sh", "sleep", "cat", "ls", "echo", "env", "id", "grep", "head", "tail", "wc", "test")
BUILDAH_ROOT = ROOT / ".cache" / "buildah"
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class Image:
    """One layer: ``files`` (destination -> (source, mode)), ``links`` (destination -> target), ``dirs``
    (destination -> mode); and the image config's entrypoint, command, user and environment."""

    name: str
    files: dict[str, tuple[Path, int]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, int] = field(default_factory=dict)
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    user: str | None = None
    env: list[str] = field(default_factory=lambda: [PATH])


def _layer(image: Image) -> bytes:
    buffer = io.BytesIO()
    made: set[str] = set()

    def directory(path: str, mode: int = 0o755) -> None:
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            name = "/".join(parts[:depth])
            if name not in made:
                made.add(name)
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, mode if depth == len(parts) else 0o755
                tar.addfile(info)

    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, mode in image.dirs.items():
            directory(path, mode)
        for path, (source, mode) in image.files.items():
            directory(os.path.dirname(path))
            data = source.read_bytes()
            info = tarfile.TarInfo(path.strip("/"))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        for path, target in image.links.items():
            directory(os.path.dirname(path))
            info = tarfile.TarInfo(path.strip("/"))
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    return buffer.getvalue()


def write_archive(image: Image, path: Path) -> Path:
    """An oci-layout tar of ``image`` that containerd imports under ``image.name``."""
    layer = _layer(image)
    config: dict[str, object] = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": image.env,
            "WorkingDir": "/",
            **({"Entrypoint": image.entrypoint} if image.entrypoint else {}),
            **({"Cmd": image.cmd} if image.cmd else {}),
            **({"User": image.user} if image.user else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }
    with tarfile.open(path, "w") as archive:

        def blob(data: bytes, media_type: str) -> dict[str, object]:
            digest = hashlib.sha256(data).hexdigest()
            info = tarfile.TarInfo(f"blobs/sha256/{digest}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
            return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": blob(json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json"),
            "layers": [blob(layer, "application/vnd.oci.image.layer.v1.tar")],
        }
        entry = blob(json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")
        entry["annotations"] = {"io.containerd.image.name": image.name}
        index = {"schemaVersion": 2, "manifests": [entry]}
        for name, data in (
            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
            ("index.json", json.dumps(index)),
        ):
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            archive.addfile(info, io.BytesIO(raw))
    return path


def pause_image(workdir: Path) -> Image:
    """Kubernetes' own pause container, from the pinned module's build/pause/linux/pause.c."""
    gomodcache = subprocess.run(
        ["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True
    ).stdout.strip()
    source = Path(gomodcache) / "k8s.io" / "kubernetes@v1.37.2" / "build" / "pause" / "linux" / "pause.c"
    binary = workdir / "pause"
    subprocess.run(["gcc", "-Os", "-static", "-o", str(binary), str(source)], check=True, capture_output=True)
    return Image(PAUSE_IMAGE, files={"/pause": (binary, 0o755)}, entrypoint=["/pause"], user="65535:65535")


def busybox_image() -> Image:
    return Image(
        BUSYBOX_IMAGE,
        files={"/bin/busybox": (BUSYBOX, 0o755)},
        links={f"/bin/{applet}": "busybox" for applet in BUSYBOX_APPLETS},
        dirs={"/tmp": 0o1777, "/etc": 0o755, "/proc": 0o755, "/sys": 0o755, "/dev": 0o755},
        cmd=["/bin/sh"],
    )


def _shared_libraries(binary: Path) -> dict[str, tuple[Path, int]]:
    """The binary's shared libraries and loader, found by ldd, at the paths the loader looks in."""
    out = subprocess.run(["ldd", str(binary)], check=True, capture_output=True, text=True).stdout
    found: dict[str, tuple[Path, int]] = {}
    for line in out.splitlines():
        words = line.split()
        path = words[2] if "=>" in words and len(words) > 2 else words[0]
        if path.startswith("/"):
            found[path] = (Path(os.path.realpath(path)), 0o755)
    return found


def device_plugin_image() -> Image:
    """NVIDIA's k8s-device-plugin v0.19.3, built from its module (scripts/peers/nvidia-gfd)."""
    return Image(
        DEVICE_PLUGIN_IMAGE,
        files={"/usr/bin/nvidia-device-plugin": (DEVICE_PLUGIN, 0o755), **_shared_libraries(DEVICE_PLUGIN)},
        dirs={"/tmp": 0o1777, "/etc": 0o755, "/proc": 0o755, "/sys": 0o755, "/dev": 0o755, "/var/run": 0o755},
        entrypoint=["/usr/bin/nvidia-device-plugin"],
        # As NVIDIA's own image: ask the NVIDIA runtime for every GPU, which injects the NVML library.
        env=[PATH, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility"],
    )


def export_project_image(path: Path) -> Path:
    """The image scripts/build-image.sh built, as a docker-archive from its buildah storage."""
    subprocess.run(
        [
            "buildah", "--storage-driver", "vfs", "--root", str(BUILDAH_ROOT / "storage"),
            "--runroot", str(BUILDAH_ROOT / "run"), "push", "--quiet", PROJECT_IMAGE,
            f"docker-archive:{path}:{PROJECT_IMAGE}",
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )  # fmt: skip
    return path
