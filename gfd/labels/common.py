"""Small helpers shared by the labelers."""

from __future__ import annotations

from gfd.inventory import Device, MigDevice

Labels = dict[str, str]


def mig_on(device: Device) -> bool:
    """MIG mode is enabled right now (only meaningful on MIG-capable GPUs)."""
    return device.mig_capable and device.mig_enabled


def profile_name(mig: MigDevice) -> str:
    """The resource form of a MIG profile: ``1g.10gb+me`` -> ``1g.10gb.me``, as NVIDIA names it."""
    return mig.profile.replace("+", ".")


def flag(value: bool) -> str:
    return "true" if value else "false"
