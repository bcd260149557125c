"""Smoke-test layers 7-10 (gfd/doctor/smoke/inside.py), from hand-written probe results and pod status: NVML,
the GPUs and CUDA in the pod, and the workload, what the evidence says and which fix is offered."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gfd.backends.nvml_errors import LIB_RM_VERSION_MISMATCH, LIBRARY_NOT_FOUND
from gfd.doctor.cuda_table import parse_cuda
from gfd.doctor.probe import ProbeGpu
from gfd.doctor.smoke import inside as smoke_inside
from gfd.doctor.smoke.model import PodRun
from tests.gfd.doctor.smoke.shapes import LABELS, OPTIONS, UUID, WITH_IMAGE, container, one, pod, probe, ran


def test_no_probe_result_blames_the_probe_image():
    run = replace(ran(), probe=None, probe_error="no probe result in the log", probe_log="No module named x")
    f = one(smoke_inside.nvml(run, OPTIONS, "nvidia"))
    assert f.status == "FAIL" and "its log: No module named x" in f.evidence
    assert "python3 -m gfd.doctor.probe" in (f.fix or "")


def test_a_runtime_that_injected_no_library_is_blamed_with_its_handler():
    missing = probe(ok=False, code=LIBRARY_NOT_FOUND, advice="libnvidia-ml.so.1 is not in this container")
    f = one(smoke_inside.nvml(ran(missing), OPTIONS, "runc"))
    assert f.status == "FAIL"
    assert f.evidence == (
        f"libnvidia-ml.so.1 is not in the pod (NVML: Library Not Found) although it was given GPU {UUID}: "
        "the runtime (handler 'runc') did not inject the driver's libraries"
    )
    assert (f.fix or "").startswith("point RuntimeClass nvidia at the NVIDIA runtime's handler")
    unset = one(smoke_inside.nvml(ran(replace(missing, visible_devices=None)), OPTIONS, "nvidia"))
    assert "NVIDIA_VISIBLE_DEVICES is unset" in unset.evidence and "deviceListStrategy" in (unset.fix or "")
    default = one(smoke_inside.nvml(ran(missing), replace(OPTIONS, runtime_class=None), None))
    assert "the default runtime" in default.evidence and "--set-as-default" in (default.fix or "")


def test_a_driver_library_mismatch_in_the_pod_says_reboot():
    mismatch = probe(ok=False, code=LIB_RM_VERSION_MISMATCH, advice="driver/library version mismatch")
    f = one(smoke_inside.nvml(ran(mismatch), OPTIONS, "nvidia"))
    assert f.evidence == "in the pod: driver/library version mismatch" and "reboot" in (f.fix or "")


def test_missing_device_nodes_fail_even_when_nvml_starts():
    f = one(smoke_inside.nvml(ran(probe(nodes=("/dev/nvidiactl",))), OPTIONS, "nvidia"))
    assert f.status == "FAIL" and "the pod lacks /dev/nvidia-uvm, /dev/nvidia3" in f.evidence
    ok = one(smoke_inside.nvml(ran(), OPTIONS, "nvidia"))
    assert ok.evidence == (
        "NVML started in the pod (driver 550.54.15); device nodes /dev/nvidia-uvm, /dev/nvidia3, "
        "/dev/nvidiactl"
    )


def test_the_gpus_in_the_pod_are_compared_with_the_labels():
    f = one(smoke_inside.gpus(ran(), LABELS))
    assert f.status == "PASS"
    assert f.evidence == (
        f"1 GPU, the one given: NVIDIA A100-SXM4-40GB ({UUID}); as labelled "
        "(nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB, nvidia.com/gpu.count=8)"
    )
    shared = one(
        smoke_inside.gpus(ran(), LABELS | {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED"})
    )
    assert shared.status == "PASS"
    other = one(smoke_inside.gpus(ran(), LABELS | {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}))
    assert (
        other.status == "FAIL" and "labelled nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3" in other.evidence
    )
    stale = one(smoke_inside.gpus(ran(), LABELS | {"nvidia.com/cuda.driver-version.full": "535.104.05"}))
    assert stale.status == "WARN" and "the pod's driver is 550.54.15" in stale.evidence


def test_seeing_no_gpu_more_gpus_or_another_gpu_fails():
    none = one(smoke_inside.gpus(ran(probe(gpus=())), LABELS))
    assert none.status == "FAIL" and "shows no GPU" in none.evidence
    two = (ProbeGpu(0, "NVIDIA A100-SXM4-40GB", UUID, 3), ProbeGpu(1, "NVIDIA A100-SXM4-40GB", "GPU-x", 4))
    many = one(smoke_inside.gpus(ran(probe(gpus=two, visible="all")), LABELS))
    assert many.status == "FAIL" and "was given 1 GPU but sees 2" in many.evidence
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in (many.fix or "")
    wrong = one(smoke_inside.gpus(ran(probe(visible="GPU-other")), LABELS))
    assert wrong.status == "FAIL" and "but was given GPU-other" in wrong.evidence


@pytest.mark.parametrize(
    ("cuda", "status", "words"),
    [
        (None, "PASS", "in the pod: driver 550.54.15 supports CUDA up to 12.4 (as the driver reports)"),
        ("12.8", "WARN", "in the pod: a CUDA 12.8 image runs through minor-version compatibility"),
        ("13.0", "FAIL", "in the pod: a CUDA 13.0 image will not run: it needs driver >= 580.65.06"),
    ],
)
def test_the_cuda_layer_judges_what_the_driver_told_the_pod(cuda, status, words):
    options = replace(OPTIONS, cuda=parse_cuda(cuda) if cuda else None)
    f = one(smoke_inside.cuda(ran(), options))
    assert f.status == status and f.evidence.startswith(words)


def test_the_workload_layer_reports_exit_and_log():
    assert one(smoke_inside.workload(ran(), OPTIONS)).status == "SKIP"
    inits = [container("probe", terminated={"exitCode": 0})]

    def workload(log: str, **state: object) -> PodRun:
        return replace(ran(), pod=pod("Failed", inits=inits, statuses=[container("workload", **state)]),
                       workload_log=log)  # fmt: skip

    passed = one(smoke_inside.workload(workload("step 1\nok\n", terminated={"exitCode": 0}), WITH_IMAGE))
    assert passed.evidence == "registry.example/train:1 exited 0; its log: step 1 | ok"
    failed = one(smoke_inside.workload(
        workload("loading\nCUDA driver version is insufficient for CUDA runtime version\n",
                 terminated={"exitCode": 1, "reason": "Error"}), WITH_IMAGE))  # fmt: skip
    assert failed.status == "FAIL"
    assert failed.evidence.startswith(
        "registry.example/train:1 exited 1 (Error); its log: loading | CUDA driver"
    )
    assert "pass --cuda X.Y" in (failed.fix or "")
    running = one(smoke_inside.workload(replace(workload("\x1b[31mstep\n", running={}), timed_out=True),
                                        WITH_IMAGE))  # fmt: skip
    assert running.status == "FAIL" and running.evidence.endswith(
        "still running after 180 s; its log: [31mstep"
    )


def test_a_probe_still_running_at_the_timeout_is_named():
    running = pod("Running", statuses=[container("probe", running={})])
    hung = PodRun(pod=running, probe_error="no probe result", timed_out=True)
    f = one(smoke_inside.nvml(hung, OPTIONS, "nvidia"))
    assert f.status == "FAIL" and f.evidence == "the probe did not finish within 180 s; its log: (no output)"
