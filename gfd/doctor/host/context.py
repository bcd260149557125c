"""What the host's layers share: the command line's inputs and the facts lower layers found, for the layers
above (layer 3's NVML probe is what layer 7 computes the expected labels from)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gfd.backends.host import PciGpu, with_machine_type
from gfd.inventory import Device, Inventory, JetsonFacts
from gfd.settings import Settings

MACHINE_TYPE_FILE = str(Settings().machine_type_file)  # the daemon's default, read below the host root


@dataclass
class Context:
    """Inputs from the command line plus facts lower layers found, for the layers above."""

    host_root: Path
    cuda: tuple[int, int] | None = None
    node: str | None = None
    kubeconfig: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    # filled in as the layers run
    tegra: Inventory | None = None  # the tegra backend's probe, on a Jetson only
    pci_gpus: list[PciGpu] = field(default_factory=list)
    kernel_version: str | None = None
    nvml: Inventory | None = None  # the NVML backend's probe, when NVML started
    nvidia_runtime_default: bool = False

    def path(self, rel: str) -> Path:
        return self.host_root / rel.lstrip("/")

    def shown(self, rel: str) -> str:
        """A path as the user should read it: host paths as on the host."""
        return "/" + rel.lstrip("/")

    @property
    def jetson(self) -> bool:
        return self.tegra is not None

    @property
    def jetson_facts(self) -> JetsonFacts | None:
        return self.tegra.jetson if self.tegra is not None else None

    @property
    def nvml_devices(self) -> tuple[Device, ...]:
        return self.nvml.devices if self.nvml is not None else ()

    @property
    def labelled(self) -> Inventory | None:
        """The inventory gfd labels on this host, as ``--backend auto`` chooses: a Jetson's tegra files,
        else NVML, with the machine type the daemon adds from the DMI product name."""
        probed = self.tegra if self.tegra is not None else self.nvml
        return None if probed is None else with_machine_type(probed, self.path(MACHINE_TYPE_FILE))

    @property
    def gpu_count(self) -> int:
        if self.nvml_devices:
            return len(self.nvml_devices)
        if self.jetson:
            return 1
        return len(self.pci_gpus)
