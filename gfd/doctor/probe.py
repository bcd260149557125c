"""What `gfd doctor --smoke-test` runs inside its GPU pod, and the one JSON line it prints.

Run in the container as ``python3 -m gfd.doctor.probe``: it starts NVML through gfd's own backend (the same
library search and error advice as the daemon), lists the GPUs NVML shows this container and the NVIDIA
device nodes present, and prints them as one line, ``{"gfd-smoke-probe": {...}}``. It reports facts only;
the doctor outside judges them, so a probe image of another version still answers what it saw. Exit 0 when
NVML started and showed a GPU, else 1.

``ProbeResult.from_log`` reads that line back from the pod's log. The log is the container's output, so
every field is checked before it is believed.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

KEY = "gfd-smoke-probe"
DEV = Path("/dev")


class ProbeOutputError(ValueError):
    """The pod's log holds no readable probe result; the message says what was wrong."""


@dataclass(frozen=True)
class ProbeGpu:
    index: int
    name: str
    uuid: str | None
    minor: int | None  # the N of /dev/nvidiaN


@dataclass(frozen=True)
class NvmlStart:
    """How nvmlInit went: ``code`` is NVML's return code when it failed (nvml.h), ``advice`` gfd's line."""

    ok: bool
    code: int | None = None
    advice: str | None = None


@dataclass(frozen=True)
class ProbeResult:
    nvml: NvmlStart
    visible_devices: str | None  # NVIDIA_VISIBLE_DEVICES as the container got it (the device plugin's)
    device_nodes: tuple[str, ...]  # character devices named /dev/nvidia*
    driver_version: str | None = None
    cuda_driver_version: int | None = None  # as NVML reports it: 12040 is CUDA 12.4
    gpus: tuple[ProbeGpu, ...] = ()

    def line(self) -> str:
        return json.dumps({KEY: asdict(self)}, separators=(",", ":"))

    @classmethod
    def from_log(cls, log: str) -> ProbeResult:
        """The last probe line in ``log``."""
        lines = [line for line in log.splitlines() if line.startswith('{"' + KEY + '"')]
        if not lines:
            raise ProbeOutputError("no probe result in the log")
        try:
            data = json.loads(lines[-1])[KEY]
            return cls._from_dict(data)
        except (ValueError, KeyError, TypeError) as err:
            raise ProbeOutputError(f"unreadable probe result: {err}") from None

    @classmethod
    def _from_dict(cls, data: dict[str, Any]) -> ProbeResult:
        nvml = data["nvml"]
        gpus = tuple(
            ProbeGpu(
                index=_typed(g["index"], int, "gpus.index"),
                name=_typed(g["name"], str, "gpus.name"),
                uuid=_optional(g.get("uuid"), str, "gpus.uuid"),
                minor=_optional(g.get("minor"), int, "gpus.minor"),
            )
            for g in _typed(data.get("gpus", []), list, "gpus")
        )
        return cls(
            nvml=NvmlStart(
                ok=_typed(nvml["ok"], bool, "nvml.ok"),
                code=_optional(nvml.get("code"), int, "nvml.code"),
                advice=_optional(nvml.get("advice"), str, "nvml.advice"),
            ),
            visible_devices=_optional(data.get("visible_devices"), str, "visible_devices"),
            device_nodes=tuple(
                _typed(n, str, "device_nodes") for n in _typed(data["device_nodes"], list, "device_nodes")
            ),
            driver_version=_optional(data.get("driver_version"), str, "driver_version"),
            cuda_driver_version=_optional(data.get("cuda_driver_version"), int, "cuda_driver_version"),
            gpus=gpus,
        )


def _typed(value: Any, kind: type, field: str) -> Any:
    # bool is an int in Python; a number field holding true is still wrong.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{field}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _optional(value: Any, kind: type, field: str) -> Any:
    return None if value is None else _typed(value, kind, field)


def device_nodes(dev: Path = DEV) -> tuple[str, ...]:
    """The /dev/nvidia* character devices (the runtime creates them in the container)."""
    found = []
    for path in sorted(dev.glob("nvidia*")):
        try:
            if stat.S_ISCHR(path.stat().st_mode):
                found.append(str(path))
        except OSError:
            continue
    return tuple(found)


def probe() -> ProbeResult:
    from gfd.backends.errors import BackendError, NvmlFailed
    from gfd.backends.nvml import NvmlBackend

    visible = os.environ.get("NVIDIA_VISIBLE_DEVICES")
    nodes = device_nodes()
    try:
        inventory = NvmlBackend().probe()
    except NvmlFailed as err:
        return ProbeResult(NvmlStart(False, err.code, err.message), visible, nodes)
    except BackendError as err:
        return ProbeResult(NvmlStart(False, None, err.message), visible, nodes)
    except ModuleNotFoundError as err:  # an image without the bindings
        return ProbeResult(NvmlStart(False, None, f"cannot import {err.name}"), visible, nodes)
    gpus = tuple(ProbeGpu(d.index, d.name, d.uuid, d.minor) for d in inventory.devices)
    return ProbeResult(
        NvmlStart(True),
        visible,
        nodes,
        driver_version=inventory.driver_version,
        cuda_driver_version=inventory.cuda_driver_version,
        gpus=gpus,
    )


def main() -> int:
    result = probe()
    print(result.line(), flush=True)
    return 0 if result.nvml.ok and result.gpus else 1


if __name__ == "__main__":
    sys.exit(main())
