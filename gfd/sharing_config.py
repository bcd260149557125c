"""The GPU sharing settings of an NVIDIA device-plugin config file (its ``sharing`` section), as plain data.

``gfd.plugin_config`` parses the file into these; the labelers read them. The
class lives apart from the parser so the labelling core needs no parsing library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SharingStrategy = Literal["none", "time-slicing", "mps"]
FULL_GPU_RESOURCE = "nvidia.com/gpu"
SHARED_RENAME_SUFFIX = ".shared"


@dataclass(frozen=True)
class ReplicatedResource:
    """One ``sharing.<strategy>.resources[]`` entry."""

    name: str  # fully qualified, e.g. "nvidia.com/gpu" or "nvidia.com/mig-1g.5gb"
    replicas: int


@dataclass(frozen=True)
class ReplicatedResources:
    """``sharing.timeSlicing`` or ``sharing.mps``."""

    resources: tuple[ReplicatedResource, ...] = ()
    rename_by_default: bool = False

    def is_replicated(self) -> bool:
        return any(r.replicas > 1 for r in self.resources)

    def find(self, resource: str) -> ReplicatedResource | None:
        return next((r for r in self.resources if r.name == resource), None)

    def is_renamed(self, resource: str) -> bool:
        # NVIDIA GFD disables custom renames: a shared resource is renamed to
        # "<name>.shared" exactly when renameByDefault is set, whatever `rename` says.
        return self.rename_by_default and self.find(resource) is not None


@dataclass(frozen=True)
class SharingConfig:
    """The ``sharing`` section. Both parts absent means no sharing."""

    time_slicing: ReplicatedResources | None = None
    mps: ReplicatedResources | None = None

    def strategy(self) -> SharingStrategy:
        """The node-wide strategy, with NVIDIA's precedence: MPS over time-slicing."""
        if self.mps is not None and self.mps.is_replicated():
            return "mps"
        if self.time_slicing is not None and self.time_slicing.is_replicated():
            return "time-slicing"
        return "none"

    def active(self) -> ReplicatedResources | None:
        """The resource list that applies: MPS whenever an MPS section exists."""
        return self.mps if self.mps is not None else self.time_slicing
