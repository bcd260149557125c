"""Run settings: command line over environment over config file over default.

What each setting is (its type, default, flags, variables and config-file field) is declared once, in
``gfd.settings``, beside the ``ConfigError`` raised here; this module resolves them from argv, the
environment and the file.
Settings are a plain frozen dataclass checked by hand: importing this module or resolving settings loads
no parsing library; the config *file* is read by ``gfd.yamlfile`` (libyaml and msgspec), only when one is
given.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from gfd.settings import EXPIRY_INTERVALS, FILE_FIELDS, FLAGS, ConfigError, Flag, Settings
from gfd.sharing_config import SharingConfig

# The command line's own: Settings and ConfigError are imported from gfd.settings, never through here.
__all__ = ["build_parser", "load_settings"]

_DEFAULTS = Settings()
_FILE_FIELD_OF = {flag.name: where for where, flag in FILE_FIELDS.items()}  # name -> flags.gfd.oneshot ...


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
    for flag in FLAGS:
        if flag.is_bool:
            parser.add_argument(
                *flag.flags, dest=flag.name, nargs="?", const="true", metavar="BOOL", help=_help(flag)
            )
        else:
            parser.add_argument(*flag.flags, dest=flag.name, metavar=flag.metavar, help=_help(flag))
    return parser


def _help(flag: Flag) -> str:
    """The declared help, with the declared default and variables; argparse formats '%', hence the escape."""
    default = f" (default {flag.help_default})" if flag.help_default is not None else ""
    envs = ", ".join(f"${e}" for e in flag.env)
    return f"{flag.help}{default} [{envs}]".replace("%", "%%")


def go_style_flags(argv: Sequence[str]) -> list[str]:
    """NVIDIA GFD (Go) also takes long flags with one dash (``-oneshot``, ``-sleep-interval=5m``)."""
    long_names = {name[2:] for flag in FLAGS for name in flag.flags if name.startswith("--")} | {"version"}
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
    for flag in FLAGS:
        if flag.name in given:
            raw[flag.name] = (flag.flags[0], given[flag.name])
            continue
        for env in flag.env:
            value = environ.get(env)
            if value is None:
                continue
            # As NVIDIA's (urfave/cli) reads it, an empty boolean variable is false.
            if not value.strip() and flag.is_bool:
                value = "false"
            if not flag.empty_is_unset(value):
                raw[flag.name] = (f"${env}", value)
                break

    values: dict[str, Any] = {}
    unused: list[str] = []
    for flag in FLAGS:
        if flag.name in raw:
            source, text = raw[flag.name]
            value = _convert(flag, source, text)
            if flag.unused:
                unused.append(source)
            else:
                values[flag.name] = value
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
                where[name] = f"{config_file}: field {_FILE_FIELD_OF[name]}"
        if "device_discovery_strategy" in values:
            values["backend"] = _backend_from_strategy(where, values)
    _template_output(values, where)
    return _finish(values, sharing)


def _template_output(values: dict[str, Any], where: Mapping[str, str]) -> None:
    """A node template is one pass printed on standard output: never a daemon, and never into the feature
    file, which an output file from the environment or config file names (as in the DaemonSet)."""
    fmt = values.get("output_format", _DEFAULTS.output_format)
    if fmt == "feature-file":
        return
    source = where.get("output_file", "")
    if source.startswith("-") and values.get("output_file") is not None:
        raise ConfigError(
            f"{source} {values['output_file']}: --output-format {fmt} prints to standard output; "
            "redirect it (> FILE) instead"
        )
    values["output_file"] = None
    values["oneshot"] = True


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


def _convert(flag: Flag, where: str, text: str) -> Any:
    try:
        return flag.parse(text)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None


def _finish(values: dict[str, Any], sharing: SharingConfig | None) -> Settings:
    backend = values.get("backend", _DEFAULTS.backend)
    if backend == "mock" and values.get("mock_profile") is None:
        raise ConfigError("--backend mock needs --mock-profile FILE (or $GFD_MOCK_PROFILE)")
    if backend != "mock" and values.get("mock_profile") is not None:
        raise ConfigError(f"--mock-profile is only used with --backend mock (backend is {backend})")
    if "expiry" not in values:
        interval = values.get("sleep_interval", _DEFAULTS.sleep_interval)
        oneshot = values.get("oneshot", _DEFAULTS.oneshot)
        # A one-off job's labels are meant to stay; a daemon's must lapse when it dies.
        values["expiry"] = None if oneshot or interval is None else interval * EXPIRY_INTERVALS
    return Settings(**values, sharing=sharing)


def _from_config_file(path: Path) -> tuple[dict[str, Any], SharingConfig | None]:
    """The settings a device-plugin config file sets (already checked), by name, and its sharing section."""
    from gfd.plugin_config import PluginConfigError, load_plugin_config  # YAML and msgspec: only with a file

    try:
        config = load_plugin_config(path)
    except PluginConfigError as err:
        raise ConfigError(str(err)) from None
    return dict(config.flags), config.sharing
