"""The pure decoders behind the backends and the doctor: MIG names, PCI ids and config space, versions."""

from __future__ import annotations

import pytest

from gfd.backends import decoding
from gfd.inventory import VGpuInfo
from tests.fakes.fake_nvml import plain_config_space, vgpu_config_space

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("total_mib", "mig_mib", "gb"),
    [
        (40960, 4864, 5),  # A100-SXM4-40GB 1g.5gb
        (40960, 9984, 10),  # A100 2g.10gb
        (40960, 20096, 20),  # A100 3g.20gb / 4g.20gb
        (40960, 40320, 40),  # A100 7g.40gb
        (81920, 9728, 10),  # A100 80GB 1g.10gb
        (81559, 9856, 10),  # H100 80GB 1g.10gb
        (81559, 19968, 20),  # H100 1g.20gb
        (81559, 40192, 40),  # H100 3g.40gb
    ],
)
def test_mig_memory_gb(total_mib: int, mig_mib: int, gb: int) -> None:
    assert decoding.mig_memory_gb(total_mib * MIB, mig_mib) == gb


@pytest.mark.parametrize(
    ("gi", "ci", "mig_mib", "name"),
    [
        (0x0, 0x0, 4864, "1g.5gb"),
        (0x7, 0x0, 4864, "1g.5gb+me"),
        (0x2, 0x0, 20096, "1c.3g.20gb"),
        (0x2, 0x2, 20096, "3g.20gb"),
        (0xD, 0x0, 4864, "1g.5gb-me"),
        (0xF, 0x0, 4864, "1g.5gb+me.all"),
        (0xB, 0x1, 9984, "2g.10gb+gfx"),
        (0x4, 0x4, 40320, "7g.40gb"),
    ],
)
def test_mig_profile_name(gi: int, ci: int, mig_mib: int, name: str) -> None:
    assert decoding.mig_profile_name(gi, ci, 40960 * MIB, mig_mib) == name


def test_unknown_profile_id_is_refused() -> None:
    with pytest.raises(ValueError, match="profile id 99"):
        decoding.mig_profile_name(99, 0, 40960 * MIB, 4864)


def test_profile_name_from_nvml() -> None:
    assert decoding.profile_name_from_nvml("MIG 1g.10gb+me") == "1g.10gb+me"
    assert decoding.profile_name_from_nvml("  ") is None


def test_sysfs_bus_id() -> None:
    assert decoding.sysfs_bus_id("00000000:1B:00.0") == "0000:1b:00.0"
    assert decoding.sysfs_bus_id("00000001:C1:00.1") == "0001:c1:00.1"
    assert decoding.sysfs_bus_id("not a bus id") is None


def test_clique_id() -> None:
    raw = bytes.fromhex("7f3e5c1a2b4d4e6f8a9b0c1d2e3f4a5b")
    assert decoding.clique_id(raw, 32766) == "7f3e5c1a-2b4d-4e6f-8a9b-0c1d2e3f4a5b.32766"
    assert decoding.clique_id(bytes(16), 5) is None  # fabric without a cluster


@pytest.mark.parametrize(
    ("text", "version", "open_module"),
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n",
            "535.183.01",
            False,
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:42:42 UTC 2024\nGCC version:  gcc version 12.3.0\n",
            "560.35.03",
            True,
        ),
        (
            "NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.90.07  Fri May 31 09:30:46 UTC 2024\n",
            "550.90.07",
            False,
        ),
        ("garbage", None, False),
    ],
)
def test_nvrm_version(text: str, version: str | None, open_module: bool) -> None:
    assert decoding.nvrm_version(text) == version
    assert decoding.is_open_kernel_module(text) is open_module


def test_library_version_from_maps() -> None:
    maps = "7f0-7f1 r-xp 0 08:01 9 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15\n"
    assert decoding.library_version_from_maps(maps) == "550.54.15"
    assert decoding.library_version_from_maps("7f0-7f1 r-xp 0 08:01 9 /usr/lib/libc.so.6\n") is None


def test_vgpu_config_space() -> None:
    assert decoding.vgpu_info(vgpu_config_space("550.54.16", "r550_40")) == VGpuInfo("550.54.16", "r550_40")
    assert decoding.vgpu_info(plain_config_space()) is None  # a passthrough or bare-metal GPU


def test_vgpu_needs_the_whole_config_space() -> None:
    with pytest.raises(decoding.ConfigSpaceTooShort):
        decoding.vgpu_info(vgpu_config_space("550.54.16", "r550_40")[:64])


def test_vgpu_capability_loop_does_not_hang() -> None:
    config = bytearray(plain_config_space())
    config[6] |= 0x10
    config[0x34] = 0x40
    config[0x40:0x43] = bytes([0x05, 0x40, 0x10])  # an MSI capability pointing at itself
    assert decoding.vgpu_info(bytes(config)) is None


def test_pci_class() -> None:
    assert decoding.parse_hex("0x030200\n") == 0x030200
    assert decoding.parse_hex("") is None
