"""Layer 6: can containers get the GPU? The NVIDIA Container Toolkit and the runtime configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from gfd.doctor.host.context import Context
from gfd.doctor.host.runtimes import RuntimeConfig, read_all
from gfd.doctor.model import Finding, Status

BIN_DIRS = ("usr/bin", "usr/local/bin", "usr/sbin", "bin", "usr/local/nvidia/toolkit")
TOOLS = ("nvidia-container-runtime", "nvidia-ctk", "nvidia-container-cli", "nvidia-container-runtime-hook")
CDI_DIRS = ("etc/cdi", "var/run/cdi", "run/cdi")

CONFIGURE = {
    "containerd": "`sudo nvidia-ctk runtime configure --runtime=containerd && sudo systemctl restart "
    "containerd`",
    "k3s containerd": "restart k3s after installing the toolkit: k3s adds the nvidia runtime itself when it "
    "finds nvidia-container-runtime (`sudo systemctl restart k3s` or `k3s-agent`)",
    "rke2 containerd": "restart rke2 after installing the toolkit: it adds the nvidia runtime itself",
    "cri-o": "`sudo nvidia-ctk runtime configure --runtime=crio && sudo systemctl restart crio`",
    "docker": "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`",
}


def find_tools(ctx: Context) -> dict[str, str]:
    found: dict[str, str] = {}
    for tool in TOOLS:
        for rel in BIN_DIRS:
            if ctx.path(f"{rel}/{tool}").is_file():
                found[tool] = ctx.shown(f"{rel}/{tool}")
                break
    return found


def _binary_exists(ctx: Context, binary: str) -> bool:
    if "/" in binary:
        return ctx.path(binary).is_file()
    return any(ctx.path(f"{rel}/{binary}").is_file() for rel in BIN_DIRS)


def check(ctx: Context) -> list[Finding]:
    return [check_tools(ctx), *check_runtimes(ctx), *check_cdi(ctx)]


def check_tools(ctx: Context) -> Finding:
    tools = find_tools(ctx)
    if "nvidia-container-runtime" not in tools and "nvidia-ctk" not in tools:
        return Finding(
            "FAIL",
            "NVIDIA Container Toolkit not found (no nvidia-container-runtime or nvidia-ctk in "
            + ", ".join(f"/{d}" for d in BIN_DIRS)
            + ")",
            "install the nvidia-container-toolkit package (NVIDIA's apt/dnf repository), or let the "
            "GPU Operator "
            "install it",
            item="toolkit",
        )
    return Finding("PASS", "found " + ", ".join(sorted(tools.values())), item="toolkit")


def check_runtimes(ctx: Context) -> list[Finding]:
    configs = read_all(ctx.host_root)
    usable = [c for c in configs if c.error is None and not c.cri_disabled]
    if not configs:
        return [
            Finding(
                "FAIL",
                "no container runtime configuration found (containerd, k3s, rke2, CRI-O or Docker)",
                "install and configure a container runtime, then " + CONFIGURE["containerd"],
                item="runtime",
            )
        ]
    any_nvidia = any(c.nvidia for c in usable)
    ctx.nvidia_runtime_default = any(c.nvidia_is_default for c in usable)
    return [_one(ctx, c, any_nvidia) for c in configs]


def _one(ctx: Context, c: RuntimeConfig, any_nvidia: bool) -> Finding:
    item = c.engine
    if c.error is not None:
        return Finding("FAIL", f"{c.path}: {c.error}", f"fix the file, then restart {c.engine}", item=item)
    if c.cri_disabled:
        return Finding(
            "PASS",
            f"{c.path}: CRI plugin disabled (Docker's own containerd; Kubernetes does not use it)",
            item=item,
        )
    if not c.nvidia:
        # Only the runtime the kubelet talks to needs the entry; if another one has it, this is a warning.
        status: Status = "WARN" if any_nvidia else "FAIL"
        return Finding(
            status,
            f"{c.path}: no nvidia runtime configured (default: {c.default})",
            CONFIGURE[c.engine],
            item=item,
        )
    missing = [b for b in c.binaries if not _binary_exists(ctx, b)]
    if missing:
        return Finding(
            "FAIL",
            f"{c.path}: runtime {c.nvidia[0]} points at {missing[0]}, which does not exist",
            "reinstall the toolkit (a removed GPU Operator leaves this behind), then " + CONFIGURE[c.engine],
            item=item,
        )
    names = ", ".join(c.nvidia)
    if c.nvidia_is_default:
        return Finding("PASS", f"{c.path}: runtime {names}, and it is the default", item=item)
    return Finding(
        "PASS",
        f"{c.path}: runtime {names} configured, not the default ({c.default}): GPU pods need "
        "`runtimeClassName: nvidia`",
        item=item,
    )


def _load_spec(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError("not a mapping")
    return data


def check_cdi(ctx: Context) -> list[Finding]:
    specs = sorted(
        p for rel in CDI_DIRS for p in ctx.path(rel).glob("*") if p.suffix in (".yaml", ".yml", ".json")
    )
    if not specs:
        return [
            Finding(
                "PASS",
                "no CDI specs in /etc/cdi or /var/run/cdi (only needed when the runtime or device "
                "plugin uses CDI; "
                "create with `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)",
                item="CDI",
            )
        ]
    findings = []
    for path in specs:
        shown = "/" + str(path.relative_to(ctx.host_root))
        try:
            spec = _load_spec(path)
            kind = str(spec["kind"])
            names = [str(d["name"]) for d in spec.get("devices") or []]
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as err:
            findings.append(
                Finding(
                    "WARN",
                    f"{shown}: not a valid CDI spec ({err})",
                    "regenerate it with nvidia-ctk",
                    item="CDI",
                )
            )
            continue
        if not kind.startswith("nvidia.com/"):
            continue
        indexed = [n for n in names if n.isdigit()]
        if kind == "nvidia.com/gpu" and indexed and len(indexed) < ctx.gpu_count:
            findings.append(
                Finding(
                    "WARN",
                    f"{shown}: {kind} lists {len(indexed)} GPU(s), the host has {ctx.gpu_count} (stale spec)",
                    "`sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` after every driver "
                    "or GPU change",
                    item="CDI",
                )
            )
            continue
        findings.append(Finding("PASS", f"{shown}: {kind} devices {', '.join(names) or 'none'}", item="CDI"))
    return findings or [Finding("PASS", "CDI specs present, none for NVIDIA devices", item="CDI")]
