"""The ``gfd`` command as a user runs it: output, exit status, one-line errors."""

from __future__ import annotations

import json
import shlex
import signal
import socket
import subprocess
import sys
import time
import types
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from gfd import cli
from tests.fakes.fake_nvml import install_fake_nvml

ROOT = Path(__file__).resolve().parents[2]
PROFILES = Path(__file__).parent / "profiles_cli"
T4 = PROFILES / "one-t4.yaml"


def gfd(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gfd", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def test_the_console_script_is_gfd_cli_main() -> None:
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "gfd"]
    assert script.value == "gfd.cli:main"


def readme_gfd_command() -> list[str]:
    """The gfd arguments of the README's first command, exactly as written there."""
    readme = (ROOT / "README.md").read_text()
    (line,) = [line for line in readme.splitlines() if line.startswith("python3 -m venv .venv && ")]
    command = shlex.split(line.rsplit("&& ", 1)[1])
    assert command[0] == ".venv/bin/gfd"
    return command[1:]


def test_readme_command_prints_the_mig_labels_of_the_bundled_dgx() -> None:
    run = gfd(*readme_gfd_command())
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    lines = run.stdout.splitlines()
    assert lines[0].startswith("# ")
    labels = dict(line.split("=", 1) for line in lines if not line.startswith("#"))
    assert labels["nvidia.com/gpu.simulated"] == "true"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/mig.capable"] == "true"
    # "a DGX A100 with MIG": its GPUs are shown as the MIG devices they are split into
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("56", "4864")
    assert list(labels) == sorted(labels)
    assert "expiry-time" not in run.stdout  # a one-off run's labels do not expire


def test_oneshot_writes_the_file_and_exits(tmp_path: Path) -> None:
    out = tmp_path / "source.d" / "gfd"
    run = gfd("--oneshot", "--backend", "mock", "--mock-profile", str(T4), "-o", str(out))
    assert run.returncode == 0, run.stderr
    assert "nvidia.com/gpu.product=Tesla-T4\n" in out.read_text()
    assert run.stdout == ""


def test_flags_come_from_the_environment_too(tmp_path: Path) -> None:
    env = {
        "GFD_ONESHOT": "true",
        "GFD_BACKEND": "mock",
        "GFD_MOCK_PROFILE": str(T4),
        "GFD_OUTPUT_FILE": "-",
        "GFD_TIMESTAMP": "true",
        "PATH": "/usr/bin:/bin",
    }
    run = gfd(env=env)
    assert run.returncode == 0, run.stderr
    assert "nvidia.com/gfd.timestamp=" in run.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--sleep-interval", "often"], "--sleep-interval"),
        (["--mig-strategy=all"], "--mig-strategy"),
        (["--frobnicate"], "--frobnicate"),
        (["--backend", "mock"], "--mock-profile"),
        (["--backend", "mock", "--mock-profile", str(PROFILES / "broken.yaml")], "devices.0.memory_mib"),
        (["--backend", "mock", "--mock-profile", str(PROFILES / "absent.yaml")], "absent.yaml"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], expected: str) -> None:
    run = gfd("--oneshot", "-o", "-", *args)
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.startswith("gfd: error: ")
    assert expected in run.stderr
    assert run.stderr.count("\n") == 1


def test_a_malformed_config_file_is_exit_2_with_the_field(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  gfd:\n    sleepInterval: whenever\n")
    run = gfd("--oneshot", "--backend", "mock", "--mock-profile", str(T4), "--config-file", str(config))
    assert run.returncode == 2
    assert "flags.gfd.sleepInterval" in run.stderr
    assert run.stderr.count("\n") == 1


def test_config_file_sharing_reaches_the_labels(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "      - name: nvidia.com/gpu\n        replicas: 4\n"
    )
    run = gfd(
        "--oneshot", "--backend", "mock", "--mock-profile", str(T4), "-o", "-", "--config-file", str(config)
    )
    assert run.returncode == 0, run.stderr
    assert "nvidia.com/gpu.replicas=4\n" in run.stdout
    assert "nvidia.com/gpu.sharing-strategy=time-slicing\n" in run.stdout


def test_no_nvml_library_is_one_line_naming_the_layer_and_exit_1(tmp_path: Path) -> None:
    # A GPU on the PCI bus, so the missing library is what is wrong.
    gpu = tmp_path / "sys/bus/pci/devices/0000:3b:00.0"
    gpu.mkdir(parents=True)
    (gpu / "vendor").write_text("0x10de\n")
    (gpu / "class").write_text("0x030200\n")
    run = gfd("--oneshot", "--backend", "nvml", "--host-root", str(tmp_path), "-o", "-")
    assert run.returncode == 1
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1
    assert "Traceback" not in run.stderr
    assert "libnvidia-ml.so.1" in run.stderr
    assert any(f"error: {layer}:" in run.stderr for layer in ("nvml", "container-toolkit", "driver"))


def test_a_machine_without_a_gpu_hears_what_the_doctor_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "sys/bus/pci/devices/0000:00:02.0"
    other.mkdir(parents=True)
    (other / "vendor").write_text("0x8086\n")
    (other / "class").write_text("0x030000\n")
    install_fake_nvml(monkeypatch, None, library_missing=True)  # no driver either, as on such a machine
    assert cli.main(["--oneshot", "--host-root", str(tmp_path), "-o", "-"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gfd: error: hardware: no NVIDIA (vendor 0x10de) GPU under /sys/bus/pci/devices")
    assert "runtimeClassName" not in err
    assert err.count("\n") == 1


def test_help_lists_the_environment_variables() -> None:
    run = gfd("--help")
    assert run.returncode == 0
    for name in (
        "$GFD_ONESHOT",
        "$GFD_SLEEP_INTERVAL",
        "$GFD_OUTPUT_FILE",
        "$GFD_MIG_STRATEGY",
        "$GFD_FAIL_ON_INIT_ERROR",
        "$GFD_NO_TIMESTAMP",
        "$GFD_MACHINE_TYPE_FILE",
        "$GFD_CONFIG_FILE",
    ):
        assert name in run.stdout


def test_doctor_is_dispatched_with_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def doctor_main(argv: list[str]) -> int:
        seen.append(list(argv))
        return 7

    fake = types.ModuleType("gfd.doctor.cli")
    fake.main = doctor_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gfd.doctor.cli", fake)
    assert cli.main(["doctor", "--json", "--host-root", "/host"]) == 7
    assert seen == [["--json", "--host-root", "/host"]]


def test_a_oneshot_run_loads_neither_nvml_nor_prometheus_nor_doctor() -> None:
    code = (
        "import sys, json\n"
        "from gfd.cli import main\n"
        f"rc = main(['--oneshot', '--backend', 'mock', '--mock-profile', {str(T4)!r}, '-o', '-'])\n"
        "mods = [m for m in sys.modules if m.split('.')[0] in ('pynvml', 'prometheus_client')"
        " or m.startswith('gfd.doctor')]\n"
        "print(json.dumps({'rc': rc, 'mods': mods}), file=sys.stderr)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert json.loads(run.stderr.strip().splitlines()[-1]) == {"rc": 0, "mods": []}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_are_served_only_on_the_given_address(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "gfd"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gfd",
            "--backend",
            "mock",
            "--mock-profile",
            str(T4),
            "-o",
            str(out),
            "--sleep-interval",
            "50ms",
            "--metrics-address",
            f"127.0.0.1:{port}",
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        body = ""
        deadline = time.monotonic() + 30
        while "gfd_file_writes_total 1.0" not in body:
            assert time.monotonic() < deadline, body
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    body = resp.read().decode()
            except OSError:
                time.sleep(0.05)
        assert "gfd_passes_total" in body
        assert "gfd_labels " in body
        assert "gfd_last_success_timestamp_seconds" in body
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0


def test_an_unwritable_output_is_one_line_naming_the_output(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    run = gfd("--oneshot", "--backend", "mock", "--mock-profile", str(T4), "-o", str(blocker / "gfd"))
    assert run.returncode == 1
    assert run.stderr.startswith(f"gfd: error: output: cannot write {blocker / 'gfd'}")
    assert run.stderr.count("\n") == 1


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.05, 0.15, 0.4, 1.0])
@pytest.mark.parametrize("mode", [["--sleep-interval", "20ms"], ["--oneshot"]])
def test_ctrl_c_at_any_moment_ends_without_a_traceback(tmp_path: Path, delay: float, mode: list[str]) -> None:
    # Moments from gfd's own start on: reading the settings, importing the profile loader, loading the
    # profile, labelling, writing, sleeping. -X importtime says when gfd.config (imported first thing in main)
    # is loaded; before that the interpreter is still starting up, which is not gfd's code.
    out = tmp_path / "gfd"
    command = [
        sys.executable,
        "-X",
        "importtime",
        "-m",
        "gfd",
        "--backend",
        "mock",
        "--mock-profile",
        str(T4),
    ]
    command += ["-o", str(out), *mode]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.rstrip().endswith("| gfd.config"):
                break
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    # 130 as a shell reports Ctrl-C; 0 when the daemon stopped after its pass or the oneshot was done;
    # -SIGINT when the signal came while the interpreter was tearing down after gfd had finished (it
    # puts SIGINT back to the default then), which a shell reports as 130 too.
    assert proc.returncode in (0, 130, -signal.SIGINT), err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left
    if "stays in place" in err:
        assert out.exists()


def test_usage_names_the_doctor() -> None:
    run = gfd("--help")
    assert run.returncode == 0
    usage = run.stdout.split("\n\n")[0]
    assert "gfd doctor" in usage


def test_an_empty_profile_is_one_line_saying_what_was_expected(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    run = gfd("--oneshot", "--backend", "mock", "--mock-profile", str(empty), "-o", "-")
    assert run.returncode == 2
    assert run.stderr == f"gfd: error: {empty}: the profile is empty, expected a machine profile " + (
        "(machine, driver_version, devices: [...]; schema in docs/gfd.md)\n"
    )


def test_a_machine_profile_given_as_config_file_is_named_for_what_it_is() -> None:
    run = gfd(
        "--oneshot", "--backend", "mock", "--mock-profile", str(T4), "--config-file", str(T4), "-o", "-"
    )
    assert run.returncode == 2
    assert run.stderr.startswith(f"gfd: error: {T4}: this is a machine profile (for --backend mock")
    assert "expected NVIDIA's device-plugin config file" in run.stderr
    assert run.stderr.count("\n") == 1


def test_a_config_file_given_as_profile_is_named_for_what_it_is() -> None:
    config = ROOT / "profiles" / "sharing" / "time-slicing.yaml"
    run = gfd("--oneshot", "--backend", "mock", "--mock-profile", str(config), "-o", "-")
    assert run.returncode == 2
    assert "this is a device-plugin config file (for --config-file), expected a machine profile" in run.stderr


def test_nvidias_chart_environment_runs_unchanged(tmp_path: Path) -> None:
    # The variables NVIDIA's gpu-feature-discovery DaemonSet sets, on top of a mock node.
    env = {
        "PATH": "/usr/bin:/bin",
        "NODE_NAME": "gpu-node-1",
        "NAMESPACE": "gpu-operator",
        "POD_NAME": "gpu-feature-discovery-x7k2p",
        "MIG_STRATEGY": "single",
        "FAIL_ON_INIT_ERROR": "true",
        "GFD_NO_TIMESTAMP": "true",
        "GFD_SLEEP_INTERVAL": "60s",
        "DEVICE_DISCOVERY_STRATEGY": "auto",
        "USE_NODE_FEATURE_API": "true",
        "GFD_BACKEND": "mock",
        "GFD_MOCK_PROFILE": str(T4),
    }
    run = gfd("--oneshot", "-o", "-", "--driver-root-ctr-path=/driver-root", env=env)
    assert run.returncode == 0, run.stderr
    assert "nvidia.com/gpu.product=Tesla-T4\n" in run.stdout
    assert "nvidia.com/mig.strategy=single\n" in run.stdout
    (warning,) = run.stderr.splitlines()
    assert warning.startswith("gfd: warning: --use-node-feature-api:")
    assert "feature file" in warning and "nfd-lite" in warning


def test_kubernetes_client_flags_are_said_once_in_the_daemons_log(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    command = [sys.executable, "-m", "gfd", "--backend", "mock", "--mock-profile", str(T4), "-o", str(out)]
    extra = ["--kubeconfig", "/k", "--kube-api-qps", "5", "--kube-api-burst", "10", "--namespace", "n"]
    proc = subprocess.Popen(
        [*command, *extra, "--node-name", "a", "--pod-name", "b", "--sleep-interval", "20ms"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # several passes
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    said = [line for line in err.splitlines() if "not needed here" in line]
    assert len(said) == 1
    for flag in (
        "--kubeconfig",
        "--kube-api-qps",
        "--kube-api-burst",
        "--namespace",
        "--node-name",
        "--pod-name",
    ):
        assert flag in said[0]
