"""A GPU that fails under the NVML backend: left out of the labels, reported with its address, error and
layer; one on the PCI bus that NVML does not report; one a fatal Xid marked; and each answering again."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pynvml
import pytest

from gfd.backends.errors import BackendError
from gfd.backends.gpu_health import APPLICATION_XIDS, NOT_IN_NVML
from gfd.backends.nvml import NvmlBackend
from gfd.inventory import GpuFailure, Health, Inventory
from gfd.labels import LabelOptions, build_labels, health
from gfd.machine_profile import MachineProfile, load_machine_profile
from tests.fakes.fake_nvml import FakeNvml, install_fake_nvml
from tests.fakes.nvml_faults import HANG, LOST, READ_DEADLINE_S, UNKNOWN, GpuFault, failing
from tests.fakes.nvml_wire import ERROR_GPU_IS_LOST, ERROR_UNKNOWN

ROOT = Path(__file__).resolve().parents[3]
MP = pytest.MonkeyPatch
GPU3 = "0000:37:00.0"  # where profiles/dgx-a100-mig.yaml puts GPU 3
THREAD_END_S = 30.0  # ample for the event thread's last wait (1 s) to end on a loaded machine


def dgx() -> MachineProfile:
    return load_machine_profile(ROOT / "profiles" / "dgx-a100-mig.yaml")


def machine(
    monkeypatch: MP, tmp_path: Path, profile: MachineProfile | None = None
) -> tuple[FakeNvml, NvmlBackend]:
    fake = install_fake_nvml(monkeypatch, profile or dgx())
    fake.write_host_root(tmp_path)
    return fake, NvmlBackend(host_root=tmp_path, gpu_timeout=READ_DEADLINE_S)


def failures(inv: Inventory) -> list[tuple[int | None, str | None, str, str]]:
    assert inv.health is not None
    return [(f.index, f.pci_bus_id, f.error, f.layer) for f in inv.health.failures]


WAYS: dict[str, tuple[GpuFault, str, str, str | None]] = {
    # fault: error name, layer, what was being read
    "lost": (LOST, "NVML_ERROR_GPU_IS_LOST", "hardware", "device handle"),
    "unknown error": (UNKNOWN, "NVML_ERROR_UNKNOWN", "driver", "device handle"),
    "a failing query": (
        failing("nvmlDeviceGetCudaComputeCapability"),
        "NVML_ERROR_RESET_REQUIRED",
        "hardware",
        "compute capability",
    ),
    "a hang": (HANG, "NVML_ERROR_TIMEOUT", "hardware", None),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_a_failing_gpu_is_left_out_and_named_by_its_address_error_and_layer(
    monkeypatch: MP, tmp_path: Path, way: str
) -> None:
    fault, error, layer, doing = WAYS[way]
    fake, backend = machine(monkeypatch, tmp_path)
    fake.break_gpu(3, fault)
    inv = backend.probe()
    # The pass came back while the hung GPU's read is still inside the driver: a hang costs the deadline.
    assert backend.reads.busy() == fault.hang
    assert [d.index for d in inv.devices] == [0, 1, 2, 4, 5, 6, 7]
    assert failures(inv) == [(3, GPU3, error, layer)]
    assert inv.health is not None and inv.health.failures[0].doing == doing
    assert inv.health.on_bus == 8
    (line,) = [w for w in inv.warnings if GPU3 in w]
    assert line.startswith(f"GPU 3 ({GPU3}) cannot be used: {error}") and f"({layer}: " in line
    labels = build_labels(inv, LabelOptions()).labels
    assert labels["nvidia.com/gpu.count"] == "7"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert {k: labels[k] for k in (health.HEALTH, health.ANSWERING, health.FAILING, health.ON_BUS)} == {
        health.HEALTH: "degraded",
        health.ANSWERING: "7",
        health.FAILING: "1",
        health.ON_BUS: "8",
    }
    fake.heal(3)
    deadline = time.monotonic() + 5
    while backend.reads.busy() and time.monotonic() < deadline:
        time.sleep(0.01)  # a hung read ends once the GPU answers
    healed = backend.probe()
    assert len(healed.devices) == 8 and failures(healed) == []
    assert build_labels(healed, LabelOptions()).labels[health.HEALTH] == "ok"
    assert fake.init_count == 0  # every pass closed NVML, the hung one once its read ended


def test_a_gpu_that_stays_hung_is_not_read_again_while_its_read_runs(monkeypatch: MP, tmp_path: Path) -> None:
    fake, backend = machine(monkeypatch, tmp_path)
    fake.break_gpu(3, HANG)
    first = backend.probe()
    calls = fake.calls["nvmlDeviceGetHandleByIndex_v2"]
    second = backend.probe()
    assert failures(first) == failures(second) == [(3, GPU3, "NVML_ERROR_TIMEOUT", "hardware")]
    # Its handle was not asked for again: one thread stays stuck, not one more each pass.
    assert fake.calls["nvmlDeviceGetHandleByIndex_v2"] == calls + 7
    assert fake.init_count == 2  # both passes leave closing NVML to the read still inside it
    fake.heal(3)
    deadline = time.monotonic() + 5
    while fake.init_count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.init_count == 0


def test_the_hung_gpu_is_named_by_the_bus_gpu_nobody_claimed(monkeypatch: MP, tmp_path: Path) -> None:
    """Its handle never came back, so NVML never said where it sits; the bus GPU left over is it."""
    fake, backend = machine(monkeypatch, tmp_path)
    fake.break_gpu(5, LOST)
    inv = backend.probe()
    assert failures(inv) == [(5, "0000:57:00.0", "NVML_ERROR_GPU_IS_LOST", "hardware")]


def _bus_gpu(root: Path, address: str, driver: str | None = None, *, virtual_function: bool = False) -> None:
    d = root / "sys/bus/pci/devices" / address
    d.mkdir(parents=True)
    (d / "vendor").write_text("0x10de\n")
    (d / "class").write_text("0x030200\n")
    if driver is not None:
        os.symlink(f"../../../bus/pci/drivers/{driver}", d / "driver")
    if virtual_function:
        os.symlink("../0000:07:00.0", d / "physfn")


@pytest.mark.parametrize(
    ("driver", "layer"),
    [("nvidia", "hardware"), (None, "driver")],
    ids=["bound to nvidia: the GPU failed", "bound to no driver: the driver did not take it"],
)
def test_a_gpu_on_the_bus_that_nvml_does_not_report_makes_the_node_degraded(
    monkeypatch: MP, tmp_path: Path, driver: str | None, layer: str
) -> None:
    _fake, backend = machine(monkeypatch, tmp_path)
    _bus_gpu(tmp_path, "0000:97:00.0", driver)
    inv = backend.probe()
    assert len(inv.devices) == 8
    assert failures(inv) == [(None, "0000:97:00.0", NOT_IN_NVML, layer)]
    assert inv.health is not None and inv.health.on_bus == 9
    assert any(w.startswith("GPU 0000:97:00.0 cannot be used: not reported by NVML") for w in inv.warnings)
    labels = build_labels(inv, LabelOptions()).labels
    assert (labels[health.HEALTH], labels[health.ANSWERING], labels[health.ON_BUS]) == ("degraded", "8", "9")


@pytest.mark.parametrize(
    ("driver", "vf"),
    [("vfio-pci", False), ("nvidia", True)],
    ids=["given to a VM (vfio-pci)", "an SR-IOV virtual function"],
)
def test_a_gpu_that_is_not_nvmls_to_report_is_not_missing(
    monkeypatch: MP, tmp_path: Path, driver: str, vf: bool
) -> None:
    _fake, backend = machine(monkeypatch, tmp_path)
    _bus_gpu(tmp_path, "0000:97:00.0", driver, virtual_function=vf)
    inv = backend.probe()
    assert failures(inv) == []
    assert inv.health == Health((), 8)


def test_without_a_readable_pci_bus_the_node_is_judged_by_nvml_alone(monkeypatch: MP, tmp_path: Path) -> None:
    install_fake_nvml(monkeypatch, dgx())  # no host tree: nothing under sys/bus/pci
    inv = NvmlBackend(host_root=tmp_path, gpu_timeout=READ_DEADLINE_S).probe()
    assert inv.health == Health((), None)
    labels = build_labels(inv, LabelOptions()).labels
    assert labels[health.HEALTH] == "ok" and health.ON_BUS not in labels


def test_a_node_whose_every_gpu_fails_is_degraded_without_gpu_labels(monkeypatch: MP, tmp_path: Path) -> None:
    fake, backend = machine(monkeypatch, tmp_path)
    for i in range(8):
        fake.break_gpu(i, UNKNOWN)
    inv = backend.probe()
    labels = build_labels(inv, LabelOptions()).labels
    assert inv.devices == ()
    assert labels == {
        health.HEALTH: "degraded",
        health.ANSWERING: "0",
        health.FAILING: "8",
        health.ON_BUS: "8",
    }


def test_a_node_without_gpus_gets_no_health_labels(monkeypatch: MP, tmp_path: Path) -> None:
    install_fake_nvml(monkeypatch, None)
    inv = NvmlBackend(host_root=tmp_path).probe()
    assert inv.health == Health((), None) and build_labels(inv, LabelOptions()).labels == {}


def test_a_gpu_whose_fabric_failed_it_cannot_be_used(monkeypatch: MP, tmp_path: Path) -> None:
    profile = load_machine_profile(Path(__file__).parents[1] / "profiles_nvml" / "h100-mig-clique.yaml")
    _fake, backend = machine(monkeypatch, tmp_path, profile)
    fabric = FakeNvml._fabric

    def failed_on_gpu_1(self: FakeNvml, handle: object, out: object) -> int:
        code = fabric(self, handle, out)
        gpu = self._gpu_of(handle)
        if gpu is not None and gpu.index == 1:
            info = out._obj  # type: ignore[attr-defined]
            info.status = ERROR_UNKNOWN  # registration completed, and failed
        return code

    monkeypatch.setattr(FakeNvml, "_fabric", failed_on_gpu_1)
    inv = backend.probe()
    (failure,) = inv.health.failures if inv.health else ()
    assert (failure.index, failure.layer, failure.error) == (
        1,
        "fabric",
        "fabric registration NVML_ERROR_UNKNOWN",
    )
    assert [d.index for d in inv.devices] == [0]
    assert "nvidia-fabricmanager" in next(w for w in inv.warnings if "fabric registration" in w)


def test_a_stack_wide_error_on_one_gpu_still_fails_the_pass(monkeypatch: MP, tmp_path: Path) -> None:
    fake, backend = machine(monkeypatch, tmp_path)
    fake.break_gpu(3, GpuFault(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    with pytest.raises(BackendError, match="driver"):
        backend.probe()


def test_a_gpu_lost_where_the_bus_cannot_be_read_keeps_the_address_an_earlier_pass_read(
    monkeypatch: MP, tmp_path: Path
) -> None:
    fake = install_fake_nvml(monkeypatch, dgx())  # no host tree: the bus cannot name it
    backend = NvmlBackend(host_root=tmp_path, gpu_timeout=READ_DEADLINE_S)
    backend.probe()
    fake.break_gpu(3, LOST)
    assert failures(backend.probe()) == [(3, GPU3, "NVML_ERROR_GPU_IS_LOST", "hardware")]


# ---- fatal Xid events ---------------------------------------------------------------------------


def _watching(monkeypatch: MP, tmp_path: Path) -> tuple[FakeNvml, NvmlBackend, threading.Event]:
    fake, backend = machine(monkeypatch, tmp_path)
    woken = threading.Event()
    backend.watch(woken.set)
    assert backend._watch is not None and backend._watch.listening.wait(5)
    return fake, backend, woken


def _closed(backend: NvmlBackend) -> None:
    """Close ``backend`` and wait for its event thread to end. close() waits 2 s for it, which a loaded
    machine can miss; a thread left running frees its event set and closes its NVML session when its wait
    ends, through the bindings, which by then call the next test's fake: whose first event set has the
    same handle, so that test's Xids were never reported (``woken`` stayed unset)."""
    watch = backend._watch
    backend.close()
    thread = watch._thread if watch is not None else None
    if thread is not None:
        thread.join(THREAD_END_S)
        assert not thread.is_alive(), f"the Xid event thread still runs {THREAD_END_S:g} s after close()"


def test_a_fatal_xid_marks_its_gpu_until_it_was_reset(monkeypatch: MP, tmp_path: Path) -> None:
    fake, backend, woken = _watching(monkeypatch, tmp_path)
    try:
        assert failures(backend.probe()) == []
        fake.xid(3, 48)  # double-bit ECC error: the GPU keeps answering, and must be reset
        assert woken.wait(5), "the daemon is woken for a pass at once"
        for _ in range(3):  # it keeps answering: the mark holds pass after pass
            inv = backend.probe()
            assert failures(inv) == [(3, GPU3, "Xid 48", "hardware")]
            assert [d.index for d in inv.devices] == [0, 1, 2, 4, 5, 6, 7]
        fake.break_gpu(3, LOST)  # a reset takes it away for a moment...
        assert failures(backend.probe()) == [(3, GPU3, "NVML_ERROR_GPU_IS_LOST", "hardware")]
        fake.heal(3)  # ...and it answers again
        assert failures(backend.probe()) == [] and len(backend.probe().devices) == 8
    finally:
        _closed(backend)
    assert fake.init_count == 0


def test_a_reset_clears_the_mark_where_the_bus_cannot_be_read(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, dgx())  # a container whose /sys shows no GPU
    backend = NvmlBackend(host_root=tmp_path, gpu_timeout=READ_DEADLINE_S)
    woken = threading.Event()
    backend.watch(woken.set)
    try:
        assert backend._watch is not None and backend._watch.listening.wait(5)
        backend.probe()
        fake.xid(3, 79)
        assert woken.wait(5)
        assert failures(backend.probe()) == [(3, GPU3, "Xid 79", "hardware")]
        fake.break_gpu(3, LOST)
        backend.probe()
        fake.heal(3)
        assert failures(backend.probe()) == []
    finally:
        _closed(backend)


@pytest.mark.parametrize("xid", sorted(APPLICATION_XIDS))
def test_an_application_xid_leaves_the_gpu_healthy(monkeypatch: MP, tmp_path: Path, xid: int) -> None:
    fake, backend, woken = _watching(monkeypatch, tmp_path)
    try:
        fake.xid(3, xid)
        fake.xid(4, 79)  # a fatal one after it, so that the test knows the first was read
        assert woken.wait(5)
        assert failures(backend.probe()) == [(4, "0000:47:00.0", "Xid 79", "hardware")]
    finally:
        _closed(backend)


@pytest.mark.parametrize(("xid", "layer"), [(74, "fabric"), (119, "driver"), (79, "hardware")])
def test_an_xid_names_its_layer(monkeypatch: MP, tmp_path: Path, xid: int, layer: str) -> None:
    fake, backend, woken = _watching(monkeypatch, tmp_path)
    try:
        fake.xid(0, xid)
        assert woken.wait(5)
        assert failures(backend.probe()) == [(0, "0000:07:00.0", f"Xid {xid}", layer)]
    finally:
        _closed(backend)


def test_without_event_sets_the_passes_alone_decide(monkeypatch: MP, tmp_path: Path) -> None:
    fake = install_fake_nvml(monkeypatch, dgx(), fail={"nvmlEventSetCreate": pynvml.NVML_ERROR_NOT_SUPPORTED})
    fake.write_host_root(tmp_path)
    backend = NvmlBackend(host_root=tmp_path, gpu_timeout=READ_DEADLINE_S)
    backend.watch(lambda: None)
    try:
        fake.break_gpu(1, GpuFault(ERROR_GPU_IS_LOST))
        assert failures(backend.probe()) == [(1, "0000:17:00.0", "NVML_ERROR_GPU_IS_LOST", "hardware")]
    finally:
        _closed(backend)
    assert fake.init_count == 0


def test_failures_are_data_the_labeler_counts() -> None:
    """The labeler needs no NVML: a hand-made inventory says it all."""
    lost = GpuFailure("0000:37:00.0", 3, "NVML_ERROR_GPU_IS_LOST", "hardware")
    inv = Inventory(backend="nvml", health=Health((lost,), 4))
    assert build_labels(inv, LabelOptions()).labels == {
        health.HEALTH: "degraded",
        health.ANSWERING: "0",
        health.FAILING: "1",
        health.ON_BUS: "4",
    }
    assert build_labels(Inventory(backend="tegra", health=None), LabelOptions()).labels == {}
