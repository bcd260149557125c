"""The NVIDIA device-plugin config file (``--config-file``), as NVIDIA GFD reads it.

Only what gfd uses is read: ``version``, the ``flags`` fields that ``gfd.settings`` declares (each
setting's ``file``), and ``sharing.timeSlicing`` / ``sharing.mps``. Everything else a shared
device-plugin config may hold (the rest of ``flags``, ``resources``, ``imex``, ...) is ignored, as
NVIDIA GFD ignores it. Mistakes raise ``PluginConfigError``: one line, file and field path.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from gfd.durations import parse_interval
from gfd.machine_profile import MACHINE_PROFILE_FIELDS
from gfd.settings import FILE_FIELDS
from gfd.sharing_config import SHARED_RENAME_SUFFIX, ReplicatedResource, ReplicatedResources, SharingConfig
from gfd.yamlfile import quoted, read_mapping, shorten, to_struct
from k8slabels import prefix_problem

__all__ = ["PluginConfig", "PluginConfigError", "load_plugin_config"]

log = logging.getLogger("gfd.plugin_config")

RESOURCE_PREFIX = "nvidia.com"
MAX_RESOURCE_NAME = 63


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _is_device_ref(text: str) -> bool:
    """GPU index ``0``, MIG index ``0:1``, ``GPU-<uuid>``, ``MIG-<uuid>`` or ``MIG-GPU-<uuid>/<gi>/<ci>``."""
    parts = text.split(":")
    if all(p.isdigit() for p in parts) and len(parts) <= 2:
        return True
    if text.startswith("GPU-"):
        return _is_uuid(text[4:])
    if text.startswith("MIG-"):
        rest = text[4:]
        if _is_uuid(rest):
            return True
        gpu, _, indices = rest.partition("/")
        gi, _, ci = indices.partition("/")
        return gpu.startswith("GPU-") and _is_uuid(gpu[4:]) and gi.isdigit() and ci.isdigit()
    return False


class PluginConfigError(ValueError):
    """The config file could not be used; the message is one line with file and field path."""


@dataclass(frozen=True)
class PluginConfig:
    flags: Mapping[str, Any]  # Settings field -> value, for each declared file field the file sets
    sharing: SharingConfig | None  # None: the file has no sharing section


class _Section(msgspec.Struct, frozen=True):
    """Unknown keys are ignored: one file is shared with the device plugin, which has many more."""


class _Resource(_Section, frozen=True):
    name: str
    # NVIDIA refuses a file that replicates a resource fewer than 2 times.
    replicas: Annotated[int, Meta(ge=2)]
    rename: str | None = None
    devices: str | int | list[int | str] = "all"


class _Replicated(_Section, frozen=True):
    resources: Annotated[list[_Resource], Meta(min_length=1)]
    renameByDefault: bool = False
    failRequestsGreaterThanOne: bool = False  # checked, unused: it governs allocation, not labels


class _Sharing(_Section, frozen=True):
    timeSlicing: _Replicated | None = None
    mps: _Replicated | None = None


class _Config(_Section, frozen=True):
    version: str | None = "v1"  # empty or null means v1, as NVIDIA reads it
    flags: dict[str, Any] | None = None  # read as gfd.settings declares its fields, by _flags
    sharing: _Sharing | None = None


def _devices_problem(value: str | int | list[int | str]) -> str | None:
    """NVIDIA's forms: ``all``, a count above 0, or a list of GPU indices, MIG indices or UUIDs."""
    if isinstance(value, str):
        wrong = f"expected 'all', a count or a list of devices, got {quoted(value)}"
        return None if value == "all" else wrong
    if isinstance(value, int):
        return None if value > 0 else f"a count of devices must be more than 0, got {value}"
    for item in value:
        if item < 0 if isinstance(item, int) else not _is_device_ref(item):
            return f"{quoted(item)} is no GPU index, MIG index (GPU:MIG), or GPU-/MIG- UUID"
    return None


def load_plugin_config(path: str | Path) -> PluginConfig:
    """Read and check a device-plugin config file (YAML or JSON)."""
    path = Path(path)
    data = read_mapping(path, PluginConfigError, "config file")
    model = to_struct(path, data, _Config, PluginConfigError)
    if model.flags is None and model.sharing is None and {str(key) for key in data} & MACHINE_PROFILE_FIELDS:
        raise PluginConfigError(
            f"{path}: this is a machine profile (for --backend mock --mock-profile), expected NVIDIA's "
            "device-plugin config file (version, flags, sharing)"
        )
    if model.version not in (None, "", "v1"):
        version = quoted(model.version)
        raise PluginConfigError(f"{path}: field version: unknown version {version}, expected 'v1'")
    return PluginConfig(flags=_flags(path, model.flags), sharing=_sharing(path, model.sharing))


def _flags(path: Path, section: dict[str, Any] | None) -> dict[str, Any]:
    """The settings the flags section sets: each declared file field there, read as its flag is."""
    found: dict[str, Any] = {}
    for where, flag in FILE_FIELDS.items():
        raw = _field(path, {"flags": section}, where)
        if raw is None or (isinstance(raw, str) and flag.empty_is_unset(raw)):
            continue  # as an empty variable is
        if isinstance(raw, list | dict):  # refused here, quoted briefly: from_file would print all of it
            expected = "true or false" if flag.is_bool else "a string"
            raise PluginConfigError(f"{path}: field {where}: expected {expected}, got {quoted(raw)}")
        try:
            found[flag.name] = value = flag.from_file(raw)
        except ValueError as err:
            raise PluginConfigError(f"{path}: field {where}: {shorten(str(err))}") from None
        if flag.parse is parse_interval and not isinstance(raw, str) and value < timedelta(seconds=1):
            log.warning(
                "%s: %s: a bare number is nanoseconds (%s = %gs); write '60s' for a minute",
                path,
                where,
                quoted(raw),
                value.total_seconds(),
            )
    return found


def _field(path: Path, document: dict[str, Any], where: str) -> object:
    """The value at a dotted field path such as ``flags.gfd.sleepInterval``; None where it is absent."""
    value: object = document
    keys = where.split(".")
    for depth, key in enumerate(keys):
        if value is None:
            return None
        if not isinstance(value, dict):
            above = ".".join(keys[:depth])
            raise PluginConfigError(f"{path}: field {above}: expected a mapping, got {type(value).__name__}")
        value = value.get(key)
    return value


def resource_name(path: Path, where: str, raw: str) -> str:
    """NVIDIA's rule: add ``nvidia.com/`` unless present; the rest must be a DNS subdomain, 63 in all."""
    name = raw if raw.startswith(RESOURCE_PREFIX + "/") else f"{RESOURCE_PREFIX}/{raw}"
    if len(name) > MAX_RESOURCE_NAME:
        shown = quoted(name)
        raise PluginConfigError(f"{path}: field {where}: resource name {shown} is longer than 63 characters")
    if prefix_problem(name.split("/", 1)[1]) is not None:  # the same rule as a label key's prefix
        raise PluginConfigError(
            f"{path}: field {where}: {quoted(raw)} is no valid resource name "
            "(lowercase letters, digits, '-', '.')"
        )
    return name


def _replicated(path: Path, where: str, section: _Replicated) -> ReplicatedResources:
    resources = []
    for i, entry in enumerate(section.resources):
        here = f"{where}.resources.{i}"
        if problem := _devices_problem(entry.devices):
            raise PluginConfigError(f"{path}: field {here}.devices: {problem}")
        name = resource_name(path, f"{here}.name", entry.name)
        rename = resource_name(path, f"{here}.rename", entry.rename) if entry.rename is not None else None
        effective = name + SHARED_RENAME_SUFFIX if section.renameByDefault else None
        if rename is not None and rename != effective:
            # Same as NVIDIA GFD, which turns custom renames off.
            log.warning("%s: %s.rename is not supported and is ignored; renameByDefault decides", path, here)
        if entry.devices != "all":
            log.warning("%s: %s.devices is not supported and is ignored; all devices are shared", path, here)
        resources.append(ReplicatedResource(name=name, replicas=entry.replicas))
    return ReplicatedResources(
        resources=tuple(resources),
        rename_by_default=section.renameByDefault,
    )


def _sharing(path: Path, sharing: _Sharing | None) -> SharingConfig | None:
    if sharing is None or (sharing.timeSlicing is None and sharing.mps is None):
        return None
    time_slicing = (
        _replicated(path, "sharing.timeSlicing", sharing.timeSlicing) if sharing.timeSlicing else None
    )
    mps = _replicated(path, "sharing.mps", sharing.mps) if sharing.mps else None
    if time_slicing is not None and mps is not None:
        log.warning("%s: both sharing.timeSlicing and sharing.mps are set; MPS takes precedence", path)
    return SharingConfig(time_slicing=time_slicing, mps=mps)
