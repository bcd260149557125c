"""The tegra backend against fake Jetson host roots (tests/fixtures/jetson/*)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from gfd.backends.errors import BackendError
from gfd.backends.tegra import TegraBackend, is_jetson, jetpack_table
from gfd.backends.tegra_files import parse_cuda_version_txt, parse_l4t_release
from gfd.inventory import JetsonFacts
from gfd.labels import LabelOptions, build_labels

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "jetson"


def copy_fixture(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root, symlinks=True)
    return root


def write(root: Path, rel: str, data: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.write_bytes(data.encode() if isinstance(data, str) else data)


BOARDS = [
    (
        "nano-r32",
        "NVIDIA Jetson Nano",
        3964,
        (5, 3),
        10020,
        JetsonFacts("NVIDIA Jetson Nano Developer Kit", "tegra210", "32.7.1", "4.6.1", "5W"),
    ),
    (
        "xavier-nx-r35",
        "NVIDIA Jetson Xavier NX",
        7583,
        (7, 2),
        11040,
        JetsonFacts("NVIDIA Jetson Xavier NX Developer Kit", "tegra194", "35.4.1", "5.1.2", "MODE_20W_6CORE"),
    ),
    (
        "orin-nano-r36",
        "NVIDIA Jetson Orin Nano",
        7619,
        (8, 7),
        12060,
        JetsonFacts(
            "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit", "tegra234", "36.4.0", "6.1", "15W"
        ),
    ),
    (
        "thor-r38",
        "NVIDIA Jetson AGX Thor",
        124623,
        (11, 0),
        13000,
        JetsonFacts("NVIDIA Jetson AGX Thor Developer Kit", "tegra264", "38.2.0", "7.0", "MAXN"),
    ),
]


@pytest.mark.parametrize(("fixture", "product", "memory", "compute", "cuda", "facts"), BOARDS)
def test_known_boards_give_every_fact_and_no_warning(
    fixture: str, product: str, memory: int, compute: tuple[int, int], cuda: int, facts: JetsonFacts
) -> None:
    inv = TegraBackend(FIXTURES / fixture).probe()

    assert inv.backend == "tegra"
    assert len(inv.devices) == 1
    device = inv.devices[0]
    assert (device.name, device.memory_mib, device.compute_capability) == (product, memory, compute)
    assert device.pci_class is None
    assert inv.cuda_driver_version == cuda
    assert inv.jetson == facts
    assert inv.warnings == ()


def test_container_without_device_tree_falls_back_to_soc0_and_says_how_to_mount_it() -> None:
    with_dt = TegraBackend(FIXTURES / "orin-nano-r36").probe()
    masked = TegraBackend(FIXTURES / "orin-nano-r36-container").probe()

    assert masked.jetson == with_dt.jetson
    assert masked.devices == with_dt.devices
    assert len(masked.warnings) == 1
    assert "proc/device-tree" in masked.warnings[0]
    assert "docs/jetson.md" in masked.warnings[0]


def test_soc0_without_machine_still_knows_the_soc_and_names_the_gpu_after_it(tmp_path: Path) -> None:
    root = copy_fixture("orin-nano-r36-container", tmp_path)
    (root / "sys/devices/soc0/machine").unlink()

    inv = TegraBackend(root).probe()

    assert inv.devices[0].name == "NVIDIA Jetson Orin"
    assert inv.devices[0].compute_capability == (8, 7)
    assert inv.jetson is not None
    assert inv.jetson.model is None
    assert inv.jetson.soc == "tegra234"
    assert any("board model unknown" in w for w in inv.warnings)


def test_unknown_board_and_soc_warn_and_keep_what_is_known() -> None:
    inv = TegraBackend(FIXTURES / "unknown-board").probe()

    device = inv.devices[0]
    assert device.name == "NVIDIA Jetson"
    assert device.compute_capability is None
    assert device.memory_mib == 15690
    assert inv.jetson == JetsonFacts("ACME Rover X1 Carrier", "tegra300", "36.4.0", "6.1", None)
    text = "\n".join(inv.warnings)
    assert "tegra300" in text
    assert "acme,rover-x1" in text
    assert "CUDA" in text
    assert "power mode" in text


def test_vendor_carrier_with_a_known_module_is_named_after_the_module(tmp_path: Path) -> None:
    root = copy_fixture("orin-nano-r36", tmp_path)
    write(root, "proc/device-tree/model", "reComputer J4012\0")
    compatible = "seeed,recomputer-j401+p3767-0000\0nvidia,p3767-0000\0nvidia,tegra234\0"
    write(root, "proc/device-tree/compatible", compatible)

    inv = TegraBackend(root).probe()

    assert inv.devices[0].name == "NVIDIA Jetson Orin NX"
    assert inv.jetson is not None
    assert inv.jetson.model == "reComputer J4012"
    assert inv.warnings == ()


def test_unknown_l4t_release_omits_only_the_jetpack_version() -> None:
    inv = TegraBackend(FIXTURES / "unknown-l4t").probe()

    assert inv.jetson is not None
    assert inv.jetson.l4t_version == "36.9.1"
    assert inv.jetson.jetpack_version is None
    assert inv.jetson.soc == "tegra234"
    assert inv.jetson.power_mode == "15W"
    assert inv.cuda_driver_version == 12060
    assert len(inv.warnings) == 1
    assert "36.9.1" in inv.warnings[0]


@pytest.mark.parametrize(("revision", "l4t", "jetpack"), [("4.0", "38.4.0", "7.1"), ("2.1", "38.2.1", "7.0")])
def test_thor_releases_have_their_jetpack(tmp_path: Path, revision: str, l4t: str, jetpack: str) -> None:
    root = copy_fixture("thor-r38", tmp_path)
    release = (root / "etc/nv_tegra_release").read_text().replace("REVISION: 2.0", f"REVISION: {revision}")
    write(root, "etc/nv_tegra_release", release)
    labels = build_labels(TegraBackend(root).probe(), LabelOptions()).labels
    assert (labels["nvidia.com/jetson.l4t-version"], labels["nvidia.com/jetson.jetpack-version"]) == (
        l4t,
        jetpack,
    )


@pytest.mark.parametrize(
    ("fixture", "release", "l4t", "jetpack"),
    [
        ("orin-nano-r36", "# R39 (release), REVISION: 2.0", "39.2.0", "7.2"),  # JetPack 7.2 runs on Orin too
        ("thor-r38", "# R39 (release), REVISION: 2.1", "39.2.1", "7.2.1"),
        ("orin-nano-r36", "# R39 (release), REVISION: 2.1", "39.2.1", "7.2.1"),
        ("thor-r38", "# R39 (release), REVISION: 2.0", "39.2.0", "7.2"),
    ],
)
def test_jetpack_7_2_trees_have_their_jetpack(
    tmp_path: Path, fixture: str, release: str, l4t: str, jetpack: str
) -> None:
    root = copy_fixture(fixture, tmp_path)
    text = (root / "etc/nv_tegra_release").read_text()
    write(root, "etc/nv_tegra_release", re.sub(r"^# R\d+ \(release\), REVISION: [\d.]+", release, text))
    inv = TegraBackend(root).probe()
    labels = build_labels(inv, LabelOptions()).labels
    assert (labels["nvidia.com/jetson.l4t-version"], labels["nvidia.com/jetson.jetpack-version"]) == (
        l4t,
        jetpack,
    )
    assert not [w for w in inv.warnings if "L4T" in w]


def test_a_release_newer_than_the_table_keeps_its_l4t_label_and_says_so_in_one_line(tmp_path: Path) -> None:
    root = copy_fixture("thor-r38", tmp_path)
    release = (
        (root / "etc/nv_tegra_release")
        .read_text()
        .replace("# R38 (release), REVISION: 2.0", "# R40 (release), REVISION: 1.0")
    )
    write(root, "etc/nv_tegra_release", release)
    inv = TegraBackend(root).probe()
    labels = build_labels(inv, LabelOptions()).labels
    assert labels["nvidia.com/jetson.l4t-version"] == "40.1.0"
    assert "nvidia.com/jetson.jetpack-version" not in labels  # never a guessed JetPack
    (note,) = [w for w in inv.warnings if "40.1.0" in w]
    assert "\n" not in note and "JetPack version unknown" in note
    assert "known up to L4T 39.2.1" in note and "a newer gpu-labeller may know it" in note


def test_unreadable_files_are_warnings_not_failures(tmp_path: Path) -> None:
    root = copy_fixture("orin-nano-r36", tmp_path)
    (root / "proc/meminfo").unlink()
    (root / "proc/meminfo").mkdir()  # reading a directory fails like an unreadable file
    (root / "etc/nvpmodel.conf").unlink()
    os.symlink("nvpmodel.conf", root / "etc/nvpmodel.conf")  # a link loop
    write(root, "etc/nv_tegra_release", "garbage\n")

    inv = TegraBackend(root).probe()

    assert inv.devices[0].memory_mib is None
    assert inv.devices[0].compute_capability == (8, 7)
    assert inv.jetson == JetsonFacts(
        "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit", "tegra234", None, None, None
    )
    text = "\n".join(inv.warnings)
    for needle in ("proc/meminfo", "etc/nvpmodel.conf", "etc/nv_tegra_release"):
        assert needle in text


def test_absolute_links_never_leave_the_host_root(tmp_path: Path) -> None:
    root = copy_fixture("orin-nano-r36", tmp_path)
    (root / "proc/meminfo").unlink()
    os.symlink("/proc/meminfo", root / "proc/meminfo")  # re-rooted, this points at itself
    (root / "opt").mkdir()
    (root / "usr/local/cuda-12.6").rename(root / "opt/toolkit")  # out of reach of the cuda-* fallback
    (root / "etc/alternatives/cuda").unlink()
    os.symlink("../../../../../../../../../opt/toolkit", root / "etc/alternatives/cuda")

    inv = TegraBackend(root).probe()

    assert inv.devices[0].memory_mib is None  # not this test machine's RAM
    assert inv.cuda_driver_version == 12060  # ".." stops at the host root, as it does at "/"


def test_power_mode_defaults_when_nvpmodel_has_no_status(tmp_path: Path) -> None:
    root = copy_fixture("xavier-nx-r35", tmp_path)
    (root / "var/lib/nvpmodel/status").unlink()

    facts = TegraBackend(root).probe().jetson

    assert facts is not None and facts.power_mode == "MODE_20W_6CORE"


def test_power_mode_id_missing_from_conf_is_a_warning(tmp_path: Path) -> None:
    root = copy_fixture("nano-r32", tmp_path)
    write(root, "var/lib/nvpmodel/status", "pmode:0007\n")

    inv = TegraBackend(root).probe()

    assert inv.jetson is not None
    assert inv.jetson.power_mode is None
    assert any("power mode 7" in w for w in inv.warnings)


def test_version_json_is_preferred_to_version_txt(tmp_path: Path) -> None:
    root = copy_fixture("nano-r32", tmp_path)
    write(root, "usr/local/cuda-10.2/version.json", '{"cuda": {"name": "CUDA SDK", "version": "10.2.460"}}')
    write(root, "usr/local/cuda-10.2/version.txt", "CUDA Version 9.0.252\n")

    assert TegraBackend(root).probe().cuda_driver_version == 10020


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_every_fixture_is_a_jetson(fixture: str) -> None:
    assert is_jetson(FIXTURES / fixture)


def test_a_plain_host_is_not_a_jetson_and_probe_says_so_in_one_line(tmp_path: Path) -> None:
    write(tmp_path, "proc/meminfo", "MemTotal: 65536000 kB\n")

    assert not is_jetson(tmp_path)
    with pytest.raises(BackendError) as err:
        TegraBackend(tmp_path).probe()
    assert err.value.layer == "tegra"
    assert "\n" not in str(err.value)
    assert str(tmp_path) in str(err.value)


@pytest.mark.parametrize(
    ("rel", "data"),
    [
        ("proc/device-tree/compatible", "nvidia,p3880-0010+p3809-0000\0nvidia,tegra241\0"),
        ("sys/devices/soc0/family", "Tegra\n"),
    ],
)
def test_grace_is_not_mistaken_for_a_jetson(tmp_path: Path, rel: str, data: str) -> None:
    write(tmp_path, rel, data)
    write(tmp_path, "sys/devices/soc0/soc_id", "36\n")  # 0x24, Tegra241 (Grace)

    assert not is_jetson(tmp_path)


@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64", "32.7.1"),
        ("# R32 (release), REVISION: 5.0, GCID: 25531747, BOARD: t186ref, EABI: aarch64", "32.5.0"),
        ("# R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic, EABI: aarch64", "36.4.0"),
        ("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64", "36.4.3"),
        ("# R38 (release), REVISION: 2.1, GCID: 42061081, BOARD: generic, EABI: aarch64", "38.2.1"),
        ("not a release line", None),
    ],
)
def test_nv_tegra_release_line(line: str, version: str | None) -> None:
    assert parse_l4t_release(line) == version


def test_cuda_10_version_txt() -> None:
    assert parse_cuda_version_txt("CUDA Version 10.2.300\n") == 10020


def test_jetpack_table_holds_exact_releases_of_every_supported_line() -> None:
    table = jetpack_table()

    assert all(re.fullmatch(r"\d+\.\d+\.\d+", key) for key in table)
    assert {key.split(".")[0] for key in table} >= {"32", "35", "36", "38"}
    expected = {
        "32.7.1": "4.6.1",
        "32.7.6": "4.6.6",
        "35.1.0": "5.0.2",
        "35.2.1": "5.1",
        "35.4.1": "5.1.2",
        "35.6.1": "5.1.5",
        "36.3.0": "6.0",
        "36.4.0": "6.1",
        "36.4.3": "6.2",
        "36.4.4": "6.2.1",
        "38.2.0": "7.0",
        "38.4.0": "7.1",
        "39.2.0": "7.2",
        "39.2.1": "7.2.1",
    }
    assert {key: table[key] for key in expected} == expected


def test_board_model_is_the_machine_type_since_a_jetson_has_no_dmi_name() -> None:
    inv = TegraBackend(FIXTURES / "orin-nano-r36").probe()
    assert inv.jetson is not None and inv.jetson.model
    assert inv.machine == inv.jetson.model


def test_thors_openrm_driver_version_gives_nvidias_driver_labels(tmp_path: Path) -> None:
    from gfd.labels import LabelOptions, build_labels

    root = copy_fixture("thor-r38", tmp_path)
    write(
        root,
        "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.00  Release Build  "
        "(buildbrain@builder)  Mon Aug  4 07:58:35 PDT 2025\nGCC version:  gcc version 13.3.0\n",
    )
    inv = TegraBackend(root).probe()
    assert inv.driver_version == "580.00"
    labels = build_labels(inv, LabelOptions()).labels
    assert labels["nvidia.com/cuda.driver.major"] == labels["nvidia.com/cuda.driver-version.major"] == "580"
    assert labels["nvidia.com/cuda.driver.minor"] == "00"
    assert labels["nvidia.com/cuda.driver.rev"] == labels["nvidia.com/cuda.driver-version.revision"] == ""
    assert labels["nvidia.com/cuda.driver-version.full"] == "580.00"


@pytest.mark.parametrize("fixture", ["nano-r32", "xavier-nx-r35", "orin-nano-r36"])
def test_nvgpu_boards_have_no_driver_version_to_read(fixture: str) -> None:
    # Their nvgpu driver writes no version file (docs/labels.md says so): no driver labels, no guess.
    from gfd.labels import LabelOptions, build_labels

    inv = TegraBackend(FIXTURES / fixture).probe()
    assert inv.driver_version is None
    assert not [k for k in build_labels(inv, LabelOptions()).labels if k.startswith("nvidia.com/cuda.driver")]
