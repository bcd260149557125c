"""The per-resource label block NVIDIA writes for ``nvidia.com/gpu`` and ``nvidia.com/mig-<profile>``.

Every resource gets ``<resource>.product``, ``.count``, ``.replicas`` and
``.sharing-strategy``; MIG resources add their attributes (memory, slices,
engines). Full GPUs add memory and architecture in ``device.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gfd.inventory import MigDevice
from gfd.labels import sanitize, sharing
from gfd.labels.common import Labels
from gfd.sharing_config import SharingConfig


@dataclass(frozen=True)
class ResourceKeys:
    """The keys of the block every resource gets."""

    product: str
    count: str
    replicas: str
    sharing_strategy: str


def keys(resource: str) -> ResourceKeys:
    """``keys("nvidia.com/gpu").count`` is ``nvidia.com/gpu.count``."""
    return ResourceKeys(
        f"{resource}.product", f"{resource}.count", f"{resource}.replicas", f"{resource}.sharing-strategy"
    )


def base(
    resource: str, count: int, model: str, mig_profile: str | None, config: SharingConfig | None
) -> Labels:
    key = keys(resource)
    return {
        key.product: sanitize.product(model, mig_profile, sharing.shows_shared(config, resource)),
        key.count: str(count),
        key.replicas: str(sharing.replicas(config, resource)),
        key.sharing_strategy: sharing.strategy(config, resource),
    }


def mig_attributes(resource: str, mig: MigDevice) -> Labels:
    attributes = {
        "memory": mig.memory_mib,
        "multiprocessors": mig.multiprocessors,
        "slices.gi": mig.gi_slices,
        "slices.ci": mig.ci_slices,
        "engines.copy": mig.copy_engines,
        "engines.decoder": mig.decoders,
        "engines.encoder": mig.encoders,
        "engines.jpeg": mig.jpegs,
        "engines.ofa": mig.ofas,
    }
    return {f"{resource}.{name}": str(number) for name, number in attributes.items()}
