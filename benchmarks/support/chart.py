"""How the chart runs each program (charts/gpu-labeller/templates/daemonset.yaml with values.yaml's
defaults), for the benchmarks to run them the same way. Paths are the benchmark's own; the metrics
endpoints listen on a free loopback port instead of the chart's 0.0.0.0:9400 and :9401 (the same code,
nothing exposed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.ports import low_port

# values.yaml: nfdLite.allowPrefixes
ALLOW_PREFIXES = ("nvidia.com/", "feature.node.kubernetes.io/")
# The admission policy's release-scoped name the chart passes (release "gpu-labeller"), which is also
# the name of rbac/'s policy, the one the benchmarks apply.
ADMISSION_POLICY = "gpu-labeller-nfd-lite"


def gfd_args(
    *, output: Path, mig_strategy: str, machine_type_file: Path, sleep_interval: str, backend: str = "auto"
) -> list[str]:
    """gfd's arguments; a sharing config, when the chart has one, is added by the caller."""
    return [
        f"--sleep-interval={sleep_interval}",
        f"--output-file={output}",
        f"--mig-strategy={mig_strategy}",
        f"--backend={backend}",
        "--fail-on-init-error=false",
        f"--machine-type-file={machine_type_file}",
        f"--metrics-address=127.0.0.1:{low_port()}",
    ]


GFD_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}


def nfd_lite_args(directories: Sequence[Path]) -> list[str]:
    """nfd-lite's arguments: in the hostPath mode, two directories (source.d, where gfd writes, and
    features.d); caps at their defaults (the chart sets none)."""
    args = [f"--features-dir={d}" for d in directories]
    args += [f"--allow-prefix={p}" for p in ALLOW_PREFIXES]
    args.append(f"--metrics-address=127.0.0.1:{low_port()}")
    return args


def nfd_lite_env(node: str) -> dict[str, str]:
    return {"NODE_NAME": node, "NFD_LITE_ADMISSION_POLICY": ADMISSION_POLICY}
