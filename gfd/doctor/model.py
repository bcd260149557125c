"""The doctor's data, the same in both modes: the layers of the stack, what a check found at one, and the
report lines made of those findings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["PASS", "WARN", "FAIL", "SKIP"]


@dataclass(frozen=True)
class Layer:
    """One layer of the stack as the report numbers and names it; ``purpose`` says what it is for, in a few
    words for someone new to GPUs."""

    number: int
    name: str
    purpose: str


@dataclass(frozen=True)
class Finding:
    """One thing a layer looked at. ``item`` names the part when a layer has several (e.g. "containerd")."""

    status: Status
    evidence: str
    fix: str | None = None
    item: str | None = None


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    layer: int
    name: str
    purpose: str  # what the layer is for, in a few words for someone new to GPUs
    status: Status
    evidence: str
    fix: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "layer": self.layer,
            "name": self.name,
            "purpose": self.purpose,
            "status": self.status,
            "evidence": self.evidence,
            "fix": self.fix,
        }
