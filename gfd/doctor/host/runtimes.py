"""Container runtime configuration files, parsed (TOML/JSON), reduced to what matters for NVIDIA GPUs."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NVIDIA_BINARY = "nvidia-container-runtime"

# (engine, config file). The one the kubelet uses is usually the only one present.
ENGINES: tuple[tuple[str, str], ...] = (
    ("containerd", "etc/containerd/config.toml"),
    ("k3s containerd", "var/lib/rancher/k3s/agent/etc/containerd/config.toml"),
    ("rke2 containerd", "var/lib/rancher/rke2/agent/etc/containerd/config.toml"),
    ("cri-o", "etc/crio/crio.conf"),
    ("docker", "etc/docker/daemon.json"),
)


@dataclass(frozen=True)
class RuntimeConfig:
    engine: str
    path: str  # as on the host, "/etc/containerd/config.toml"
    error: str | None = None  # the file exists but cannot be read or parsed
    cri_disabled: bool = (
        False  # Docker's own containerd runs with the CRI plugin off: Kubernetes cannot use it
    )
    nvidia: tuple[str, ...] = ()  # runtime names that run nvidia-container-runtime
    binaries: tuple[str, ...] = ()  # the binary paths those entries name
    default: str | None = None

    @property
    def nvidia_is_default(self) -> bool:
        return self.default is not None and self.default in self.nvidia


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _load_toml(root: Path, rel: str) -> dict[str, Any]:
    """A containerd config with its `imports` (drop-ins such as conf.d/99-nvidia.toml) merged in."""
    doc = tomllib.loads((root / rel).read_text(encoding="utf-8"))
    for pattern in doc.get("imports", []) or []:
        pattern = str(pattern)
        if not pattern.startswith("/"):  # relative imports are relative to the importing file
            pattern = str(Path("/" + rel).parent / pattern)
        for extra in sorted(root.glob(pattern.lstrip("/"))):
            doc = _merge(doc, tomllib.loads(extra.read_text(encoding="utf-8")))
    return doc


def _pick_nvidia(runtimes: dict[str, Any], binary_key: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    names, binaries = [], []
    for name, spec in sorted(runtimes.items()):
        spec = spec if isinstance(spec, dict) else {}
        binary = str(spec.get(binary_key) or (spec.get("options") or {}).get("BinaryName") or "")
        if name == "nvidia" or NVIDIA_BINARY in binary:
            names.append(name)
            if binary:
                binaries.append(binary)
    return tuple(names), tuple(binaries)


def parse_containerd(engine: str, shown: str, doc: dict[str, Any]) -> RuntimeConfig:
    version = int(doc.get("version", 1))
    plugins = doc.get("plugins", {}) or {}
    plugin = {1: "cri", 2: "io.containerd.grpc.v1.cri"}.get(version, "io.containerd.cri.v1.runtime")
    disabled = {str(p) for p in doc.get("disabled_plugins", []) or []}
    cri_off = bool(disabled & {"cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"})
    section = ((plugins.get(plugin) or {}).get("containerd")) or {}
    names, binaries = _pick_nvidia(section.get("runtimes") or {}, "BinaryName")
    default = str(section.get("default_runtime_name") or "runc")
    return RuntimeConfig(engine, shown, None, cri_off, names, binaries, default)


def parse_crio(shown: str, doc: dict[str, Any]) -> RuntimeConfig:
    runtime = (doc.get("crio") or {}).get("runtime") or {}
    names, binaries = _pick_nvidia(runtime.get("runtimes") or {}, "runtime_path")
    return RuntimeConfig(
        "cri-o", shown, None, False, names, binaries, str(runtime.get("default_runtime") or "crun")
    )


def parse_docker(shown: str, doc: dict[str, Any]) -> RuntimeConfig:
    names, binaries = _pick_nvidia(doc.get("runtimes") or {}, "path")
    return RuntimeConfig(
        "docker", shown, None, False, names, binaries, str(doc.get("default-runtime") or "runc")
    )


def read_engine(root: Path, engine: str, rel: str) -> RuntimeConfig | None:
    """The parsed config of one engine, None when its file is absent."""
    shown = "/" + rel
    if not (root / rel).is_file():
        return None
    try:
        if engine == "docker":
            return parse_docker(shown, json.loads((root / rel).read_text(encoding="utf-8") or "{}"))
        doc = _load_toml(root, rel)
        if engine == "cri-o":
            for extra in sorted((root / "etc/crio/crio.conf.d").glob("*.conf")):
                doc = _merge(doc, tomllib.loads(extra.read_text(encoding="utf-8")))
            return parse_crio(shown, doc)
        return parse_containerd(engine, shown, doc)
    except (OSError, UnicodeDecodeError) as err:
        return RuntimeConfig(engine, shown, error=f"cannot read it: {err}")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, ValueError, TypeError, AttributeError) as err:
        return RuntimeConfig(engine, shown, error=f"cannot parse it: {err}")


def read_all(root: Path) -> list[RuntimeConfig]:
    found = [read_engine(root, engine, rel) for engine, rel in ENGINES]
    crio_dropins = sorted((root / "etc/crio/crio.conf.d").glob("*.conf"))
    if not any(c and c.engine == "cri-o" for c in found) and crio_dropins:
        # CRI-O may run on drop-ins alone
        doc: dict[str, Any] = {}
        try:
            for extra in crio_dropins:
                doc = _merge(doc, tomllib.loads(extra.read_text(encoding="utf-8")))
            found.append(parse_crio("/etc/crio/crio.conf.d/", doc))
        except (OSError, tomllib.TOMLDecodeError) as err:
            found.append(RuntimeConfig("cri-o", "/etc/crio/crio.conf.d/", error=f"cannot parse it: {err}"))
    return [c for c in found if c is not None]
