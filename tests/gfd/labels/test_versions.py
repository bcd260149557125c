"""Driver and CUDA version labels."""

from __future__ import annotations

from gfd.inventory import Device, Inventory
from gfd.labels import LabelOptions, build_labels

GPU = (Device(index=0, name="Tesla T4", memory_mib=15360, compute_capability=(7, 5)),)


def labels(**kwargs: object) -> dict[str, str]:
    return build_labels(Inventory(backend="nvml", devices=GPU, **kwargs), LabelOptions()).labels  # type: ignore[arg-type]


def test_driver_version_in_old_and_new_keys() -> None:
    got = labels(driver_version="550.54.15")
    assert got["nvidia.com/cuda.driver.major"] == got["nvidia.com/cuda.driver-version.major"] == "550"
    assert got["nvidia.com/cuda.driver.minor"] == got["nvidia.com/cuda.driver-version.minor"] == "54"
    assert got["nvidia.com/cuda.driver.rev"] == got["nvidia.com/cuda.driver-version.revision"] == "15"
    assert got["nvidia.com/cuda.driver-version.full"] == "550.54.15"


def test_two_part_driver_version_has_an_empty_revision() -> None:
    got = labels(driver_version="470.57")
    assert got["nvidia.com/cuda.driver.rev"] == ""
    assert got["nvidia.com/cuda.driver-version.full"] == "470.57"


def test_malformed_driver_version_gives_no_driver_labels_and_a_warning() -> None:
    got = build_labels(Inventory(backend="nvml", devices=GPU, driver_version="550"), LabelOptions())
    assert not any(k.startswith("nvidia.com/cuda.driver") for k in got.labels)
    assert got.warnings == ("driver version '550' is not MAJOR.MINOR[.REV]; no driver version labels",)


def test_cuda_version_from_nvml_integer() -> None:
    got = labels(cuda_driver_version=12040)
    assert got["nvidia.com/cuda.runtime.major"] == got["nvidia.com/cuda.runtime-version.major"] == "12"
    assert got["nvidia.com/cuda.runtime.minor"] == got["nvidia.com/cuda.runtime-version.minor"] == "4"
    assert got["nvidia.com/cuda.runtime-version.full"] == "12.4"
    assert got["nvidia.com/cuda.runtime-version.code"] == "12040"


def test_cuda_code_orders_like_versions() -> None:
    # One Gt comparison must say "CUDA >= 12.4": 12.10 is newer than 12.4, and 11.8 older.
    code = {
        v: int(labels(cuda_driver_version=v)["nvidia.com/cuda.runtime-version.code"])
        for v in (11080, 12040, 12100)
    }
    assert code[11080] < 12039 < code[12040] < code[12100]
    assert labels(cuda_driver_version=12100)["nvidia.com/cuda.runtime-version.full"] == "12.10"


def test_unknown_versions_give_no_version_labels() -> None:
    assert not any(k.startswith("nvidia.com/cuda.") for k in labels())
