"""The NVIDIA device-plugin config file parser."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gfd.durations import parse_interval
from gfd.plugin_config import PluginConfigError, load_plugin_config

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(PluginConfigError) as err:
        load_plugin_config(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_full_nvidia_config(tmp_path: Path) -> None:
    cfg = load_plugin_config(
        write(
            tmp_path,
            """
version: v1
flags:
  migStrategy: mixed
  failOnInitError: false
  plugin:                      # device-plugin only: ignored
    passDeviceSpecs: true
    deviceListStrategy: [envvar]
  gfd:
    oneshot: true
    noTimestamp: true
    sleepInterval: 1m30s
    outputFile: /tmp/gfd
    machineTypeFile: /sys/class/dmi/id/product_name
resources:
  gpus: [{pattern: "*", name: gpu}]
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
      - name: gpu
        replicas: 4
""",
        )
    )
    assert cfg.flags == {
        "mig_strategy": "mixed",
        "fail_on_init_error": False,
        "oneshot": True,
        "no_timestamp": True,
        "sleep_interval": timedelta(seconds=90),
        "output_file": "/tmp/gfd",
        "machine_type_file": Path("/sys/class/dmi/id/product_name"),
    }
    assert cfg.sharing is not None and cfg.sharing.time_slicing is not None
    ts = cfg.sharing.time_slicing
    assert ts.rename_by_default
    assert ts.resources[0].name == "nvidia.com/gpu"  # prefix added as NVIDIA does
    assert ts.resources[0].replicas == 4
    assert cfg.sharing.strategy() == "time-slicing"


@pytest.mark.parametrize(
    "text",
    [
        "version: v1\n",
        "flags:\n",
        "flags: {gfd: null, plugin: null}\n",
        "flags: {gfd: {sleepInterval: null, machineTypeFile: ''}, plugin: {containerDriverRoot: ''}}\n",
    ],
)
def test_unset_null_or_empty_fields_set_nothing(tmp_path: Path, text: str) -> None:
    cfg = load_plugin_config(write(tmp_path, text))
    assert cfg.sharing is None
    assert cfg.flags == {}


def test_an_empty_output_file_means_standard_output(tmp_path: Path) -> None:
    assert load_plugin_config(write(tmp_path, "flags: {gfd: {outputFile: ''}}\n")).flags == {
        "output_file": None
    }


def test_empty_file_and_json(tmp_path: Path) -> None:
    assert load_plugin_config(write(tmp_path, "")).sharing is None
    cfg = load_plugin_config(
        write(tmp_path, '{"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}')
    )
    assert cfg.sharing is not None and cfg.sharing.strategy() == "mps"


def test_shipped_sharing_examples_parse() -> None:
    for path in sorted((ROOT / "profiles" / "sharing").glob("*.yaml")):
        assert load_plugin_config(path).sharing is not None, path.name


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("version: v2\n", "field version"),
        ("flags: {migStrategy: double}\n", "field flags.migStrategy"),
        ("flags: {failOnInitError: maybe}\n", "field flags.failOnInitError"),
        ("flags: {gfd: {sleepInterval: soon}}\n", "field flags.gfd.sleepInterval"),
        ("flags: {gfd: {sleepInterval: -5s}}\n", "field flags.gfd.sleepInterval"),
        ("flags: {gfd: {sleepInterval: 0}}\n", "field flags.gfd.sleepInterval"),
        ("flags: {gfd: {sleepInterval: true}}\n", "field flags.gfd.sleepInterval"),
        ("flags: {gfd: {sleepInterval: .inf}}\n", "field flags.gfd.sleepInterval"),
        ("flags: {gfd: {oneshot: 'yes'}}\n", "field flags.gfd.oneshot"),
        ("flags: {gfd: {outputFile: 5}}\n", "field flags.gfd.outputFile"),
        ("flags: {deviceDiscoveryStrategy: cuda}\n", "field flags.deviceDiscoveryStrategy"),
        ("flags: {gfd: [oneshot]}\n", "field flags.gfd: expected a mapping"),
        ("flags: [gfd]\n", "field flags"),
        ("sharing: {timeSlicing: {}}\n", "field sharing.timeSlicing.resources"),
        ("sharing: {timeSlicing: {resources: []}}\n", "field sharing.timeSlicing.resources"),
        ("sharing: {mps: {resources: [{name: gpu}]}}\n", "field sharing.mps.resources.0.replicas"),
        (
            "sharing: {mps: {resources: [{name: gpu, replicas: 0}]}}\n",
            "field sharing.mps.resources.0.replicas",
        ),
        # NVIDIA refuses fewer than 2 replicas: one replica shares nothing.
        (
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1}]}}\n",
            "field sharing.timeSlicing.resources.0.replicas",
        ),
        # devices: 'all', a count above 0, or a list of indices / UUIDs; anything else is refused.
        (
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: some}]}}\n",
            "field sharing.timeSlicing.resources.0.devices",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: 0}]}}\n",
            "field sharing.timeSlicing.resources.0.devices",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: [0, GPU-nope]}]}}\n",
            "field sharing.timeSlicing.resources.0.devices",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: [-1]}]}}\n",
            "field sharing.timeSlicing.resources.0.devices",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: true}]}}\n",
            "field sharing.timeSlicing.resources.0.devices",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: $bad$, replicas: 2}]}}\n",
            "sharing.timeSlicing.resources.0.name",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, rename: A_B}]}}\n",
            "resources.0.rename",
        ),
        # A name ending in a newline (a YAML block scalar) is no resource name: `$` alone would pass it.
        (
            'sharing: {timeSlicing: {resources: [{name: "gpu\\n", replicas: 2}]}}\n',
            "sharing.timeSlicing.resources.0.name",
        ),
        ("- just\n- a list\n", "mapping"),
        ("flags: [\n", "not valid YAML"),
    ],
)
def test_errors_name_the_field(tmp_path: Path, text: str, where: str) -> None:
    assert where in error(tmp_path, text)


@pytest.mark.parametrize(
    "devices",
    [
        "all",
        "3",
        "[0, '1', '0:1', GPU-b1028956-cfa2-0990-bf4a-5da9abb51763]",
        "[MIG-b1028956-cfa2-0990-bf4a-5da9abb51763, MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0]",
    ],
)
def test_nvidias_device_forms_are_accepted(tmp_path: Path, devices: str) -> None:
    text = f"sharing: {{timeSlicing: {{resources: [{{name: gpu, replicas: 2, devices: {devices}}}]}}}}\n"
    cfg = load_plugin_config(write(tmp_path, text))
    assert cfg.sharing is not None and cfg.sharing.strategy() == "time-slicing"


@pytest.mark.parametrize("version", ['""', "null", "v1"])
def test_an_empty_version_means_v1_as_in_nvidias(tmp_path: Path, version: str) -> None:
    text = f"version: {version}\nflags: {{migStrategy: mixed}}\n"
    assert load_plugin_config(write(tmp_path, text)).flags == {"mig_strategy": "mixed"}


def test_nvidias_top_level_flags_are_read(tmp_path: Path) -> None:
    text = (
        "flags:\n  useNodeFeatureAPI: true\n  deviceDiscoveryStrategy: tegra\n"
        "  plugin: {containerDriverRoot: /host-driver}\n"
    )
    assert load_plugin_config(write(tmp_path, text)).flags == {
        "use_node_feature_api": True,
        "device_discovery_strategy": "tegra",
        "driver_root": Path("/host-driver"),
    }


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PluginConfigError, match="cannot read config file"):
        load_plugin_config(tmp_path / "absent.yaml")


def test_custom_rename_is_ignored_like_nvidia(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = load_plugin_config(
        write(
            tmp_path, "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, rename: gpu-shared}]}}\n"
        )
    )
    assert cfg.sharing is not None and cfg.sharing.time_slicing is not None
    assert not cfg.sharing.time_slicing.is_renamed("nvidia.com/gpu")
    assert "rename is not supported" in caplog.text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("60s", timedelta(seconds=60)),
        ("1m", timedelta(seconds=60)),
        ("1h30m", timedelta(seconds=5400)),
        ("1.5h", timedelta(seconds=5400)),
        ("1.5s", timedelta(seconds=1.5)),
        (".5s", timedelta(seconds=0.5)),
        ("500ms", timedelta(seconds=0.5)),
        ("250µs", timedelta(microseconds=250)),
        ("250us", timedelta(microseconds=250)),
        ("infinite", None),
        (" Infinite ", None),
        (60_000_000_000, timedelta(seconds=60)),  # a bare number: nanoseconds, as Go reads it
        (1.5e9, timedelta(seconds=1.5)),
    ],
)
def test_go_durations(value: str | int | float, expected: timedelta | None) -> None:
    assert parse_interval(value) == expected


@pytest.mark.parametrize("text", ["5", "soon", "1d", "2w", "1mm", "1y", "5s ago", ""])
def test_text_that_is_no_go_duration_is_refused(text: str) -> None:
    # As Go's time.ParseDuration: a number written as text needs its unit.
    with pytest.raises(ValueError, match="expected a Go duration"):
        parse_interval(text)


@pytest.mark.parametrize("value", ["0s", "-5s", 0, -1, 5])  # 5 nanoseconds is below what gfd can wait
def test_an_interval_of_zero_or_less_is_refused(value: str | int) -> None:
    with pytest.raises(ValueError, match=r"more than zero|under the shortest"):
        parse_interval(value)


def test_bare_number_sleep_interval_is_nanoseconds(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = load_plugin_config(write(tmp_path, "flags: {gfd: {sleepInterval: 60000000000}}\n"))
    assert cfg.flags == {"sleep_interval": timedelta(seconds=60)}
    assert caplog.text == ""
    cfg = load_plugin_config(write(tmp_path, "flags: {gfd: {sleepInterval: 60000}}\n"))  # meant 60s
    assert cfg.flags == {"sleep_interval": timedelta(microseconds=60)}
    assert "flags.gfd.sleepInterval: a bare number is nanoseconds (60000 = 6e-05s)" in caplog.text
