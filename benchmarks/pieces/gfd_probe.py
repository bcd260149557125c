"""CPU time and NVML calls per GPU of one gfd probe + label pass (a benchmark, run on demand).

Runs the NVML backend in this process over the real pynvml bindings and the fake NVML library of the
tests (tests/fakes/fake_nvml.py, which serves the tests and this piece), then builds the labels, for
machines of 1 and 8 A100 GPUs with every GPU in MIG mode (7x 1g.5gb each), under MIG strategies "single"
and "mixed", and for a machine of 8 whole H100 GPUs: the median CPU time of a pass per GPU over many
passes, and how many NVML C calls one pass makes per GPU (target: at most 5 ms of CPU per GPU). It
measures the code, not the installation: the sources are imported from the working tree, by the
interpreter that runs the benchmarks.

The fake answers in microseconds, so the figures are the bindings' and our own cost; a real driver adds
its own latency per call, which is why the call count is shown too.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.support.measure import Figure
from gfd.backends.nvml import NvmlBackend
from gfd.labels import LabelOptions, build_labels
from gfd.machine_profile import MachineProfile, load_machine_profile
from tests.fakes.fake_nvml import fake_nvml_installed

TARGET_MS_PER_GPU = 5.0

_SLICE = {
    "profile": "1g.5gb",
    "memory_mib": 4864,
    "multiprocessors": 14,
    "gi_slices": 1,
    "ci_slices": 1,
    "copy_engines": 1,
}


def a100_mig(n: int) -> MachineProfile:
    gpu = {
        "name": "NVIDIA A100-SXM4-40GB",
        "memory_mib": 40960,
        "compute_capability": "8.0",
        "pci_class": "0x030200",
        "mig": {"enabled": True, "devices": [_SLICE] * 7},
    }
    return _machine("DGX A100", [gpu] * n)


def h100_whole(n: int) -> MachineProfile:
    gpu = {
        "name": "NVIDIA H100 80GB HBM3",
        "memory_mib": 81559,
        "compute_capability": "9.0",
        "pci_class": "0x030200",
        "mig": {"enabled": False},
        "clique": "7f3e5c1a-2b4d-4e6f-8a9b-0c1d2e3f4a5b.1",
    }
    return _machine("HGX H100", [gpu] * n)


def _machine(machine: str, devices: list[dict[str, object]]) -> MachineProfile:
    data = {
        "machine": machine,
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "devices": devices,
    }
    with tempfile.TemporaryDirectory() as tmp:  # through the loader, as gfd reads a profile (JSON is YAML)
        path = Path(tmp) / "profile.yaml"
        path.write_text(json.dumps(data))
        return load_machine_profile(path)


def run_case(profile: MachineProfile, strategy: str, repeat: int) -> dict[str, float]:
    gpus = len(profile.devices)
    with fake_nvml_installed(profile) as fake, tempfile.TemporaryDirectory() as tmp:
        backend = NvmlBackend(host_root=fake.write_host_root(Path(tmp)))
        opts = LabelOptions(mig_strategy=strategy)  # type: ignore[arg-type]
        labels = 0
        for _ in range(3):  # warm-up: imports, caches
            labels = len(build_labels(backend.probe(), opts).labels)
        fake.calls.clear()
        wall, cpu = [], []
        for _ in range(repeat):
            start, start_cpu = time.perf_counter(), time.process_time()
            inv = backend.probe()
            build_labels(inv, opts)
            cpu.append((time.process_time() - start_cpu) * 1000)
            wall.append((time.perf_counter() - start) * 1000)
    wall.sort()
    median = statistics.median(cpu)
    return {
        "gpus": gpus,
        "migs": sum(len(d.mig_devices) for d in inv.devices),
        "cpu_ms": median,
        "wall_ms": statistics.median(wall),
        "p95_ms": wall[int(len(wall) * 0.95) - 1],
        "ms_per_gpu": median / gpus,
        "calls_per_gpu": fake.total_calls / repeat / gpus,
        "labels": labels,
    }


CASES = [
    ("1x A100, MIG 7x 1g.5gb", a100_mig, 1, "single"),
    ("8x A100, MIG 7x 1g.5gb", a100_mig, 8, "single"),
    ("8x A100, MIG 7x 1g.5gb", a100_mig, 8, "mixed"),
    ("8x H100, no MIG, clique", h100_whole, 8, "none"),
]


def figures(*, repeat: int) -> list[Figure]:
    got = []
    note = (
        f"gfd probe + label pass: in-process over the tests' fake NVML, median of {repeat} passes; "
        f"target <= {TARGET_MS_PER_GPU} ms CPU per GPU."
    )
    for name, machine, count, strategy in CASES:
        r = run_case(machine(count), strategy, repeat)
        got.append(
            Figure(
                "alone",
                f"gfd pass CPU per GPU, {name}, {strategy}",
                "ms",
                [r["ms_per_gpu"]],
                digits=2,
                note=note,
            )
        )
        got.append(
            Figure("alone", f"gfd pass NVML calls per GPU, {name}, {strategy}", "", [r["calls_per_gpu"]])
        )
        note = ""
    return got
