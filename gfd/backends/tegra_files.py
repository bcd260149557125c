"""Small, pure readers for the files a Jetson keeps its facts in.

Every path is read under a host root (the host's ``/`` mounted into the container). Absolute
symlinks are re-rooted under that host root while resolving: on a Jetson ``/proc/device-tree``
points at ``/sys/firmware/devicetree/base`` and ``/usr/local/cuda`` at ``/etc/alternatives/cuda``,
and following them as the kernel would lands in the container's own, masked or empty, tree.

Readers return None for anything absent or unreadable; deciding what that means is the caller's job.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

_MAX_LINKS = 40  # the kernel's own limit on symlinks followed in one lookup
_MAX_BYTES = 1 << 20  # these files are tiny; never slurp something huge by mistake


def resolve_under(root: Path, rel: str) -> Path | None:
    """The real path of ``rel`` inside ``root``, following symlinks as if ``root`` were ``/``.

    Returns None when a link loops or a component is missing or unreadable. ``..`` never climbs
    above ``root``.
    """
    pending = list(PurePosixPath(rel.lstrip("/")).parts)
    done: list[str] = []
    links = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        candidate = root.joinpath(*done, part)
        try:
            is_link = candidate.is_symlink()
            target = str(candidate.readlink()) if is_link else ""
        except OSError:
            return None
        if not is_link:
            done.append(part)
            continue
        links += 1
        if links > _MAX_LINKS:
            return None
        target_parts = list(PurePosixPath(target).parts)
        if target.startswith("/"):
            done = []
            target_parts = target_parts[1:]
        pending = target_parts + pending
    return root.joinpath(*done)


def read_bytes(root: Path, rel: str) -> bytes | None:
    path = resolve_under(root, rel)
    if path is None:
        return None
    try:
        with path.open("rb") as fh:
            return fh.read(_MAX_BYTES)
    except OSError:
        return None


def read_text(root: Path, rel: str) -> str | None:
    """A small text file with device-tree NULs and surrounding whitespace stripped; None if empty."""
    data = read_bytes(root, rel)
    if data is None:
        return None
    text = data.decode("utf-8", errors="replace").strip("\x00 \t\r\n")
    return text or None


def read_string_list(root: Path, rel: str) -> list[str] | None:
    """A device-tree string list such as ``compatible``: NUL-separated, NUL-terminated."""
    data = read_bytes(root, rel)
    if data is None:
        return None
    items = [s.strip() for s in data.decode("utf-8", errors="replace").split("\x00")]
    return [s for s in items if s]


_L4T_LINE = re.compile(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*(\d+(?:\.\d+)*)")


def parse_l4t_release(text: str) -> str | None:
    """``# R36 (release), REVISION: 4.0, GCID: ...`` -> ``"36.4.0"``; R32 ``REVISION: 7.1`` -> ``"32.7.1"``.

    Always three parts, so one table key matches however NVIDIA wrote the revision.
    """
    match = _L4T_LINE.search(text)
    if match is None:
        return None
    parts = [match.group(1), *match.group(2).split(".")]
    parts = [str(int(p)) for p in parts[:3]]
    parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


_MEMTOTAL = re.compile(r"^MemTotal:\s*(\d+)\s*kB", re.MULTILINE)


def parse_memtotal_mib(text: str) -> int | None:
    """MemTotal from /proc/meminfo, in MiB (the kernel writes kB meaning KiB)."""
    match = _MEMTOTAL.search(text)
    return int(match.group(1)) // 1024 if match else None


_CUDA_VERSION = re.compile(r"(\d+)\.(\d+)")


def _version_code(version: str) -> int | None:
    match = _CUDA_VERSION.match(version.strip())
    if match is None:
        return None
    return int(match.group(1)) * 1000 + int(match.group(2)) * 10


def parse_cuda_version_json(text: str) -> int | None:
    """``{"cuda": {"version": "12.6.68"}}`` -> 12060 (NVML's encoding: 1000*major + 10*minor)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    cuda = doc.get("cuda") if isinstance(doc, dict) else None
    version = cuda.get("version") if isinstance(cuda, dict) else None
    return _version_code(version) if isinstance(version, str) else None


_CUDA_TXT = re.compile(r"CUDA Version\s+(\d+\.\d+)")


def parse_cuda_version_txt(text: str) -> int | None:
    """``CUDA Version 10.2.300`` (CUDA 10 and older) -> 10020."""
    match = _CUDA_TXT.search(text)
    return _version_code(match.group(1)) if match else None


_POWER_MODEL = re.compile(r"<\s*POWER_MODEL\s+ID\s*=\s*(\d+)\s+NAME\s*=\s*([^\s>]+)\s*>")
_PM_DEFAULT = re.compile(r"<\s*PM_CONFIG\s+DEFAULT\s*=\s*(\d+)\s*>")
_PMODE = re.compile(r"pmode:\s*(\d+)")


def parse_nvpmodel_modes(conf: str) -> tuple[dict[int, str], int | None]:
    """Mode id -> name from nvpmodel.conf, and the mode nvpmodel applies when none was chosen."""
    modes = {int(m.group(1)): m.group(2) for m in _POWER_MODEL.finditer(conf)}
    default = _PM_DEFAULT.search(conf)
    return modes, int(default.group(1)) if default else None


def parse_nvpmodel_status(text: str) -> int | None:
    """``pmode:0002 fmode:quiet`` -> 2."""
    match = _PMODE.search(text)
    return int(match.group(1)) if match else None
