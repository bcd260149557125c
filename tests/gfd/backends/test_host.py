"""The host files every backend and the doctor read: the kernel module's version, the PCI bus, the machine
type."""

from __future__ import annotations

from pathlib import Path

from gfd.backends.host import (
    KERNEL_MODULE_SYSFS_VERSION,
    KERNEL_MODULE_VERSION,
    PciBus,
    kernel_module_version,
    read_machine_type,
    scan_pci,
    with_machine_type,
)
from gfd.inventory import Inventory

PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02  Thu May  2 14:37:44 UTC 2024\n"


def write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_kernel_module_version_from_proc(tmp_path: Path) -> None:
    write(tmp_path, KERNEL_MODULE_VERSION, PROPRIETARY)
    write(tmp_path, KERNEL_MODULE_SYSFS_VERSION, "999.1.1\n")  # /proc wins where both are readable
    assert kernel_module_version(tmp_path) == "470.256.02"


def test_kernel_module_version_falls_back_to_sysfs(tmp_path: Path) -> None:
    # a container may see /sys/module but not the driver's /proc entry
    write(tmp_path, KERNEL_MODULE_SYSFS_VERSION, "550.54.15\n")
    assert kernel_module_version(tmp_path) == "550.54.15"
    write(tmp_path, KERNEL_MODULE_VERSION, "no version line here\n")
    assert kernel_module_version(tmp_path) == "550.54.15"


def test_no_kernel_module(tmp_path: Path) -> None:
    assert kernel_module_version(tmp_path) is None
    write(tmp_path, KERNEL_MODULE_SYSFS_VERSION, "\n")
    assert kernel_module_version(tmp_path) is None


def test_scan_pci_counts_vga_and_3d_controllers_not_audio(tmp_path: Path) -> None:
    for addr, cls in [
        ("0000:01:00.0", "0x030000"),
        ("0000:01:00.1", "0x040300"),
        ("0000:02:00.0", "0x030200"),
    ]:
        write(tmp_path, f"sys/bus/pci/devices/{addr}/vendor", "0x10de\n")
        write(tmp_path, f"sys/bus/pci/devices/{addr}/class", cls + "\n")
        write(tmp_path, f"sys/bus/pci/devices/{addr}/device", "0x2684\n")
    write(tmp_path, "sys/bus/pci/devices/0000:03:00.0/vendor", "0x8086\n")  # not NVIDIA's
    gpus, others = scan_pci(tmp_path)
    assert [(g.address, g.kind, g.device_id) for g in gpus] == [
        ("0000:01:00.0", "VGA controller", 0x2684),
        ("0000:02:00.0", "3D controller", 0x2684),
    ]
    assert others == [0x040300]


def _function(directory: Path, cls: str, driver: str | None = None) -> None:
    directory.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("class", cls), ("device", "0x20b0")):
        (directory / name).write_text(value + "\n")
    if driver is not None:
        (directory / "driver").symlink_to(f"../../../bus/pci/drivers/{driver}")


def test_a_daemon_scanning_the_bus_every_pass_sees_bindings_change_and_functions_come_and_go(
    tmp_path: Path,
) -> None:
    devices = tmp_path / "sys/bus/pci/devices"
    _function(devices / "0000:07:00.0", "0x030200", "nvidia")
    bus = PciBus(tmp_path)
    assert [(g.address, g.driver) for g in bus.scan()[0]] == [("0000:07:00.0", "nvidia")]
    (devices / "0000:07:00.0/driver").unlink()  # the driver let go of it
    assert [g.driver for g in bus.scan()[0]] == [None]
    _function(devices / "0000:0f:00.0", "0x030200", "vfio-pci")  # hot-added, given to a VM
    assert [(g.address, g.driver) for g in bus.scan()[0]] == [
        ("0000:07:00.0", None),
        ("0000:0f:00.0", "vfio-pci"),
    ]
    # Removed and added again at the same address as another function: a new entry, its IDs read anew.
    _function(tmp_path / "readded", "0x040300")
    for name in ("vendor", "class", "device"):
        (devices / "0000:07:00.0" / name).unlink()
    (devices / "0000:07:00.0").rmdir()
    (tmp_path / "readded").rename(devices / "0000:07:00.0")
    gpus, others = bus.scan()
    assert [g.address for g in gpus] == ["0000:0f:00.0"] and others == [0x040300]
    (devices / "0000:0f:00.0/driver").unlink()
    for name in ("vendor", "class", "device"):
        (devices / "0000:0f:00.0" / name).unlink()
    (devices / "0000:0f:00.0").rmdir()  # hot-removed
    assert bus.scan() == ([], [0x040300])


def test_an_empty_machine_type_file_gives_an_empty_value(tmp_path: Path) -> None:
    empty = tmp_path / "product_name"
    empty.write_text("\n")
    assert read_machine_type(empty) == ""
    assert read_machine_type(tmp_path / "absent") is None


def test_the_machine_type_fills_only_what_the_backend_left_open(tmp_path: Path) -> None:
    write(tmp_path, "product_name", "PowerEdge R750\n")
    assert with_machine_type(Inventory(backend="nvml"), tmp_path / "product_name").machine == "PowerEdge R750"
    jetson = Inventory(backend="tegra", machine="NVIDIA Jetson Orin Nano Developer Kit")
    assert with_machine_type(jetson, tmp_path / "product_name") is jetson
    assert with_machine_type(Inventory(backend="nvml"), tmp_path / "absent").machine is None
