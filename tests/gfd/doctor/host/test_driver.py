"""Layer 2 (gfd/doctor/host/driver.py): the kernel driver, loaded and which version."""

from __future__ import annotations

from gfd.doctor.host import driver
from tests.gfd.doctor.host.reports import host_tree, layer

OPEN_MODULE = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:42:42 UTC 2024\nGCC version:  gcc version 12.3.0\n"
)


def test_no_driver_fails_at_layer_2_and_skips_the_rest(host, nvml, doctor):
    nvml(None, library_missing=True)
    code, report = doctor(host("no-driver"))
    assert code == 1
    assert report["first_failed_layer"] == 2
    two = layer(report, 2)[0]
    assert two["status"] == "FAIL" and "not loaded" in two["evidence"] and "modprobe nvidia" in two["fix"]
    for n in (3, 4, 5, 6):
        assert [c["status"] for c in layer(report, n)] == ["SKIP"]
        assert layer(report, n)[0]["evidence"] == "fix layer 2 first"


def test_no_driver_with_nouveau_loaded_names_nouveau(host, nvml, doctor):
    nvml(None, library_missing=True)
    root = host("no-driver")
    (root / "sys/module/nouveau").mkdir(parents=True)
    (root / "sys/module/nouveau/initstate").write_text("live\n")
    _, report = doctor(root)
    two = layer(report, 2)[0]
    assert "nouveau" in two["evidence"] and "blacklist" in two["fix"]


def test_open_module_shown_and_missing_uvm_warns(tmp_path):
    ctx = host_tree(
        tmp_path,
        {"proc/driver/nvidia/version": OPEN_MODULE, "proc/modules": "nvidia 1 0 - Live 0x0 (POE)\n"},
    )
    found = driver.check(ctx)
    assert found[0].status == "PASS" and "560.35.03 (open kernel module)" in found[0].evidence
    assert found[1].status == "WARN" and "nvidia_uvm" in found[1].evidence
    assert ctx.kernel_version == "560.35.03"
