"""A gfd that finds no GPU says so where an admin and an alert look: /readyz answers 503 with the reason in
one line, gfd_no_gpu is 1, the log says it once and points at `gfd doctor`; a GPU that appears makes it ready
again without a restart. Labels behave as before: a failed pass writes nothing, a pass that finds no GPU
writes no GPU labels."""

from __future__ import annotations

import logging
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gfd.config import load_settings
from gfd.daemon import Daemon
from gfd.inventory import Device, GpuFailure, Health, Inventory
from gfd.machine_profile import MachineProfile, load_machine_profile
from gfd.metrics import PrometheusMetrics
from gfd.readiness import NO_NVML_DEVICE, of_inventory
from gfd.writer import read_feature_file
from tests.fakes.fake_nvml import install_fake_nvml
from tests.ports import low_port
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DGX = ROOT / "profiles" / "dgx-a100-mig.yaml"
NOT_READY = "; not ready: /readyz answers 503 and gfd_no_gpu is 1 until a pass finds a GPU"
DOCTOR = "; `gfd doctor` on this node checks every layer"


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def served() -> Iterator[tuple[PrometheusMetrics, int]]:
    """Metrics served as gfd serves them, on a port of the test's own."""
    metrics = PrometheusMetrics()
    server = metrics.serve("127.0.0.1", 0)
    try:
        yield metrics, int(server.server_address[1])
    finally:
        server.stop()


def nvml_daemon(tmp_path: Path, metrics: PrometheusMetrics, root: Path, *flags: str) -> Daemon:
    """The daemon as the chart runs it (init errors not fatal), detecting the nvml backend itself."""
    argv = [
        "--backend=nvml",
        f"--host-root={root}",
        f"--driver-root-ctr-path={tmp_path / 'no-driver-root'}",
        f"--output-file={tmp_path / 'features' / 'gfd'}",
        "--fail-on-init-error=false",
        *flags,
    ]
    return Daemon(load_settings(argv, {}), metrics=metrics)


def gauge(metrics: PrometheusMetrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, {})


def test_no_nvml_library_makes_gfd_unready_says_so_once_and_a_library_that_appears_makes_it_ready(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    served: tuple[PrometheusMetrics, int],
) -> None:
    metrics, port = served
    profile = load_machine_profile(DGX)
    # The node's driver is loaded (its kernel module, its GPUs on the bus), but no NVML in the container.
    fake = install_fake_nvml(monkeypatch, profile, library_missing=True)
    root = fake.write_host_root(tmp_path / "host")
    daemon = nvml_daemon(tmp_path, metrics, root)
    assert readyz(port) == (503, "not ok: no pass has finished yet\n")

    with caplog.at_level(logging.INFO, logger="gfd"):
        passes = [daemon.run_pass() for _ in range(3)]
    assert not any(p.ok for p in passes)
    cause = passes[0].error
    assert cause is not None and cause.startswith("container-toolkit: ") and "libnvidia-ml.so.1" in cause
    # Said once over three passes: the cause, its layer, that the pod is not ready, and where to look next.
    assert caplog.messages == [f"{cause}{NOT_READY}{DOCTOR}"]
    assert caplog.records[0].levelno == logging.ERROR
    assert readyz(port) == (503, f"not ok: {cause}\n")
    assert gauge(metrics, "gfd_no_gpu") == 1
    assert not (tmp_path / "features" / "gfd").exists()  # as before: a failed pass writes nothing

    caplog.clear()
    install_fake_nvml(monkeypatch, profile)  # the runtime is fixed: the library is there now
    with caplog.at_level(logging.INFO, logger="gfd"):
        fixed = daemon.run_pass()
    assert fixed.ok and (fixed.labels or {})["nvidia.com/gpu.count"] == "8"
    assert caplog.messages == ["pass succeeded again (backend nvml)"]
    assert readyz(port) == (200, "ok\n")
    assert gauge(metrics, "gfd_no_gpu") == 0


def test_nvml_that_sees_no_device_makes_gfd_unready_and_a_gpu_that_appears_makes_it_ready(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    served: tuple[PrometheusMetrics, int],
) -> None:
    metrics, port = served
    fake = install_fake_nvml(
        monkeypatch, MachineProfile(driver_version="550.54.15", cuda_driver_version=12040)
    )
    root = fake.write_host_root(tmp_path / "host")
    daemon = nvml_daemon(tmp_path, metrics, root)

    with caplog.at_level(logging.INFO, logger="gfd"):
        passes = [daemon.run_pass() for _ in range(3)]
    assert all(p.ok for p in passes)  # no failed pass, as NVIDIA's: the node is labelled without GPU labels
    assert not any(key.startswith("nvidia.com/gpu.") for p in passes for key in p.labels or {})
    assert caplog.messages == [f"{NO_NVML_DEVICE}; writing no GPU labels{NOT_READY}{DOCTOR}"]
    assert caplog.records[0].levelno == logging.WARNING
    assert readyz(port) == (503, f"not ok: {NO_NVML_DEVICE}\n")
    assert gauge(metrics, "gfd_no_gpu") == 1 and gauge(metrics, "gfd_gpus_answering") == 0

    caplog.clear()
    gpus = install_fake_nvml(monkeypatch, load_machine_profile(DGX))  # the GPUs are given to the container
    gpus.write_host_root(root)
    with caplog.at_level(logging.INFO, logger="gfd"):
        found = daemon.run_pass()
    assert found.ok and (found.labels or {})["nvidia.com/gpu.count"] == "8"
    assert caplog.messages == ["8 GPU(s) found again; ready"]
    assert readyz(port) == (200, "ok\n")
    assert gauge(metrics, "gfd_no_gpu") == 0


def test_a_jetson_whose_files_are_not_mounted_is_unready_and_one_whose_files_are_is_ready(
    tmp_path: Path, served: tuple[PrometheusMetrics, int]
) -> None:
    metrics, port = served
    out = tmp_path / "gfd"
    argv = ["--backend=tegra", f"--output-file={out}", "--fail-on-init-error=false"]
    missing = Daemon(load_settings([*argv, f"--host-root={tmp_path / 'empty'}"], {}), metrics=metrics)
    assert not missing.run_pass().ok
    status, body = readyz(port)
    assert status == 503 and body.startswith(f"not ok: tegra: no Jetson under {tmp_path / 'empty'}")
    assert gauge(metrics, "gfd_no_gpu") == 1

    jetson = FIXTURES / "jetson" / "orin-nano-r36"
    assert Daemon(load_settings([*argv, f"--host-root={jetson}"], {}), metrics=metrics).run_pass().ok
    assert readyz(port) == (200, "ok\n")
    assert gauge(metrics, "gfd_no_gpu") == 0


def test_a_feature_file_that_cannot_be_written_is_unready_but_no_missing_gpu(
    tmp_path: Path, served: tuple[PrometheusMetrics, int]
) -> None:
    metrics, port = served
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    argv = ["--backend=mock", f"--mock-profile={DGX}", f"--output-file={blocked / 'gfd'}"]
    result = Daemon(load_settings(argv, {}), metrics=metrics).run_pass()
    assert not result.ok and result.layer == "output"
    assert readyz(port) == (503, f"not ok: {result.error}\n")
    assert gauge(metrics, "gfd_no_gpu") == 0  # the GPUs were found: an alert on it must not fire


def test_every_gpu_failing_is_no_gpu_to_label(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lost = GpuFailure(pci_bus_id="0000:07:00.0", index=0, error="NVML_ERROR_GPU_IS_LOST", layer="hardware")
    broken = Inventory(backend="nvml", health=Health(failures=(lost,), on_bus=1))
    state = of_inventory(broken)
    assert (
        state.no_gpu and state.reason == "no GPU answers: the GPU found fails (said above; gfd_gpus_failing)"
    )
    one_answers = Inventory(
        backend="nvml", devices=(Device(index=1, name="NVIDIA A100"),), health=broken.health
    )
    assert of_inventory(one_answers).ready  # degraded, said by the labels and gfd_gpus_failing: still ready

    class Broken:
        name = "nvml"

        def probe(self) -> Inventory:
            return broken

    settings = load_settings([f"--output-file={tmp_path / 'gfd'}"], {})
    daemon = Daemon(settings, detect_fn=lambda *a, **k: (Broken(), None))
    with caplog.at_level(logging.WARNING, logger="gfd"):
        result = daemon.run_pass()
    assert result.ok and (result.labels or {})["nvidia.com/gpu.health.failing"] == "1"  # labelled as failing
    assert caplog.messages == [f"{state.reason}{DOCTOR}"]  # so not "writing no GPU labels"
    assert daemon.readiness == state


def test_a_oneshot_run_says_no_gpu_as_before_without_the_daemon_s_readiness(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = install_fake_nvml(
        monkeypatch, MachineProfile(driver_version="550.54.15", cuda_driver_version=12040)
    )
    metrics = PrometheusMetrics()
    metrics.serving = True  # even where served, a oneshot run is gone before anyone probes it
    daemon = nvml_daemon(tmp_path, metrics, fake.write_host_root(tmp_path / "host"), "--oneshot")
    with caplog.at_level(logging.INFO, logger="gfd"):
        assert daemon.run() == 0
    assert caplog.messages == [f"{NO_NVML_DEVICE}; writing no GPU labels"]


def test_the_daemon_process_serves_readyz_on_its_metrics_address(tmp_path: Path) -> None:
    """The whole command as the chart runs it: a mock node whose profile gains a GPU while it runs."""
    profile = tmp_path / "node.yaml"
    profile.write_text('machine: Test Box\ndriver_version: "550.54.15"\ndevices: []\n')
    out, port = tmp_path / "gfd", low_port()  # an ephemeral port could be taken before gfd binds it
    command = [
        sys.executable,
        "-m",
        "gfd",
        "--backend=mock",
        f"--mock-profile={profile}",
        f"--output-file={out}",
    ]
    flags = ["--sleep-interval=100ms", f"--metrics-address=127.0.0.1:{port}", "--fail-on-init-error=false"]
    no_gpu = (503, "not ok: no GPU found: the mock backend reports no devices\n")
    proc = subprocess.Popen([*command, *flags], stderr=subprocess.PIPE, text=True)
    try:
        # The pass writes the file (and syncs its directory) before it records its verdict: wait for both.
        assert eventually(lambda: readyz_or_none(port) == no_gpu and out.exists(), timeout=60)
        # Rewritten in place, as an editor or `>` would: gfd must not read it empty or half-written.
        profile.write_text((ROOT / "tests" / "gfd" / "profiles_cli" / "one-t4.yaml").read_text())
        assert eventually(lambda: readyz_or_none(port) == (200, "ok\n"), timeout=60)
        found = read_feature_file(out)
        assert found is not None and found[0]["nvidia.com/gpu.count"] == "1"
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()  # leave no process behind
            proc.communicate()
            raise
    assert proc.returncode == 0
    said = [line for line in err.splitlines() if "GPU" in line]
    assert said == [
        "gfd: warning: no GPU found: the mock backend reports no devices; writing no GPU labels"
        f"{NOT_READY}{DOCTOR}",
        "gfd: info: 1 GPU(s) found again; ready",
    ]


def readyz_or_none(port: int) -> tuple[int, str] | None:
    try:
        return readyz(port)
    except OSError:  # not listening yet
        return None
