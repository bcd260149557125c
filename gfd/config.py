"""Run settings: command line over environment over config file over default.

The flags and environment variables are NVIDIA gpu-feature-discovery's, so an
existing DaemonSet spec keeps working; ours follow the same ``GFD_`` naming.
Settings are a plain frozen dataclass checked by hand rather than a pydantic
model: pydantic alone costs about 15 MiB of resident memory, which would blow
the daemon's memory budget on every node (the config *file* is still parsed
with pydantic, only when one is given).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn, get_args

from gfd.choices import BackendChoice, DiscoveryStrategy, MigStrategy
from gfd.sharing_config import SharingConfig
from hostport import parse_address

DEFAULT_OUTPUT_FILE = "/etc/kubernetes/node-feature-discovery/source.d/gfd"
DEFAULT_MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"
DEFAULT_DRIVER_ROOT = "/driver-root"  # NVIDIA's default container path of the host's driver root
DEFAULT_SLEEP_INTERVAL = timedelta(seconds=60)
EXPIRY_INTERVALS = 3  # default expiry: this many sleep intervals ahead
_TRUE = {"1", "t", "true", "y", "yes", "on"}
_FALSE = {"0", "f", "false", "n", "no", "off"}


class ConfigError(ValueError):
    """A bad flag, variable or config-file value; the message is one line naming where it came from."""


@dataclass(frozen=True)
class Settings:
    oneshot: bool = False
    sleep_interval: timedelta | None = DEFAULT_SLEEP_INTERVAL  # None: infinite (label once, then idle)
    output_file: str | None = DEFAULT_OUTPUT_FILE  # None: standard output
    mig_strategy: MigStrategy = "none"
    fail_on_init_error: bool = True
    no_timestamp: bool = False
    machine_type_file: Path = Path(DEFAULT_MACHINE_TYPE_FILE)
    config_file: Path | None = None
    backend: BackendChoice = "auto"
    mock_profile: Path | None = None
    host_root: Path = Path("/")
    timestamp: bool = False
    with_vgpu: bool = False
    expiry: timedelta | None = None  # None: no expiry directive
    metrics_address: tuple[str, int] | None = None
    use_node_feature_api: bool = False  # accepted; gfd always writes the feature file
    driver_root: Path = Path(DEFAULT_DRIVER_ROOT)  # where the NVML backend looks for libnvidia-ml.so.1
    unused: tuple[str, ...] = ()  # NVIDIA's Kubernetes-client flags and variables given, which gfd needs not
    sharing: SharingConfig | None = None  # the config file's sharing section, handed to the labelers

    @property
    def label_timestamp(self) -> bool:
        return self.timestamp and not self.no_timestamp


# --- value parsers: each takes the raw text and returns the typed value or raises ValueError ---


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_duration(text: str) -> timedelta | None:
    """A Go-style duration such as ``60s``, ``1m30s``; ``infinite`` gives None."""
    from gfd.durations import parse_go_duration  # durationpy: small, but only needed for a duration

    value = text.strip()
    if value.lower() == "infinite":
        return None
    try:
        delta = parse_go_duration(value)
    except ValueError:
        expected = "a duration such as 60s, 5m or 1h30m or 'infinite'"
        raise ValueError(f"expected {expected}, got {text!r}") from None
    if delta <= timedelta(0):
        raise ValueError(f"must be more than zero, got {text!r}")
    return delta


def parse_choice(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return value

    return parse


def parse_output(text: str) -> str | None:
    return None if text.strip() in ("", "-") else text


def _path(text: str) -> Path:
    if not text.strip():
        raise ValueError("expected a path, got an empty value")
    return Path(text)


def _number(kind: Callable[[str], Any], expected: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return kind(text.strip())
        except ValueError:
            raise ValueError(f"expected {expected}, got {text!r}") from None

    return parse


@dataclass(frozen=True)
class _Option:
    name: str  # Settings field
    flags: tuple[str, ...]
    env: tuple[str, ...]
    parse: Callable[[str], Any]
    help: str
    is_bool: bool = False
    metavar: str | None = None
    unused: bool = False  # NVIDIA's, for its Kubernetes client: checked, then only named in the log


_UNUSED_HELP = "accepted for compatibility, not needed: gfd has no Kubernetes identity"
_EXPIRY_HELP = (
    f"how long written labels stay valid, or 'infinite' (default {EXPIRY_INTERVALS} sleep intervals; "
    "none in oneshot mode)"
)

# fmt: off
OPTIONS: tuple[_Option, ...] = (
    _Option("oneshot", ("--oneshot",), ("GFD_ONESHOT",), parse_bool, "label once and exit", is_bool=True),
    _Option("sleep_interval", ("--sleep-interval",), ("GFD_SLEEP_INTERVAL",), parse_duration,
            "time between passes, e.g. 60s, 5m, or 'infinite' (default 60s)", metavar="DURATION"),
    _Option("output_file", ("--output-file", "--output", "-o"), ("GFD_OUTPUT_FILE",), parse_output,
            f"feature file to write; '-' or empty: stdout (default {DEFAULT_OUTPUT_FILE})", metavar="FILE"),
    _Option("mig_strategy", ("--mig-strategy",), ("GFD_MIG_STRATEGY", "MIG_STRATEGY"),
            parse_choice(get_args(MigStrategy)), "how MIG devices are labelled (default none)",
            metavar="|".join(get_args(MigStrategy))),
    _Option("fail_on_init_error", ("--fail-on-init-error",), ("GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"),
            parse_bool, "exit 1 when the first probe fails; false: do not fail (the daemon retries every "
            "interval, a oneshot run exits 0) (default true)", is_bool=True),
    _Option("no_timestamp", ("--no-timestamp",), ("GFD_NO_TIMESTAMP",), parse_bool,
            "accepted for compatibility: no timestamp label is written unless --timestamp", is_bool=True),
    _Option("machine_type_file", ("--machine-type-file",), ("GFD_MACHINE_TYPE_FILE",), _path,
            f"file holding the machine type (default {DEFAULT_MACHINE_TYPE_FILE})", metavar="FILE"),
    _Option("config_file", ("--config-file",), ("GFD_CONFIG_FILE", "CONFIG_FILE"), _path,
            "NVIDIA device-plugin config file (flags and sharing)", metavar="FILE"),
    _Option("backend", ("--backend",), ("GFD_BACKEND",), parse_choice(get_args(BackendChoice)),
            "where GPU facts come from (default auto)", metavar="|".join(get_args(BackendChoice))),
    _Option("mock_profile", ("--mock-profile",), ("GFD_MOCK_PROFILE",), _path,
            "machine profile YAML for --backend mock", metavar="FILE"),
    _Option("host_root", ("--host-root",), ("GFD_HOST_ROOT",), _path,
            "where the host's filesystem is mounted, for Jetson files (default /)", metavar="DIR"),
    _Option("timestamp", ("--timestamp",), ("GFD_TIMESTAMP",), parse_bool,
            "add the nvidia.com/gfd.timestamp label (costs a node update every pass)", is_bool=True),
    _Option("with_vgpu", ("--with-vgpu",), ("GFD_WITH_VGPU",), parse_bool,
            "detect vGPU (reads PCI config space, needs privilege)", is_bool=True),
    _Option("expiry", ("--expiry",), ("GFD_EXPIRY",), parse_duration, _EXPIRY_HELP, metavar="DURATION"),
    _Option("metrics_address", ("--metrics-address",), ("GFD_METRICS_ADDRESS",), parse_address,
            "serve Prometheus metrics on HOST:PORT (default: off)", metavar="HOST:PORT"),
    # NVIDIA's flags: the same names and variables, so its chart's args and env work unchanged.
    _Option("use_node_feature_api", ("--use-node-feature-api",),
            ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"), parse_bool,
            "accepted for compatibility: gfd has no Kubernetes identity, labels always go through the "
            "feature file and nfd-lite", is_bool=True),
    _Option("device_discovery_strategy", ("--device-discovery-strategy",), ("DEVICE_DISCOVERY_STRATEGY",),
            parse_choice(get_args(DiscoveryStrategy)), "NVIDIA's name for --backend (vfio is not "
            "supported)", metavar="auto|nvml|tegra"),
    _Option("driver_root", ("--driver-root-ctr-path", "--container-driver-root"),
            ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"), _path,
            f"where the host's driver root is mounted; libnvidia-ml.so.1 is looked for below it first "
            f"(default {DEFAULT_DRIVER_ROOT})", metavar="DIR"),
    _Option("kubeconfig", ("--kubeconfig",), ("KUBECONFIG",), str, _UNUSED_HELP, metavar="FILE", unused=True),
    _Option("kube_api_qps", ("--kube-api-qps",), ("KUBE_API_QPS",), _number(float, "a number"), _UNUSED_HELP,
            metavar="QPS", unused=True),
    _Option("kube_api_burst", ("--kube-api-burst",), ("KUBE_API_BURST",), _number(int, "an integer"),
            _UNUSED_HELP, metavar="BURST", unused=True),
    _Option("namespace", ("--namespace",), ("NAMESPACE",), str, _UNUSED_HELP, metavar="NAME", unused=True),
    _Option("node_name", ("--node-name",), ("NODE_NAME",), str, _UNUSED_HELP, metavar="NAME", unused=True),
    _Option("pod_name", ("--pod-name",), ("POD_NAME",), str, _UNUSED_HELP, metavar="NAME", unused=True),
)
# fmt: on


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gfd",
        usage="gfd [options]\n       gfd doctor [doctor options]   (gfd doctor --help)",
        description="Find this node's NVIDIA GPUs and write them as node labels into an NFD feature file. "
        "'gfd doctor' explains what is missing when no labels appear.",
        argument_default=argparse.SUPPRESS,
    )
    from gfd import __version__

    parser.add_argument("--version", "-v", action="version", version=f"gfd {__version__}")
    for opt in OPTIONS:
        envs = ", ".join(f"${e}" for e in opt.env)
        if opt.is_bool:
            parser.add_argument(
                *opt.flags,
                dest=opt.name,
                nargs="?",
                const="true",
                metavar="BOOL",
                help=f"{opt.help} [{envs}]",
            )
        else:
            parser.add_argument(*opt.flags, dest=opt.name, metavar=opt.metavar, help=f"{opt.help} [{envs}]")
    return parser


def go_style_flags(argv: Sequence[str]) -> list[str]:
    """NVIDIA GFD (Go) also takes long flags with one dash (``-oneshot``, ``-sleep-interval=5m``)."""
    long_names = {flag[2:] for opt in OPTIONS for flag in opt.flags if flag.startswith("--")} | {"version"}
    out = []
    for arg in argv:
        if arg.startswith("-") and not arg.startswith("--") and arg[1:].partition("=")[0] in long_names:
            arg = "-" + arg
        out.append(arg)
    return out


def load_settings(argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
    """Resolve every setting; raise ConfigError naming the flag, variable or file field at fault."""
    given = vars(build_parser().parse_args(go_style_flags(argv)))
    raw: dict[str, tuple[str, Any]] = {}  # name -> (where it came from, raw text)
    for opt in OPTIONS:
        if opt.name in given:
            raw[opt.name] = (opt.flags[0], given[opt.name])
            continue
        for env in opt.env:
            value = environ.get(env)
            if value is None:
                continue
            # An empty variable counts as unset, except as NVIDIA's (urfave/cli) reads it: an empty
            # boolean is false and an empty output file means standard output.
            if not value.strip() and opt.is_bool:
                value = "false"
            if value.strip() or opt.name == "output_file":
                raw[opt.name] = (f"${env}", value)
                break

    values: dict[str, Any] = {}
    unused: list[str] = []
    for opt in OPTIONS:
        if opt.name in raw:
            source, text = raw[opt.name]
            value = _convert(opt, source, text)
            if opt.unused:
                unused.append(source)
            else:
                values[opt.name] = value
    values["unused"] = tuple(unused)
    where = {name: source for name, (source, _) in raw.items()}

    if "device_discovery_strategy" in values:
        values["backend"] = _backend_from_strategy(where, values)

    sharing = None
    config_file = values.get("config_file")
    if config_file is not None:
        file_values, sharing = _from_config_file(config_file)
        if "backend" in values:
            file_values.pop("device_discovery_strategy", None)  # the command line or environment chose
        for name, value in file_values.items():
            if name not in values:
                values[name] = value
                where[name] = f"{config_file}: field {_FILE_FIELDS.get(name, name)}"
        if "device_discovery_strategy" in values:
            values["backend"] = _backend_from_strategy(where, values)
    return _finish(values, sharing)


def _backend_from_strategy(where: Mapping[str, str], values: dict[str, Any]) -> str:
    """NVIDIA's --device-discovery-strategy names our backends; vfio has no counterpart here."""
    strategy = values.pop("device_discovery_strategy")
    source = where["device_discovery_strategy"]
    if strategy == "vfio":
        raise ConfigError(
            f"{source}: vfio (GPUs bound to vfio-pci for virtual machines) is not supported by gfd, which "
            "labels GPUs a driver on this node manages; use auto, nvml or tegra"
        )
    backend = values.get("backend", strategy)
    if strategy == "auto":
        return str(backend)  # no preference: an explicit --backend stands
    if backend not in (strategy, "auto"):
        raise ConfigError(f"{source} {strategy} contradicts {where['backend']} {backend}; give one of them")
    return str(strategy)


def _convert(opt: _Option, where: str, text: str) -> Any:
    try:
        return opt.parse(text)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None


def _finish(values: dict[str, Any], sharing: SharingConfig | None) -> Settings:
    backend = values.get("backend", "auto")
    if backend == "mock" and values.get("mock_profile") is None:
        raise ConfigError("--backend mock needs --mock-profile FILE (or $GFD_MOCK_PROFILE)")
    if backend != "mock" and values.get("mock_profile") is not None:
        raise ConfigError(f"--mock-profile is only used with --backend mock (backend is {backend})")
    values.setdefault("sleep_interval", DEFAULT_SLEEP_INTERVAL)
    if "expiry" not in values:
        interval = values["sleep_interval"]
        oneshot = values.get("oneshot", False)
        # A one-off job's labels are meant to stay; a daemon's must lapse when it dies.
        values["expiry"] = None if oneshot or interval is None else interval * EXPIRY_INTERVALS
    return Settings(**values, sharing=sharing)


# Settings taken from a device-plugin config file as they are, and the file field each comes from.
_FILE_FIELDS = {
    "mig_strategy": "flags.migStrategy",
    "fail_on_init_error": "flags.failOnInitError",
    "use_node_feature_api": "flags.useNodeFeatureAPI",
    "device_discovery_strategy": "flags.deviceDiscoveryStrategy",
    "oneshot": "flags.gfd.oneshot",
    "no_timestamp": "flags.gfd.noTimestamp",
    "sleep_interval": "flags.gfd.sleepInterval",
    "output_file": "flags.gfd.outputFile",
    "machine_type_file": "flags.gfd.machineTypeFile",
    "driver_root": "flags.plugin.containerDriverRoot",
}


_AS_WRITTEN = frozenset(_FILE_FIELDS) - {"sleep_interval", "output_file", "machine_type_file", "driver_root"}


def _from_config_file(path: Path) -> tuple[dict[str, Any], SharingConfig | None]:
    """The flags a device-plugin config file sets (already checked by its parser), and its sharing section."""
    import math

    from gfd.plugin_config import PluginConfigError, load_plugin_config

    try:
        config = load_plugin_config(path)
    except PluginConfigError as err:
        raise ConfigError(str(err)) from None
    flags = config.flags
    found: dict[str, Any] = {}
    for name in _FILE_FIELDS:
        value = getattr(flags, name) if name in _AS_WRITTEN else None
        if value is not None:
            found[name] = value
    if flags.sleep_interval is not None:
        seconds = flags.sleep_interval
        found["sleep_interval"] = None if math.isinf(seconds) else timedelta(seconds=seconds)
    if flags.output_file is not None:
        found["output_file"] = parse_output(flags.output_file)
    if flags.machine_type_file:
        found["machine_type_file"] = Path(flags.machine_type_file)
    if flags.container_driver_root:
        found["driver_root"] = Path(flags.container_driver_root)
    return found, config.sharing
