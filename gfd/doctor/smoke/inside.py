"""Smoke-test layers 7-10, judged from inside the pod: what the probe saw (NVML, device nodes, the GPUs and
the CUDA version the driver serves), compared with the node's labels; then the admin's own image, by its
exit code and the last lines of its log."""

from __future__ import annotations

from pathlib import Path

from gfd.backends.nvml_errors import LIB_RM_VERSION_MISMATCH, LIBRARY_NOT_FOUND, nvml_code_name
from gfd.doctor.host import cuda as cuda_layer
from gfd.doctor.host.context import Context
from gfd.doctor.host.devices import CONTROL_NODES
from gfd.doctor.kube import DRIVER_LABEL, GPU, one_line
from gfd.doctor.model import Finding
from gfd.doctor.probe import ProbeResult
from gfd.doctor.smoke.model import Json, PodRun
from gfd.doctor.smoke.pod import (
    DEFAULT_PROBE_IMAGE,
    PROBE_COMMAND,
    PROBE_CONTAINER,
    WORKLOAD_CONTAINER,
    SmokeOptions,
)
from gfd.doctor.smoke.start import containers
from gfd.inventory import Inventory
from gfd.labels import sanitize

TAIL_LINES = 8
# What a CUDA program prints when a layer below it is wrong, and where to look.
WORKLOAD_HINTS = (
    (
        "CUDA driver version is insufficient",
        "the image's CUDA is newer than the node's driver: pass --cuda X.Y with the image's CUDA release to "
        "see what this driver runs",
    ),
    (
        "no CUDA-capable device",
        "the container lacks the GPU's device nodes or /dev/nvidia-uvm (kernel module nvidia_uvm): run "
        "`gfd doctor` on the node",
    ),
    (
        "libcuda.so",
        "the runtime did not inject libcuda: the image must ask for it with NVIDIA_DRIVER_CAPABILITIES "
        "including compute (NVIDIA's CUDA images set compute,utility)",
    ),
)


def tail(log: str | None, lines: int = TAIL_LINES) -> str:
    kept = [one_line(line, 200) for line in (log or "").splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


def _status(pod: Json | None, name: str) -> Json:
    return next((c for c in containers(pod) if c.get("name") == name), {})


def nvml(run: PodRun, options: SmokeOptions, handler: str | None) -> list[Finding]:
    probe = run.probe
    if probe is None:
        state = _status(run.pod, PROBE_CONTAINER).get("state") or {}
        if "running" in state:
            return [
                Finding(
                    "FAIL",
                    f"the probe did not finish within {options.timeout_s:g} s; its log: "
                    + tail(run.probe_log),
                    "NVML hangs in the pod: run `nvidia-smi` and `gfd doctor` on the node; a GPU in a bad "
                    "state shows in `dmesg` (Xid)",
                )
            ]
        ended = state.get("terminated") or {}
        return [
            Finding(
                "FAIL",
                f"the probe gave no result ({run.probe_error}; exit {ended.get('exitCode', '?')}); its log: "
                + tail(run.probe_log),
                f"--probe-image must be a gpu-labeller image that has `{' '.join(PROBE_COMMAND)}` (this "
                f"version's is {DEFAULT_PROBE_IMAGE})",
            )
        ]
    visible = probe.visible_devices
    if not probe.nvml.ok:
        return [_nvml_failed(probe, options, handler)]
    minors = [f"/dev/nvidia{g.minor}" for g in probe.gpus if g.minor is not None]
    want = ["/" + rel for rel in CONTROL_NODES] + minors
    missing = [node for node in want if node not in probe.device_nodes]
    if missing:
        return [
            Finding(
                "FAIL",
                f"NVML started (driver {probe.driver_version}) but the pod lacks {', '.join(missing)} "
                f"(NVIDIA_VISIBLE_DEVICES={visible}): CUDA programs fail with 'no CUDA-capable device is "
                "detected'",
                "the runtime must pass in the device nodes of the GPUs it was given; check the NVIDIA "
                "container toolkit on the node (`nvidia-container-cli -k -d /dev/tty info`)",
            )
        ]
    return [
        Finding(
            "PASS",
            f"NVML started in the pod (driver {probe.driver_version}); device nodes "
            f"{', '.join(probe.device_nodes)}",
        )
    ]


def _nvml_failed(probe: ProbeResult, options: SmokeOptions, handler: str | None) -> Finding:
    said = probe.nvml.advice or "no reason given"
    visible = probe.visible_devices
    if probe.nvml.code == LIBRARY_NOT_FOUND:
        # The probe's own advice says to use the NVIDIA runtime; the pod asked for it, so it is left out.
        reason = nvml_code_name(LIBRARY_NOT_FOUND)
        if not visible:
            return Finding(
                "FAIL",
                f"libnvidia-ml.so.1 is not in the pod ({reason}) and NVIDIA_VISIBLE_DEVICES is unset: the "
                "runtime was told of no GPU to inject",
                "the device plugin sets NVIDIA_VISIBLE_DEVICES for the GPU it allocates; check its "
                "deviceListStrategy (the runtime reads envvar) and its log",
            )
        if options.runtime_class is None:
            runtime = "the default runtime"
            fix = (
                "with --runtime-class none, the NVIDIA runtime must be containerd's default (`sudo "
                "nvidia-ctk runtime configure --runtime=containerd --set-as-default`, then restart "
                "containerd), or pass the NVIDIA runtime's RuntimeClass"
            )
        else:
            runtime = f"handler {handler!r}"
            fix = (
                f"point RuntimeClass {options.runtime_class} at the NVIDIA runtime's handler (`nvidia` once "
                "`sudo nvidia-ctk runtime configure --runtime=containerd` has added it and containerd "
                f"restarted); if {handler!r} is meant to be it, its BinaryName in containerd's config must "
                "be nvidia-container-runtime"
            )
        return Finding(
            "FAIL",
            f"libnvidia-ml.so.1 is not in the pod ({reason}) although it was given GPU {visible}: the "
            f"runtime ({runtime}) did not inject the driver's libraries",
            fix,
        )
    if probe.nvml.code == LIB_RM_VERSION_MISMATCH:
        return Finding(
            "FAIL",
            f"in the pod: {said}",
            "the driver's libraries the toolkit injects are newer than the loaded kernel module: reboot the "
            "node (or reload the nvidia modules)",
        )
    return Finding(
        "FAIL",
        f"NVML failed to start in the pod: {said}",
        "run `gfd doctor` on the node: it checks the driver, NVML and the device nodes below Kubernetes",
    )


def gpus(run: PodRun, labels: dict[str, str]) -> list[Finding]:
    probe = run.probe
    assert probe is not None  # layer 7 passed
    visible = probe.visible_devices
    if not probe.gpus:
        return [
            Finding(
                "FAIL",
                f"NVML in the pod shows no GPU (NVIDIA_VISIBLE_DEVICES={visible})",
                "the runtime was given a GPU the driver does not know: compare NVIDIA_VISIBLE_DEVICES with "
                "`nvidia-smi -L` on the node and the device plugin's log",
            )
        ]
    names = ", ".join(f"{g.name} ({g.uuid})" for g in probe.gpus)
    if len(probe.gpus) > 1:
        return [
            Finding(
                "FAIL",
                f"the pod was given 1 GPU but sees {len(probe.gpus)}: {names} (NVIDIA_VISIBLE_DEVICES="
                f"{visible}): GPUs of other pods are open to it",
                "stop the toolkit from honouring NVIDIA_VISIBLE_DEVICES set by images "
                "(accept-nvidia-visible-devices-envvar-when-unprivileged = false in "
                "/etc/nvidia-container-runtime/config.toml) and run the device plugin with "
                "deviceListStrategy volume-mounts",
            )
        ]
    gpu = probe.gpus[0]
    if visible and visible.startswith(("GPU-", "MIG-")) and gpu.uuid and gpu.uuid not in visible.split(","):
        return [
            Finding(
                "FAIL",
                f"the pod sees {names} but was given {visible}",
                "the runtime and the device plugin disagree on the GPU: check both on the node",
            )
        ]
    got = sanitize.product(gpu.name)
    labelled = labels.get(GPU.product, "").removesuffix("-SHARED")
    if got != labelled and not labelled.startswith(got + "-MIG-"):
        return [
            Finding(
                "FAIL",
                f"the pod's GPU is {gpu.name} ({got}), the node is labelled {GPU.product}={labelled}",
                "the labels are stale or come from other hardware: check the gfd container's log on the node",
            )
        ]
    evidence = (
        f"1 GPU, the one given: {names}; as labelled ({GPU.product}={labels[GPU.product]}, "
        f"{GPU.count}={labels.get(GPU.count)})"
    )
    driver = labels.get(DRIVER_LABEL)
    if driver and probe.driver_version and driver != probe.driver_version:
        return [
            Finding(
                "WARN",
                f"{evidence}; but the pod's driver is {probe.driver_version}, labelled "
                f"{DRIVER_LABEL}={driver}",
                "gfd relabels within its sleep interval after a driver change; if this stays, check its log",
            )
        ]
    return [Finding("PASS", evidence)]


def cuda(run: PodRun, options: SmokeOptions) -> list[Finding]:
    probe = run.probe
    assert probe is not None
    seen = Inventory(
        "nvml", driver_version=probe.driver_version, cuda_driver_version=probe.cuda_driver_version
    )
    # The host doctor's CUDA layer, over what the driver told the pod.
    found = cuda_layer.check_driver(Context(host_root=Path("/"), cuda=options.cuda, nvml=seen))
    return [Finding(f.status, f"in the pod: {f.evidence}", f.fix, f.item) for f in found]


def workload(run: PodRun, options: SmokeOptions) -> list[Finding]:
    if options.image is None:
        return [Finding("SKIP", "no --image: the probe was the pod's only container")]
    state = _status(run.pod, WORKLOAD_CONTAINER).get("state") or {}
    log = f"; its log: {tail(run.workload_log)}"
    ended = state.get("terminated")
    if ended is not None:
        code = ended.get("exitCode")
        if code == 0:
            return [Finding("PASS", f"{options.image} exited 0{log}")]
        reason = f" ({ended['reason']})" if ended.get("reason") else ""
        hint = next((fix for words, fix in WORKLOAD_HINTS if words in (run.workload_log or "")), None)
        return [
            Finding(
                "FAIL",
                f"{options.image} exited {code}{reason}{log}",
                hint or "every layer below passed, so the image itself failed: its log above says why",
            )
        ]
    if "running" in state:
        return [
            Finding(
                "FAIL",
                f"{options.image} still running after {options.timeout_s:g} s{log}",
                "raise --timeout, or give a command that ends (after --)",
            )
        ]
    return [Finding("FAIL", f"{options.image} did not run", "see the container start layer")]
