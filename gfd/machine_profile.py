"""The machine profile: a YAML description of a simulated node.

It drives the mock backend (label GPU-less test clusters) and the fake NVML
library the tests put under the real bindings. ``load_machine_profile`` turns
any mistake into one ``MachineProfileError`` line naming the file and the field
path. Its parts are specs (``DeviceSpec``, ``MigSpec``, ...): "profile" alone
means the whole machine, never a MIG profile such as ``1g.5gb``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import Meta

from gfd.inventory import Device, Inventory, JetsonFacts, MigDevice, VGpuInfo
from gfd.yamlfile import read_mapping, to_struct


class MachineProfileError(ValueError):
    """A machine profile could not be read; the message is one line with file and field path."""


class _Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pass


Count = Annotated[int, Meta(ge=0)]
Slices = Annotated[int, Meta(ge=1)]


class MigDeviceSpec(_Strict, forbid_unknown_fields=True, frozen=True):
    """One MIG device of a simulated GPU."""

    profile: Annotated[str, Meta(min_length=1)]  # the MIG profile, e.g. "1g.5gb"
    memory_mib: Count
    multiprocessors: Count
    gi_slices: Slices
    ci_slices: Slices
    copy_engines: Count = 0
    decoders: Count = 0
    encoders: Count = 0
    jpegs: Count = 0
    ofas: Count = 0


class MigSpec(_Strict, forbid_unknown_fields=True, frozen=True):
    """A simulated GPU's ``mig:`` section: its MIG mode and, when enabled, its MIG devices."""

    enabled: bool = False
    devices: list[MigDeviceSpec] = []


class VGpuSpec(_Strict, forbid_unknown_fields=True, frozen=True):
    host_driver_version: str | None = None
    host_driver_branch: str | None = None


class DeviceSpec(_Strict, forbid_unknown_fields=True, frozen=True):
    """One simulated full GPU."""

    name: Annotated[str, Meta(min_length=1)]
    uuid: str | None = None
    memory_mib: Count | None = None
    compute_capability: str | None = None  # "8.0"
    pci_class: str | None = None  # "0x030200"
    pci_bus_id: str | None = None
    mig: MigSpec | None = None  # absent: not MIG capable
    clique: str | None = None
    vgpu: VGpuSpec | None = None

    def __post_init__(self) -> None:
        if self.compute_capability is not None:
            major, _, minor = self.compute_capability.partition(".")
            if not (major.isdigit() and minor.isdigit()):
                raise ValueError(
                    f"compute_capability: expected MAJOR.MINOR such as '8.0', got {self.compute_capability!r}"
                )
        if self.pci_class is not None:
            try:
                int(self.pci_class, 16)
            except ValueError:
                raise ValueError(
                    f"pci_class: expected a hex PCI class such as '0x030200', got {self.pci_class!r}"
                ) from None


class JetsonSpec(_Strict, forbid_unknown_fields=True, frozen=True):
    """What a Jetson's tegra files would say (optional; simulates a Jetson without a host root)."""

    model: str | None = None  # "NVIDIA Jetson Orin Nano Developer Kit"
    soc: str | None = None  # "tegra234"
    l4t_version: str | None = None  # "36.4.0"
    jetpack_version: str | None = None  # "6.1"
    power_mode: str | None = None  # "15W"


class MachineProfile(_Strict, forbid_unknown_fields=True, frozen=True):
    machine: str | None = None
    driver_version: str | None = None
    cuda_driver_version: Annotated[int, Meta(ge=1000)] | None = None
    devices: list[DeviceSpec] = []
    jetson: JetsonSpec | None = None

    def to_inventory(self) -> Inventory:
        """The inventory the mock backend reports for this profile."""
        return Inventory(
            backend="mock",
            driver_version=self.driver_version,
            cuda_driver_version=self.cuda_driver_version,
            machine=self.machine,
            devices=tuple(_device(i, d) for i, d in enumerate(self.devices)),
            jetson=JetsonFacts(**msgspec.structs.asdict(self.jetson)) if self.jetson is not None else None,
        )


def _device(index: int, d: DeviceSpec) -> Device:
    cc = None
    if d.compute_capability is not None:
        major, _, minor = d.compute_capability.partition(".")
        cc = (int(major), int(minor))
    mig = d.mig
    return Device(
        index=index,
        name=d.name,
        uuid=d.uuid,
        memory_mib=d.memory_mib,
        compute_capability=cc,
        pci_class=int(d.pci_class, 16) if d.pci_class is not None else None,
        pci_bus_id=d.pci_bus_id,
        mig_capable=mig is not None,
        mig_enabled=bool(mig and mig.enabled),
        mig_devices=tuple(MigDevice(**msgspec.structs.asdict(m)) for m in mig.devices)
        if mig and mig.enabled
        else (),
        clique=d.clique,
        vgpu=VGpuInfo(**msgspec.structs.asdict(d.vgpu)) if d.vgpu is not None else None,
    )


MACHINE_PROFILE_FIELDS = frozenset(MachineProfile.__struct_fields__)
_EXPECTED = "a machine profile (machine, driver_version, devices: [...]; schema in docs/gfd.md)"
# Top-level keys of NVIDIA's device-plugin config file, the YAML most easily passed here by mistake.
CONFIG_FILE_FIELDS = frozenset({"version", "flags", "resources", "sharing", "imex"})


def load_machine_profile(path: str | Path) -> MachineProfile:
    """Read and validate a profile file, or raise MachineProfileError with a one-line reason."""
    path = Path(path)
    data = read_mapping(path, MachineProfileError, "profile")
    try:
        profile = to_struct(path, data, MachineProfile, MachineProfileError)
    except MachineProfileError:
        if {str(key) for key in data} & CONFIG_FILE_FIELDS:
            raise MachineProfileError(
                f"{path}: this is a device-plugin config file (for --config-file), expected {_EXPECTED}"
            ) from None
        raise
    if profile == MachineProfile():
        raise MachineProfileError(f"{path}: the profile is empty, expected {_EXPECTED}")
    return profile
