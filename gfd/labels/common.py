"""What every labeler shares: its signature, the options it reads, and small helpers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from gfd.choices import MigStrategy
from gfd.inventory import Device, Inventory, MigDevice
from gfd.sharing_config import SharingConfig

if TYPE_CHECKING:
    from gfd.config import Settings

Labels = dict[str, str]


@dataclass(frozen=True)
class LabelOptions:
    mig_strategy: MigStrategy = "none"
    sharing: SharingConfig | None = None  # None: no config file, nothing is shared
    timestamp: datetime | None = None  # set: label nvidia.com/gfd.timestamp
    with_vgpu: bool = False

    @classmethod
    def from_settings(cls, settings: Settings, now: datetime) -> LabelOptions:
        """The options ``settings`` ask for, for a labelling pass at ``now``."""
        return cls(
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
Labeler = Callable[[Inventory, LabelOptions], Labels]


def mig_on(device: Device) -> bool:
    """MIG mode is enabled right now (only meaningful on MIG-capable GPUs)."""
    return device.mig_capable and device.mig_enabled


def mig_profile_label(mig: MigDevice) -> str:
    """A MIG profile as resource names and products spell it: ``1g.10gb+me`` -> ``1g.10gb.me``, as NVIDIA."""
    return mig.profile.replace("+", ".")


def flag(value: bool) -> str:
    return "true" if value else "false"
