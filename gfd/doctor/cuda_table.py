"""The CUDA -> minimum driver table (gfd/data/cuda_drivers.yaml) and the verdict for one image."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import yaml

CudaVersion = tuple[int, int]
DriverVersion = tuple[int, ...]

_DRIVER_RE = re.compile(r"^\d+(\.\d+){0,2}$")


def parse_driver(text: str) -> DriverVersion:
    """'525.60.13' -> (525, 60, 13). Raises ValueError for anything else."""
    text = text.strip()
    if not _DRIVER_RE.fullmatch(text):
        raise ValueError(f"not a driver version: {text!r}")
    return tuple(int(p) for p in text.split("."))


def parse_cuda(text: str) -> CudaVersion:
    """'12.4' -> (12, 4). Raises ValueError for anything else."""
    m = re.fullmatch(r"(\d+)\.(\d+)", text.strip())
    if not m:
        raise ValueError(f"expected a CUDA version like 12.4, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def show_cuda(v: CudaVersion) -> str:
    return f"{v[0]}.{v[1]}"


@dataclass(frozen=True)
class CudaTable:
    toolkit_driver: dict[CudaVersion, str]  # CUDA X.Y -> driver for the full feature set
    minor_compat: dict[int, str]  # CUDA major -> minimum driver for minor-version compatibility
    known_up_to: CudaVersion = (13, 5)  # the newest release the table knows (some without a toolkit driver)
    checked: str = ""  # when the table was last checked against NVIDIA's release notes (YYYY-MM-DD)

    def knows(self, cuda: CudaVersion) -> bool:
        """Whether ``cuda`` is a release this table was written after, rather than one newer than it."""
        return cuda <= self.known_up_to

    @property
    def newest_driver(self) -> DriverVersion:
        return max(parse_driver(need) for need in self.toolkit_driver.values())

    def unknown_note(self, what: str) -> str:
        """One line saying ``what`` is newer than this table, and where to look."""
        return (
            f"{what} is newer than gfd's CUDA table (known up to CUDA {show_cuda(self.known_up_to)}, checked "
            f"{self.checked}); a newer gpu-labeller may know it"
        )

    def highest_supported(self, driver: str) -> CudaVersion | None:
        """The newest CUDA release whose full feature set this driver supports (by the table)."""
        d = parse_driver(driver)
        ok = [v for v, need in self.toolkit_driver.items() if d >= parse_driver(need)]
        return max(ok) if ok else None


Kind = Literal["full", "minor-compat", "too-old", "unknown"]


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    needed: str | None  # the toolkit driver the release wants, when known
    compat_min: str | None  # the minor-compatibility floor of its major, when known


def verdict(table: CudaTable, driver: str, cuda: CudaVersion, reported: CudaVersion | None = None) -> Verdict:
    """Will an image built with CUDA ``cuda`` run on ``driver``?

    ``reported`` is the CUDA version the driver itself says it supports (NVML); it wins over the table for
    releases newer than the table knows.
    """
    d = parse_driver(driver)
    needed = table.toolkit_driver.get(cuda)
    compat = table.minor_compat.get(cuda[0])
    if (needed is not None and d >= parse_driver(needed)) or (reported is not None and reported >= cuda):
        return Verdict("full", needed, compat)
    if compat is not None and d >= parse_driver(compat):
        return Verdict("minor-compat", needed, compat)
    if needed is None and compat is None:
        return Verdict("unknown", None, None)
    return Verdict("too-old", needed, compat)


@cache
def load_table() -> CudaTable:
    text = resources.files("gfd").joinpath("data/cuda_drivers.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    releases = {parse_cuda(k): str(v) for k, v in data["releases"].items()}
    compat = {int(k): str(v["min_driver"]) for k, v in data["minor_compatibility"].items()}
    for need in [*releases.values(), *compat.values()]:
        parse_driver(need)  # a typo in the data file fails loudly in the tests
    return CudaTable(releases, compat, parse_cuda(str(data["known_up_to"])), str(data["checked"]))


def releases_without_toolkit_driver() -> list[CudaVersion]:
    """The known releases whose toolkit driver is not in the table (see the data file)."""
    text = resources.files("gfd").joinpath("data/cuda_drivers.yaml").read_text(encoding="utf-8")
    return [parse_cuda(str(v)) for v in yaml.safe_load(text)["without_toolkit_driver"]]
