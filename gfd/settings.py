"""Every gfd setting, declared once: here, and nowhere else.

A setting is a field of ``Settings``: the annotation is its type, the field's default its default,
and ``flag(...)`` in its metadata its flags, its environment variables, its help and, where NVIDIA's
device-plugin config file has one, the file field that sets it (``flags.gfd.sleepInterval``).
``NVIDIA_FLAGS`` declares the flags of NVIDIA's GFD that set no field of their own. Everything else is
derived from ``FLAGS``, the two together: the command line, its help and the "(default ...)" there
(``gfd.config``), which file field sets which setting and how the file's flags section is read
(``gfd.plugin_config``), and the flag, variable or file field that every error message names.

The flags and variables are NVIDIA gpu-feature-discovery's, so an existing DaemonSet spec keeps
working; ours follow the same ``GFD_`` naming. Nothing here imports a parsing library (``gfd.config``
says why), so whatever reads settings (the daemon, the labelers, the doctor) imports ``Settings`` and
``ConfigError`` from here and leaves the command line to ``gfd.config``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, get_args

from gfd.choices import BackendChoice, DiscoveryStrategy, LabelSetName, MigStrategy, OutputFormat
from gfd.durations import parse_interval
from gfd.sharing_config import SharingConfig
from hostport import parse_address

DEFAULT_OUTPUT_FILE = "/etc/kubernetes/node-feature-discovery/source.d/gfd"
EXPIRY_INTERVALS = 3  # the default expiry: this many sleep intervals ahead
_TRUE = {"1", "t", "true", "y", "yes", "on"}
_FALSE = {"0", "f", "false", "n", "no", "off"}


class ConfigError(ValueError):
    """A bad flag, variable or config-file value; the message is one line naming where it came from."""


# --- value parsers: each takes the raw text and returns the typed value or raises ValueError ---


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_choice(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return value

    return parse


def parse_output(text: str) -> str | None:
    return None if text.strip() in ("", "-") else text


def parse_path(text: str) -> Path:
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


def shown(value: object) -> str:
    """A value as the flag takes it, for the help's "(default ...)"."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    return str(value)


@dataclass(frozen=True)
class Flag:
    """The flags, variables and file field of one setting, or of one of NVIDIA's field-less flags."""

    name: str  # the Settings field it sets; for NVIDIA_FLAGS, the name gfd.config knows it by
    flags: tuple[str, ...]
    env: tuple[str, ...]
    parse: Callable[[str], Any]  # raw text -> the value, or ValueError
    help: str
    default: Any = None  # None: unset, and no "(default ...)" unless shown_default says one
    shown_default: str | None = None  # for the help, where the value alone would not say it
    file: str | None = None  # the config-file field that sets it, e.g. flags.gfd.sleepInterval
    metavar: str | None = None
    unused: bool = False  # NVIDIA's, for its Kubernetes client: checked, then only named in the log

    @property
    def is_bool(self) -> bool:
        return self.parse is parse_bool

    @property
    def help_default(self) -> str | None:
        if self.shown_default is not None:
            return self.shown_default
        return None if self.default is None else shown(self.default)

    def empty_is_unset(self, text: str) -> bool:
        """An empty variable or file field counts as unset, except an output file: standard output."""
        return not text.strip() and self.parse is not parse_output

    def from_file(self, raw: object) -> Any:
        """A file field's value as NVIDIA's Go reads it: a boolean is a YAML boolean, a duration may be a
        bare number (nanoseconds), everything else is text, read as the flag reads it."""
        if self.is_bool:
            if not isinstance(raw, bool):
                raise ValueError(f"expected true or false, got {raw!r}")
            return raw
        if self.parse is parse_interval and isinstance(raw, int | float) and not isinstance(raw, bool):
            return parse_interval(raw)
        if not isinstance(raw, str):
            raise ValueError(f"expected a string, got {raw!r}")
        return self.parse(raw)


def flag(
    flags: str | tuple[str, ...],
    env: str | tuple[str, ...],
    parse: Callable[[str], Any],
    help: str,
    *,
    file: str | None = None,
    metavar: str | None = None,
    shown_default: str | None = None,
) -> dict[str, Flag]:
    """A Settings field's metadata: its Flag, which FLAGS completes with the field's name and default."""
    declared = Flag(
        name="",
        flags=(flags,) if isinstance(flags, str) else flags,
        env=(env,) if isinstance(env, str) else env,
        parse=parse,
        help=help,
        shown_default=shown_default,
        file=file,
        metavar=metavar,
    )
    return {"flag": declared}


_MIG = get_args(MigStrategy)
_BACKENDS = get_args(BackendChoice)
_LABEL_SETS = get_args(LabelSetName)
_FORMATS = get_args(OutputFormat)


# fmt: off
@dataclass(frozen=True)
class Settings:
    oneshot: bool = field(default=False, metadata=flag(
        "--oneshot", "GFD_ONESHOT", parse_bool, "label once and exit", file="flags.gfd.oneshot"))
    sleep_interval: timedelta | None = field(  # None: infinite (label once, then idle)
        default=timedelta(seconds=60), metadata=flag(
            "--sleep-interval", "GFD_SLEEP_INTERVAL", parse_interval, "time between passes, e.g. 60s, 5m, "
            "or 'infinite'", file="flags.gfd.sleepInterval", metavar="DURATION"))
    output_file: str | None = field(default=DEFAULT_OUTPUT_FILE, metadata=flag(  # None: standard output
        ("--output-file", "--output", "-o"), "GFD_OUTPUT_FILE", parse_output,
        "feature file to write; '-' or empty: stdout", file="flags.gfd.outputFile", metavar="FILE"))
    output_format: OutputFormat = field(default="feature-file", metadata=flag(
        "--output-format", "GFD_OUTPUT_FORMAT", parse_choice(_FORMATS),
        "feature-file: the NFD feature file; the others print one pass's labels as an autoscaler's node "
        "template on standard output, for scaling a pool from zero (docs/autoscaling.md)",
        metavar="|".join(_FORMATS)))
    mig_strategy: MigStrategy = field(default="none", metadata=flag(
        "--mig-strategy", ("GFD_MIG_STRATEGY", "MIG_STRATEGY"), parse_choice(_MIG),
        "how MIG devices are labelled", file="flags.migStrategy", metavar="|".join(_MIG)))
    label_set: LabelSetName = field(default="device-plugin", metadata=flag(
        "--label-set", "GFD_LABEL_SET", parse_choice(_LABEL_SETS),
        "which labels to write: device-plugin (NVIDIA GFD's) or dra (hardware facts only, for nodes whose "
        "GPUs a DRA driver allocates; docs/labels.md)", metavar="|".join(_LABEL_SETS)))
    fail_on_init_error: bool = field(default=True, metadata=flag(
        "--fail-on-init-error", ("GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"), parse_bool,
        "exit 1 when the first probe fails; false: do not fail (the daemon retries every interval, a "
        "oneshot run exits 0)", file="flags.failOnInitError"))
    no_timestamp: bool = field(default=False, metadata=flag(
        "--no-timestamp", "GFD_NO_TIMESTAMP", parse_bool,
        "accepted for compatibility: no timestamp label is written unless --timestamp",
        file="flags.gfd.noTimestamp"))
    machine_type_file: Path = field(default=Path("/sys/class/dmi/id/product_name"), metadata=flag(
        "--machine-type-file", "GFD_MACHINE_TYPE_FILE", parse_path, "file holding the machine type",
        file="flags.gfd.machineTypeFile", metavar="FILE"))
    config_file: Path | None = field(default=None, metadata=flag(
        "--config-file", ("GFD_CONFIG_FILE", "CONFIG_FILE"), parse_path,
        "NVIDIA device-plugin config file (flags and sharing)", metavar="FILE"))
    backend: BackendChoice = field(default="auto", metadata=flag(
        "--backend", "GFD_BACKEND", parse_choice(_BACKENDS), "where GPU facts come from",
        metavar="|".join(_BACKENDS)))
    mock_profile: Path | None = field(default=None, metadata=flag(
        "--mock-profile", "GFD_MOCK_PROFILE", parse_path, "machine profile YAML for --backend mock",
        metavar="FILE"))
    host_root: Path = field(default=Path("/"), metadata=flag(
        "--host-root", "GFD_HOST_ROOT", parse_path,
        "where the host's filesystem is mounted, for Jetson files", metavar="DIR"))
    timestamp: bool = field(default=False, metadata=flag(
        "--timestamp", "GFD_TIMESTAMP", parse_bool,
        "add the nvidia.com/gfd.timestamp label (costs a node update every pass)"))
    with_vgpu: bool = field(default=False, metadata=flag(
        "--with-vgpu", "GFD_WITH_VGPU", parse_bool, "detect vGPU (reads PCI config space, needs privilege)"))
    expiry: timedelta | None = field(default=None, metadata=flag(  # None: no expiry directive
        "--expiry", "GFD_EXPIRY", parse_interval, "how long written labels stay valid, or 'infinite'",
        metavar="DURATION", shown_default=f"{EXPIRY_INTERVALS} sleep intervals; none in oneshot mode"))
    metrics_address: tuple[str, int] | None = field(default=None, metadata=flag(
        "--metrics-address", "GFD_METRICS_ADDRESS", parse_address,
        "serve Prometheus metrics and /readyz on HOST:PORT", metavar="HOST:PORT", shown_default="off"))
    use_node_feature_api: bool = field(default=False, metadata=flag(  # gfd always writes the feature file
        "--use-node-feature-api", ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"), parse_bool,
        "accepted for compatibility: gfd has no Kubernetes identity, labels always go through the feature "
        "file and nfd-lite", file="flags.useNodeFeatureAPI"))
    driver_root: Path = field(default=Path("/driver-root"), metadata=flag(  # where NVML is looked for
        ("--driver-root-ctr-path", "--container-driver-root"),
        ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"), parse_path,
        "where the host's driver root is mounted; libnvidia-ml.so.1 is looked for below it first",
        file="flags.plugin.containerDriverRoot", metavar="DIR"))
    unused: tuple[str, ...] = ()  # NVIDIA's Kubernetes-client flags and variables given, which gfd needs not
    sharing: SharingConfig | None = None  # the config file's sharing section, handed to the labelers

    @property
    def label_timestamp(self) -> bool:
        return self.timestamp and not self.no_timestamp


_UNUSED = "accepted for compatibility, not needed: gfd has no Kubernetes identity"

# NVIDIA's flags that set no field of their own, with its names and variables, so its chart works unchanged.
NVIDIA_FLAGS: tuple[Flag, ...] = (
    Flag("device_discovery_strategy", ("--device-discovery-strategy",), ("DEVICE_DISCOVERY_STRATEGY",),
         parse_choice(get_args(DiscoveryStrategy)), "NVIDIA's name for --backend (vfio is not supported)",
         default="auto", file="flags.deviceDiscoveryStrategy", metavar="auto|nvml|tegra"),  # auto: as unset
    Flag("kubeconfig", ("--kubeconfig",), ("KUBECONFIG",), str, _UNUSED, metavar="FILE", unused=True),
    Flag("kube_api_qps", ("--kube-api-qps",), ("KUBE_API_QPS",), _number(float, "a number"), _UNUSED,
         metavar="QPS", unused=True),
    Flag("kube_api_burst", ("--kube-api-burst",), ("KUBE_API_BURST",), _number(int, "an integer"), _UNUSED,
         metavar="BURST", unused=True),
    Flag("namespace", ("--namespace",), ("NAMESPACE",), str, _UNUSED, metavar="NAME", unused=True),
    Flag("node_name", ("--node-name",), ("NODE_NAME",), str, _UNUSED, metavar="NAME", unused=True),
    Flag("pod_name", ("--pod-name",), ("POD_NAME",), str, _UNUSED, metavar="NAME", unused=True),
)
# fmt: on

FLAGS: tuple[Flag, ...] = (
    *(
        replace(f.metadata["flag"], name=f.name, default=f.default)
        for f in fields(Settings)
        if "flag" in f.metadata
    ),
    *NVIDIA_FLAGS,
)
FILE_FIELDS: dict[str, Flag] = {f.file: f for f in FLAGS if f.file is not None}  # e.g. flags.migStrategy
