"""What every labeler shares: its signature, the options it reads, what it returns, and small helpers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from gfd.choices import LabelSetName, MigStrategy
from gfd.inventory import Device, Inventory, MigDevice
from gfd.sharing_config import SharingConfig

if TYPE_CHECKING:
    from gfd.settings import Settings

Labels = dict[str, str]


@dataclass(frozen=True)
class LabelSet:
    """Labels and what was found to say about the node while making them (why a label is missing or
    INVALID): returned, not logged, so the daemon can say each warning once while it repeats pass after pass,
    as it does the backends' ``Inventory.warnings``."""

    labels: Labels = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def __or__(self, other: LabelSet | Labels) -> LabelSet:
        """Both together; ``other``'s labels override these, as later labelers override earlier ones."""
        if isinstance(other, LabelSet):
            return LabelSet(self.labels | other.labels, self.warnings + other.warnings)
        return LabelSet(self.labels | other, self.warnings)


@dataclass(frozen=True)
class LabelOptions:
    label_set: LabelSetName = "device-plugin"
    mig_strategy: MigStrategy = "none"
    sharing: SharingConfig | None = None  # None: no config file, nothing is shared
    timestamp: datetime | None = None  # set: label nvidia.com/gfd.timestamp
    with_vgpu: bool = False

    @classmethod
    def from_settings(cls, settings: Settings, now: datetime) -> LabelOptions:
        """The options ``settings`` ask for, for a labelling pass at ``now``."""
        return cls(
            label_set=settings.label_set,
            mig_strategy=settings.mig_strategy,
            sharing=settings.sharing,
            timestamp=now if settings.label_timestamp else None,
            with_vgpu=settings.with_vgpu,
        )

    @property
    def sharing_or_default(self) -> SharingConfig:
        """The sharing settings to label by; without a config file: replicas 1, strategy none."""
        return self.sharing if self.sharing is not None else SharingConfig()


# One label family: it decides itself whether it applies (to a node without GPUs, to the options).
# A labeler with something to say about the node returns a LabelSet; the others return plain labels.
Labeler = Callable[[Inventory, LabelOptions], Labels | LabelSet]


def mig_on(device: Device) -> bool:
    """MIG mode is enabled right now (only meaningful on MIG-capable GPUs)."""
    return device.mig_capable and device.mig_enabled


def mig_profile_label(mig: MigDevice) -> str:
    """A MIG profile as resource names and products spell it: ``1g.10gb+me`` -> ``1g.10gb.me``, as NVIDIA."""
    return mig.profile.replace("+", ".")


def flag(value: bool) -> str:
    return "true" if value else "false"
