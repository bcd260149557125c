"""The tegra backend: a Jetson's GPU facts from files alone, with no NVML and no CUDA library.

On a Jetson the GPU is part of the SoC. JetPack 6's NVML names it "Orin (nvgpu)" and reports its
memory as not supported, and older JetPacks have no NVML at all, so on a Jetson these files are the
better source: the device tree (board and SoC), ``etc/nv_tegra_release`` (L4T release),
``/proc/meminfo`` (the GPU shares system RAM), the CUDA toolkit's version file and nvpmodel's
configuration and status (power mode). See docs/jetson.md.

Nothing here is fatal once the host is known to be a Jetson: a fact that cannot be read is left
unknown and explained in ``Inventory.warnings``, and the labels that can be known are still made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from gfd.backends import tegra_files as tf
from gfd.backends.errors import BackendError
from gfd.backends.host import kernel_module_version
from gfd.inventory import Device, Inventory, JetsonFacts

TEGRA_RELEASE = "etc/nv_tegra_release"
DT_MODEL = "proc/device-tree/model"
DT_COMPATIBLE = "proc/device-tree/compatible"
SOC0 = "sys/devices/soc0"
MEMINFO = "proc/meminfo"
CUDA_DIR = "usr/local/cuda"
NVPMODEL_CONF = "etc/nvpmodel.conf"
NVPMODEL_STATUS = "var/lib/nvpmodel/status"

# CUDA compute capability of each Jetson SoC's integrated GPU. Thor is sm_110 from CUDA 13 on.
SOC_COMPUTE: dict[str, tuple[int, int]] = {
    "tegra210": (5, 3),  # TX1, Nano (Maxwell)
    "tegra186": (6, 2),  # TX2 (Pascal)
    "tegra194": (7, 2),  # Xavier (Volta)
    "tegra234": (8, 7),  # Orin (Ampere)
    "tegra264": (11, 0),  # Thor (Blackwell)
}

# The product name when the board cannot be told apart, only its SoC.
SOC_PRODUCT: dict[str, str] = {
    "tegra210": "NVIDIA Jetson Tegra X1",
    "tegra186": "NVIDIA Jetson Tegra X2",
    "tegra194": "NVIDIA Jetson Xavier",
    "tegra234": "NVIDIA Jetson Orin",
    "tegra264": "NVIDIA Jetson Thor",
}

# sys/devices/soc0/soc_id holds the chip id in decimal; Tegra241 (Grace) is deliberately absent.
SOC_BY_CHIP_ID: dict[int, str] = {
    0x21: "tegra210",
    0x18: "tegra186",
    0x19: "tegra194",
    0x23: "tegra234",
    0x26: "tegra264",
}

# Module part numbers (the "p3767-0005" in the device-tree compatible list) -> module family.
# The module, not the carrier board, carries the GPU, so vendor carriers are named right too.
# A str applies to every SKU of that board id; a dict tells SKUs apart.
MODULES: dict[str, str | dict[str, str]] = {
    "p3834": "AGX Thor",
    "p3701": "AGX Orin",
    "p3767": {
        "0000": "Orin NX",
        "0001": "Orin NX",
        "0003": "Orin Nano",
        "0004": "Orin Nano",
        "0005": "Orin Nano",
    },
    "p2888": "AGX Xavier",
    "p3668": "Xavier NX",
    "p3310": "TX2",
    "p3489": {"0000": "TX2i", "0888": "TX2"},
    "p3636": "TX2 NX",
    "p2180": "TX1",
    "p3448": "Nano",
    "p3450": "Nano",  # the Nano developer kit as one part (module p3448 on carrier p3449)
}

# When the compatible list names no known module: words in the board model, most specific first.
MODEL_WORDS: tuple[tuple[str, str], ...] = (
    ("AGX Thor", "AGX Thor"),
    ("AGX Orin", "AGX Orin"),
    ("Orin NX", "Orin NX"),
    ("Orin Nano", "Orin Nano"),
    ("Xavier NX", "Xavier NX"),
    ("AGX Xavier", "AGX Xavier"),
    ("Jetson-AGX", "AGX Xavier"),  # the model string of an AGX Xavier on L4T R32
    ("TX2 NX", "TX2 NX"),
    ("TX2", "TX2"),
    ("TX1", "TX1"),
    ("Jetson Nano", "Nano"),
)

_SOC_COMPATIBLE = re.compile(r"^nvidia,(tegra\d+)$")
_PART = re.compile(r"\b(p\d{4})-(\d{4})\b")
_NOT_JETSON_SOCS = frozenset({"tegra241"})  # Grace: a server CPU, its GPUs are NVML's business

DT_HINT = (
    "mount the host's /proc/device-tree (or /sys/firmware/devicetree/base) read-only at "
    "<host-root>/proc/device-tree; see docs/jetson.md"
)


@lru_cache(maxsize=1)
def jetpack_table() -> dict[str, str]:
    """The shipped L4T -> JetPack table (gfd/data/l4t_jetpack.yaml)."""
    # Imported here: `--backend auto` asks is_jetson() on every host, and only a Jetson needs YAML.
    import yaml

    text = resources.files("gfd").joinpath("data/l4t_jetpack.yaml").read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    return {str(k): str(v) for k, v in doc["l4t_to_jetpack"].items()}


@lru_cache(maxsize=1)
def jetpack_checked() -> str:
    """When the L4T table was last compared with NVIDIA's pages (its ``checked`` date)."""
    import yaml

    text = resources.files("gfd").joinpath("data/l4t_jetpack.yaml").read_text(encoding="utf-8")
    return str(yaml.safe_load(text)["checked"])


def jetpack_for_l4t(l4t_version: str) -> str | None:
    return jetpack_table().get(l4t_version)


@dataclass
class _Findings:
    facts: JetsonFacts
    product: str
    compute: tuple[int, int] | None
    memory_mib: int | None
    cuda: int | None
    driver_version: str | None = None
    warnings: list[str] = field(default_factory=list)


def _soc_from_compatible(compatible: list[str]) -> str | None:
    for entry in compatible:
        match = _SOC_COMPATIBLE.fullmatch(entry)
        if match:
            return match.group(1)
    return None


def _soc_from_soc0(root: Path) -> str | None:
    if (tf.read_text(root, f"{SOC0}/family") or "").lower() != "tegra":
        return None
    soc_id = tf.read_text(root, f"{SOC0}/soc_id") or ""
    return SOC_BY_CHIP_ID.get(int(soc_id)) if soc_id.isdigit() else None


def is_jetson(host_root: Path) -> bool:
    """True when the files under ``host_root`` are those of a Jetson (cheap; reads three small files)."""
    release = tf.resolve_under(host_root, TEGRA_RELEASE)
    if release is not None and release.is_file():
        return True
    soc = _soc_from_compatible(tf.read_string_list(host_root, DT_COMPATIBLE) or [])
    if soc is not None and soc not in _NOT_JETSON_SOCS:
        return True
    return _soc_from_soc0(host_root) is not None


def _module_family(compatible: list[str]) -> str | None:
    # "carrier+module" comes first; look at the module half of each entry before the carrier half.
    halves = [half for entry in compatible for half in reversed(entry.split("+"))]
    for half in halves:
        for board, sku in _PART.findall(half):
            family = MODULES.get(board)
            if isinstance(family, dict):
                family = family.get(sku)
            if family is not None:
                return family
    return None


def _model_family(model: str | None) -> str | None:
    if not model:
        return None
    return next((family for word, family in MODEL_WORDS if word in model), None)


def _read_l4t(root: Path, warnings: list[str]) -> tuple[str | None, str | None]:
    text = tf.read_text(root, TEGRA_RELEASE)
    if text is None:
        warnings.append(f"{TEGRA_RELEASE} is missing or unreadable: L4T and JetPack versions unknown")
        return None, None
    l4t = tf.parse_l4t_release(text)
    if l4t is None:
        first = text.splitlines()[0][:80]
        warnings.append(f"{TEGRA_RELEASE}: cannot read the release from {first!r}: L4T version unknown")
        return None, None
    jetpack = jetpack_for_l4t(l4t)
    if jetpack is None:
        newest = max(jetpack_table(), key=_release)
        newer = (
            f"newer than the L4T-to-JetPack table (known up to L4T {newest}, checked {jetpack_checked()}; "
            "a newer gpu-labeller may know it)"
            if _release(l4t) > _release(newest)
            else "not in the L4T-to-JetPack table (gfd/data/l4t_jetpack.yaml)"
        )
        warnings.append(
            f"L4T {l4t} is {newer}: JetPack version unknown, the other Jetson labels are still written"
        )
    return l4t, jetpack


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def _read_cuda(root: Path) -> int | None:
    # The toolkit under /usr/local/cuda* is what JetPack installs; on a Jetson it matches the
    # CUDA version the BSP's driver supports (NVIDIA upgrades them together).
    dirs = [CUDA_DIR]
    local = tf.resolve_under(root, "usr/local")
    if local is not None and local.is_dir():
        versioned = sorted((p.name for p in local.glob("cuda-*")), key=_dir_version, reverse=True)
        dirs += [f"usr/local/{name}" for name in versioned]
    for rel in dirs:
        text = tf.read_text(root, f"{rel}/version.json")
        code = tf.parse_cuda_version_json(text) if text else None
        if code is None:
            text = tf.read_text(root, f"{rel}/version.txt")
            code = tf.parse_cuda_version_txt(text) if text else None
        if code is not None:
            return code
    return None


def _dir_version(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", name))


def _read_power_mode(root: Path, warnings: list[str]) -> str | None:
    conf = tf.read_text(root, NVPMODEL_CONF)
    if conf is None:
        warnings.append(f"{NVPMODEL_CONF} is missing or unreadable: power mode unknown")
        return None
    modes, default = tf.parse_nvpmodel_modes(conf)
    status = tf.read_text(root, NVPMODEL_STATUS)
    # Without a status file nvpmodel has never been told otherwise, so the default mode is in force.
    current = tf.parse_nvpmodel_status(status) if status else default
    if current is None:
        warnings.append(
            f"neither {NVPMODEL_STATUS} nor a PM_CONFIG DEFAULT in {NVPMODEL_CONF}: power mode unknown"
        )
        return None
    name = modes.get(current)
    if name is None:
        warnings.append(f"power mode {current} is not defined in {NVPMODEL_CONF}: power mode unknown")
    return name


def _collect(root: Path) -> _Findings:
    warnings: list[str] = []
    compatible = tf.read_string_list(root, DT_COMPATIBLE)
    model = tf.read_text(root, DT_MODEL)
    if compatible is None:
        warnings.append(f"{DT_COMPATIBLE} is not readable (masked in containers): using {SOC0}; {DT_HINT}")
        soc = _soc_from_soc0(root)
        model = model or tf.read_text(root, f"{SOC0}/machine")
    else:
        soc = _soc_from_compatible(compatible) or _soc_from_soc0(root)
    if model is None:
        warnings.append(f"board model unknown: neither {DT_MODEL} nor {SOC0}/machine is readable")

    compute = SOC_COMPUTE.get(soc) if soc else None
    if soc is None:
        warnings.append(
            "Jetson SoC unknown: no nvidia,tegra* entry in the device tree and no known soc0 chip id"
        )
    elif compute is None:
        warnings.append(f"SoC {soc} is not a known Jetson SoC: compute capability and GPU family unknown")

    family = _module_family(compatible or []) or _model_family(model)
    if family is not None:
        product = f"NVIDIA Jetson {family}"
    else:
        product = SOC_PRODUCT.get(soc or "", "NVIDIA Jetson")
        board = ", ".join(compatible[:1]) if compatible else model or "unknown board"
        warnings.append(f"Jetson board {board!r} is not a known module: GPU product named {product!r}")

    l4t, jetpack = _read_l4t(root, warnings)
    meminfo = tf.read_text(root, MEMINFO)
    memory = tf.parse_memtotal_mib(meminfo) if meminfo else None
    if memory is None:
        warnings.append(f"{MEMINFO} has no readable MemTotal: GPU memory unknown")
    cuda = _read_cuda(root)
    if cuda is None:
        warnings.append(
            f"no CUDA version under {CUDA_DIR}* (version.json or version.txt): CUDA labels omitted"
        )
    power = _read_power_mode(root, warnings)
    # Only Thor's OpenRM driver (nvidia.ko, R38 on) writes it; Orin, Xavier and Nano's nvgpu driver has none.
    driver = kernel_module_version(root)

    facts = JetsonFacts(model=model, soc=soc, l4t_version=l4t, jetpack_version=jetpack, power_mode=power)
    return _Findings(facts, product, compute, memory, cuda, driver, warnings)


class TegraBackend:
    """Fills an Inventory for a Jetson from files under ``host_root``."""

    name = "tegra"

    def __init__(self, host_root: Path = Path("/")) -> None:
        self.host_root = Path(host_root)

    def probe(self) -> Inventory:
        if not is_jetson(self.host_root):
            raise BackendError(
                "tegra",
                f"no Jetson under {self.host_root}: no {TEGRA_RELEASE}, no nvidia,tegra* in "
                f"{DT_COMPATIBLE} and no Tegra chip in {SOC0}",
            )
        found = _collect(self.host_root)
        device = Device(
            index=0,
            name=found.product,
            memory_mib=found.memory_mib,
            compute_capability=found.compute,
            pci_class=None,  # the integrated GPU is not a PCI device
        )
        return Inventory(
            backend="tegra",
            driver_version=found.driver_version,
            cuda_driver_version=found.cuda,
            devices=(device,),
            # A Jetson has no DMI product name; the board model is the machine type.
            machine=found.facts.model,
            jetson=found.facts,
            warnings=tuple(found.warnings),
        )
