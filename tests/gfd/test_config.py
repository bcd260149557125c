"""Settings resolve like NVIDIA GFD's: command line over environment over config file over default."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gfd.config import build_parser, load_settings
from gfd.settings import DEFAULT_OUTPUT_FILE, FILE_FIELDS, FLAGS, ConfigError, Settings
from hostport import parse_address

ROOT = Path(__file__).resolve().parents[2]


def load(*argv: str, **env: str) -> Settings:
    return load_settings(list(argv), env)


def test_defaults_are_nvidias_except_the_output_directory() -> None:
    s = load()
    assert s.oneshot is False
    assert s.sleep_interval == timedelta(seconds=60)
    assert s.output_file == DEFAULT_OUTPUT_FILE == "/etc/kubernetes/node-feature-discovery/source.d/gfd"
    assert s.mig_strategy == "none"
    assert s.fail_on_init_error is True
    assert str(s.machine_type_file) == "/sys/class/dmi/id/product_name"
    assert s.backend == "auto"
    assert s.label_timestamp is False
    assert s.metrics_address is None


# (command line, environment, field, value from the command line, value from the environment)
FLAG_ENV = [
    (["--oneshot"], {"GFD_ONESHOT": "false"}, "oneshot", True, False),
    (["--oneshot=false"], {"GFD_ONESHOT": "true"}, "oneshot", False, True),
    (
        ["--sleep-interval", "5m"],
        {"GFD_SLEEP_INTERVAL": "10s"},
        "sleep_interval",
        timedelta(minutes=5),
        timedelta(seconds=10),
    ),
    (["--output-file", "/tmp/a"], {"GFD_OUTPUT_FILE": "/tmp/b"}, "output_file", "/tmp/a", "/tmp/b"),
    (["-o", "/tmp/a"], {"GFD_OUTPUT_FILE": "/tmp/b"}, "output_file", "/tmp/a", "/tmp/b"),
    (["--output", "-"], {"GFD_OUTPUT_FILE": "/tmp/b"}, "output_file", None, "/tmp/b"),
    (["--mig-strategy", "single"], {"GFD_MIG_STRATEGY": "mixed"}, "mig_strategy", "single", "mixed"),
    (["--fail-on-init-error=false"], {"GFD_FAIL_ON_INIT_ERROR": "true"}, "fail_on_init_error", False, True),
    (["--fail-on-init-error"], {"GFD_FAIL_ON_INIT_ERROR": "false"}, "fail_on_init_error", True, False),
    (["--no-timestamp"], {"GFD_NO_TIMESTAMP": "false"}, "no_timestamp", True, False),
    (
        ["--machine-type-file", "/a"],
        {"GFD_MACHINE_TYPE_FILE": "/b"},
        "machine_type_file",
        Path("/a"),
        Path("/b"),
    ),
    (["--config-file", "/a"], {"GFD_CONFIG_FILE": "/b"}, "config_file", Path("/a"), Path("/b")),
    (["--backend", "tegra"], {"GFD_BACKEND": "nvml"}, "backend", "tegra", "nvml"),
    (["--host-root", "/host"], {"GFD_HOST_ROOT": "/other"}, "host_root", Path("/host"), Path("/other")),
    (["--timestamp"], {"GFD_TIMESTAMP": "false"}, "timestamp", True, False),
    (["--with-vgpu=true"], {"GFD_WITH_VGPU": "false"}, "with_vgpu", True, False),
    (["--expiry", "1h"], {"GFD_EXPIRY": "2h"}, "expiry", timedelta(hours=1), timedelta(hours=2)),
    (
        ["--metrics-address", ":9100"],
        {"GFD_METRICS_ADDRESS": "127.0.0.1:9200"},
        "metrics_address",
        ("0.0.0.0", 9100),
        ("127.0.0.1", 9200),
    ),
]


@pytest.mark.parametrize(("argv", "env", "field", "from_flag", "from_env"), FLAG_ENV)
def test_command_line_beats_environment(
    argv: list[str],
    env: dict[str, str],
    field: str,
    from_flag: object,
    from_env: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # --config-file would be read; keep these about precedence only.
    monkeypatch.setattr("gfd.config._from_config_file", lambda path: ({}, None))
    assert getattr(load_settings(argv, env), field) == from_flag
    assert getattr(load_settings([], env), field) == from_env


def test_mock_profile_flag_and_variable(tmp_path: Path) -> None:
    s = load_settings(["--backend", "mock", "--mock-profile", "/a.yaml"], {"GFD_MOCK_PROFILE": "/b.yaml"})
    assert s.mock_profile == Path("/a.yaml")
    s = load_settings([], {"GFD_BACKEND": "mock", "GFD_MOCK_PROFILE": "/b.yaml"})
    assert (s.backend, s.mock_profile) == ("mock", Path("/b.yaml"))


def test_go_style_single_dash_long_flags_work() -> None:
    s = load("-oneshot", "-sleep-interval=5m", "-mig-strategy", "mixed", "-o", "-")
    assert (s.oneshot, s.sleep_interval) == (True, timedelta(minutes=5))
    assert (s.mig_strategy, s.output_file) == ("mixed", None)


def test_nvidias_legacy_variable_names_work() -> None:
    s = load(MIG_STRATEGY="mixed", FAIL_ON_INIT_ERROR="false")
    assert (s.mig_strategy, s.fail_on_init_error) == ("mixed", False)
    assert load(GFD_MIG_STRATEGY="single", MIG_STRATEGY="mixed").mig_strategy == "single"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--oneshot"], True),
        (["--oneshot=true"], True),
        (["--oneshot=false"], False),
        (["--oneshot=False"], False),
        (["--oneshot=1"], True),
        (["--oneshot", "false"], False),
    ],
)
def test_bool_flag_forms(argv: list[str], expected: bool) -> None:
    assert load(*argv).oneshot is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("60s", timedelta(seconds=60)),
        ("1m30s", timedelta(seconds=90)),
        ("1.5h", timedelta(minutes=90)),
        ("250ms", timedelta(milliseconds=250)),
        ("infinite", None),
    ],
)
def test_sleep_interval_takes_go_durations_and_infinite(text: str, expected: timedelta | None) -> None:
    assert load("--sleep-interval", text).sleep_interval == expected


@pytest.mark.parametrize("value", ["-", ""])
def test_dash_or_empty_output_means_stdout(value: str) -> None:
    assert load("--output-file", value).output_file is None
    assert load(GFD_OUTPUT_FILE=value).output_file is None


def test_expiry_defaults_to_three_sleep_intervals_and_none_when_nothing_refreshes_it() -> None:
    assert load().expiry == timedelta(minutes=3)
    assert load("--sleep-interval", "10m").expiry == timedelta(minutes=30)
    assert load("--oneshot").expiry is None  # a one-off job's labels are meant to stay
    assert load("--sleep-interval", "infinite").expiry is None
    assert load("--oneshot", "--expiry", "1h").expiry == timedelta(hours=1)
    assert load("--expiry", "infinite").expiry is None


def test_timestamp_label_only_when_asked_for_and_no_timestamp_wins() -> None:
    assert load("--timestamp").label_timestamp is True
    assert load("--timestamp", "--no-timestamp").label_timestamp is False


@pytest.mark.parametrize(
    ("argv", "env", "names"),
    [
        (["--sleep-interval", "soon"], {}, "--sleep-interval"),
        (["--sleep-interval", "0s"], {}, "--sleep-interval"),
        (["--sleep-interval", "-5s"], {}, "--sleep-interval"),
        (["--expiry", "1d"], {}, "--expiry"),  # Go has no day unit
        ([], {"GFD_SLEEP_INTERVAL": "5"}, "$GFD_SLEEP_INTERVAL"),
        (["--mig-strategy", "both"], {}, "--mig-strategy"),
        ([], {"GFD_ONESHOT": "maybe"}, "$GFD_ONESHOT"),
        (["--fail-on-init-error=perhaps"], {}, "--fail-on-init-error"),
        (["--backend", "cuda"], {}, "--backend"),
        (["--metrics-address", "localhost"], {}, "--metrics-address"),
        (["--no-such-flag"], {}, "--no-such-flag"),
        (["--backend", "mock"], {}, "--mock-profile"),
        (["--mock-profile", "p.yaml"], {}, "--backend mock"),
    ],
)
def test_bad_values_are_one_line_naming_the_source(argv: list[str], env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(argv, env)
    message = str(caught.value)
    assert names in message
    assert "\n" not in message


def test_empty_variables_count_as_unset() -> None:
    assert load(GFD_SLEEP_INTERVAL="", GFD_ONESHOT="").sleep_interval == timedelta(seconds=60)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":9100", ("0.0.0.0", 9100)),
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("9100", ("0.0.0.0", 9100)),
        ("[::1]:9100", ("::1", 9100)),
    ],
)
def test_metrics_address_forms(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


# --- the NVIDIA device-plugin config file sits between the environment and the defaults ---

CONFIG = """\
version: v1
flags:
  migStrategy: mixed
  failOnInitError: false
  gfd:
    oneshot: true
    sleepInterval: 5m
    outputFile: /tmp/from-file
    machineTypeFile: /tmp/machine
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    return path


def test_config_file_values_apply_over_defaults(config_file: Path) -> None:
    s = load("--config-file", str(config_file))
    assert s.config_file == config_file
    assert s.mig_strategy == "mixed"
    assert s.fail_on_init_error is False
    assert s.oneshot is True
    assert s.sleep_interval == timedelta(minutes=5)
    assert s.output_file == "/tmp/from-file"
    assert s.machine_type_file == Path("/tmp/machine")


def test_environment_and_command_line_beat_the_config_file(config_file: Path) -> None:
    s = load_settings(
        ["--config-file", str(config_file), "--mig-strategy", "single"],
        {"GFD_SLEEP_INTERVAL": "30s", "GFD_OUTPUT_FILE": "-", "GFD_ONESHOT": "false"},
    )
    assert s.mig_strategy == "single"
    assert s.sleep_interval == timedelta(seconds=30)
    assert s.expiry == timedelta(seconds=90)  # derived from the interval that won
    assert s.output_file is None
    assert s.oneshot is False
    assert s.fail_on_init_error is False  # only in the file


def test_config_file_infinite_interval(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("version: v1\nflags:\n  gfd:\n    sleepInterval: infinite\n")
    s = load("--config-file", str(path))
    assert (s.sleep_interval, s.expiry) == (None, None)


def test_config_file_from_the_environment(config_file: Path) -> None:
    assert load(GFD_CONFIG_FILE=str(config_file)).mig_strategy == "mixed"
    assert load(CONFIG_FILE=str(config_file)).mig_strategy == "mixed"


def test_a_bad_config_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: v1\nflags:\n  migStrategy: sometimes\n")
    with pytest.raises(ConfigError) as caught:
        load("--config-file", str(path))
    assert str(path) in str(caught.value)
    assert "migStrategy" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"absent\.yaml"):
        load("--config-file", str(tmp_path / "absent.yaml"))


# --- every flag and variable NVIDIA's GFD accepts is accepted, so its chart's args and env work ---


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--use-node-feature-api"], {}, {"use_node_feature_api": True}),
        ([], {"GFD_USE_NODE_FEATURE_API": "true"}, {"use_node_feature_api": True}),
        ([], {"USE_NODE_FEATURE_API": "true"}, {"use_node_feature_api": True}),
        (["--device-discovery-strategy", "nvml"], {}, {"backend": "nvml"}),
        ([], {"DEVICE_DISCOVERY_STRATEGY": "tegra"}, {"backend": "tegra"}),
        (["--driver-root-ctr-path", "/host/driver"], {}, {"driver_root": Path("/host/driver")}),
        (["--container-driver-root", "/run/nvidia/driver"], {}, {"driver_root": Path("/run/nvidia/driver")}),
        ([], {"DRIVER_ROOT_CTR_PATH": "/host/driver"}, {"driver_root": Path("/host/driver")}),
        ([], {"CONTAINER_DRIVER_ROOT": "/run/nvidia/driver"}, {"driver_root": Path("/run/nvidia/driver")}),
        (
            ["--kubeconfig", "/etc/kube.conf", "--kube-api-qps", "5", "--kube-api-burst", "10"],
            {},
            {"unused": ("--kubeconfig", "--kube-api-qps", "--kube-api-burst")},
        ),
        (
            [],
            {"KUBECONFIG": "/etc/kube.conf", "KUBE_API_QPS": "2.5", "KUBE_API_BURST": "10"},
            {"unused": ("$KUBECONFIG", "$KUBE_API_QPS", "$KUBE_API_BURST")},
        ),
        (
            ["--namespace", "gpu-operator", "--node-name", "node-1", "--pod-name", "gfd-x"],
            {},
            {"unused": ("--namespace", "--node-name", "--pod-name")},
        ),
        (
            [],
            {"NAMESPACE": "gpu-operator", "NODE_NAME": "node-1", "POD_NAME": "gfd-x"},
            {"unused": ("$NAMESPACE", "$NODE_NAME", "$POD_NAME")},
        ),
        (
            ["-node-name=node-1", "-use-node-feature-api=true"],
            {},
            {"unused": ("--node-name",), "use_node_feature_api": True},
        ),
    ],
)
def test_nvidias_flags_and_variables_reach_the_setting_they_name(
    argv: list[str], env: dict[str, str], expected: dict[str, Any]
) -> None:
    # The named settings take the given values, and nothing else moves from the defaults.
    assert load_settings(argv, env) == replace(load(), **expected)


def test_the_discovery_strategy_picks_the_backend() -> None:
    assert load("--device-discovery-strategy", "tegra").backend == "tegra"
    assert load(DEVICE_DISCOVERY_STRATEGY="nvml").backend == "nvml"
    assert load(DEVICE_DISCOVERY_STRATEGY="auto").backend == "auto"
    assert load("--backend", "nvml", DEVICE_DISCOVERY_STRATEGY="auto").backend == "nvml"
    with pytest.raises(ConfigError, match="contradicts --backend nvml"):
        load("--backend", "nvml", "--device-discovery-strategy", "tegra")


def test_vfio_is_one_line_saying_why_not() -> None:
    with pytest.raises(ConfigError) as caught:
        load(DEVICE_DISCOVERY_STRATEGY="vfio")
    message = str(caught.value)
    assert message.startswith("$DEVICE_DISCOVERY_STRATEGY: vfio")
    assert "not supported" in message and "auto, nvml or tegra" in message and "\n" not in message


def test_the_driver_root_defaults_to_nvidias_and_follows_either_name() -> None:
    assert load().driver_root == Path("/driver-root")
    assert load("--container-driver-root", "/run/nvidia/driver").driver_root == Path("/run/nvidia/driver")
    assert load(DRIVER_ROOT_CTR_PATH="/a", CONTAINER_DRIVER_ROOT="/b").driver_root == Path("/a")


def test_kubernetes_client_flags_are_only_listed_as_unused() -> None:
    s = load("--node-name", "n1", "--kube-api-qps", "5", NAMESPACE="gpu", POD_NAME="p")
    assert s.unused == ("--kube-api-qps", "$NAMESPACE", "--node-name", "$POD_NAME")
    assert load().unused == ()


@pytest.mark.parametrize(
    ("argv", "env", "names"),
    [
        (["--kube-api-qps", "fast"], {}, "--kube-api-qps"),
        ([], {"KUBE_API_BURST": "1.5"}, "$KUBE_API_BURST"),
        (["--device-discovery-strategy", "cuda"], {}, "--device-discovery-strategy"),
        ([], {"USE_NODE_FEATURE_API": "maybe"}, "$USE_NODE_FEATURE_API"),
    ],
)
def test_nvidias_flags_are_checked_like_the_others(argv: list[str], env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(names)):
        load_settings(argv, env)


def test_an_empty_boolean_variable_is_false_as_in_nvidias() -> None:
    assert load(GFD_FAIL_ON_INIT_ERROR="").fail_on_init_error is False
    assert load(FAIL_ON_INIT_ERROR="").fail_on_init_error is False
    assert load(GFD_USE_NODE_FEATURE_API="").use_node_feature_api is False


def test_an_empty_boolean_variable_beats_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("version: v1\nflags:\n  gfd:\n    oneshot: true\n")
    assert load("--config-file", str(path), GFD_ONESHOT="").oneshot is False


def test_the_config_file_may_set_nvidias_other_flags(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "flags:\n  deviceDiscoveryStrategy: tegra\n  useNodeFeatureAPI: true\n"
        "  plugin: {containerDriverRoot: /host-driver}\n"
    )
    s = load("--config-file", str(path))
    assert (s.backend, s.use_node_feature_api, s.driver_root) == ("tegra", True, Path("/host-driver"))
    path.write_text("flags:\n  deviceDiscoveryStrategy: vfio\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: field flags\.deviceDiscoveryStrategy: vfio"):
        load("--config-file", str(path))


def test_a_backend_on_the_command_line_beats_the_strategy_in_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("flags:\n  deviceDiscoveryStrategy: tegra\n")
    assert load("--config-file", str(path), "--backend", "nvml").backend == "nvml"
    assert load("--config-file", str(path), DEVICE_DISCOVERY_STRATEGY="nvml").backend == "nvml"
    assert load("--config-file", str(path)).backend == "tegra"


# --- what gfd.settings declares is what a user gets: from the help, the file and the command line ---


def test_help_shows_each_declared_default_as_the_flag_takes_it() -> None:
    helps = {action.dest: action.help or "" for action in build_parser()._actions}
    for flag in FLAGS:
        if flag.default is None:
            continue  # unset unless given
        found = re.search(r"\(default (.+?)\) \[\$", helps[flag.name])
        assert found is not None, f"{flag.flags[0]}: {helps[flag.name]}"
        # Giving the default the help shows changes nothing.
        assert load(f"{flag.flags[0]}={found.group(1)}") == load(), flag.flags[0]


# For each declared config-file field, a value other than the default: as the file writes it, and as
# its flag takes it.
FILE_EXAMPLES: dict[str, tuple[object, str]] = {
    "flags.migStrategy": ("mixed", "mixed"),
    "flags.failOnInitError": (False, "false"),
    "flags.useNodeFeatureAPI": (True, "true"),
    "flags.deviceDiscoveryStrategy": ("tegra", "tegra"),
    "flags.plugin.containerDriverRoot": ("/host-driver", "/host-driver"),
    "flags.gfd.oneshot": (True, "true"),
    "flags.gfd.noTimestamp": (True, "true"),
    "flags.gfd.sleepInterval": (90_000_000_000, "1m30s"),  # a bare number is nanoseconds
    "flags.gfd.outputFile": ("/tmp/from-file", "/tmp/from-file"),
    "flags.gfd.machineTypeFile": ("/tmp/machine", "/tmp/machine"),
}


def file_setting(tmp_path: Path, where: str, value: object) -> Path:
    """A config file that sets the one field ``where`` (``flags.gfd.oneshot``) to ``value``."""
    *parents, key = where.split(".")
    document: dict[str, object] = {key: value}
    for parent in reversed(parents):
        document = {parent: document}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(document))
    return path


def test_every_declared_file_field_has_an_example() -> None:
    assert set(FILE_EXAMPLES) == set(FILE_FIELDS)


@pytest.mark.parametrize("where", sorted(FILE_EXAMPLES))
def test_each_file_field_sets_what_its_flag_sets(tmp_path: Path, where: str) -> None:
    in_file, on_command_line = FILE_EXAMPLES[where]
    path = file_setting(tmp_path, where, in_file)
    from_file = load("--config-file", str(path))
    path.write_text("{}")
    from_flag = load("--config-file", str(path), f"{FILE_FIELDS[where].flags[0]}={on_command_line}")
    assert from_file == from_flag != load("--config-file", str(path))


@pytest.mark.parametrize("where", sorted(FILE_FIELDS))
def test_a_bad_value_in_any_file_field_names_the_file_and_field(tmp_path: Path, where: str) -> None:
    path = file_setting(tmp_path, where, ["no", "field", "takes", "a", "list"])
    with pytest.raises(ConfigError) as caught:
        load("--config-file", str(path))
    assert str(caught.value).startswith(f"{path}: field {where}: ")


def modules_loaded(argv: list[str]) -> list[str]:
    """The heavy third-party modules that resolving these settings, in a fresh interpreter, loads."""
    code = (
        "import sys\n"
        "from gfd.config import load_settings\n"
        f"load_settings({argv!r}, {{}})\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'msgspec', 'yaml', 'durationpy'}))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return list(json.loads(run.stdout.replace("'", '"')))


def test_settings_without_a_config_file_load_no_parser(tmp_path: Path) -> None:
    assert modules_loaded([]) == []
    assert modules_loaded(["--sleep-interval", "5m", "--mig-strategy", "mixed"]) == ["durationpy"]
    config = tmp_path / "c.yaml"
    config.write_text("flags: {migStrategy: mixed}\n")
    assert "msgspec" in modules_loaded(["--config-file", str(config)])  # the file is checked with it
