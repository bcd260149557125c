"""Small readers for files under the host root; every one answers None instead of raising."""

from __future__ import annotations

import re
from pathlib import Path

from gfd.inventory import JetsonFacts


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def read_hex(path: Path) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def jetson_facts(host_root: Path) -> JetsonFacts | None:
    """The tegra backend's facts when this is a Jetson, else None.

    Uses gfd.backends.tegra when it is installed; otherwise a minimal reader of the same files, so the doctor
    still recognises a Jetson.
    """
    try:
        from gfd.backends import tegra
    except ImportError:
        return _fallback_facts(host_root)
    try:
        if not tegra.is_jetson(host_root):
            return None
        facts: JetsonFacts = tegra.read_jetson_facts(host_root)
        return facts
    except Exception:  # a broken tegra reader must not hide the rest of the report
        return _fallback_facts(host_root)


_L4T_RE = re.compile(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*(\d+)\.(\d+)")


def _fallback_facts(host_root: Path) -> JetsonFacts | None:
    release = read_text(host_root / "etc/nv_tegra_release")
    compatible = read_text(host_root / "proc/device-tree/compatible") or ""
    soc = next((c.split(",", 1)[1] for c in compatible.split("\0") if c.startswith("nvidia,tegra")), None)
    if release is None and soc is None:
        return None
    l4t = None
    if release is not None and (m := _L4T_RE.search(release)):
        l4t = f"{m.group(1)}.{m.group(2)}.{m.group(3)}"
    model = read_text(host_root / "proc/device-tree/model")
    return JetsonFacts(model=model.strip("\0\n ") if model else None, soc=soc, l4t_version=l4t)
