"""The smoke test's verdicts, layer by layer, from hand-written API JSON and probe results: which layer a
state is blamed on, what the evidence says and which fix is offered."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gfd.backends.nvml_errors import LIB_RM_VERSION_MISMATCH, LIBRARY_NOT_FOUND
from gfd.doctor.cuda_table import parse_cuda
from gfd.doctor.engine import bottom_up
from gfd.doctor.model import Finding
from gfd.doctor.probe import ProbeGpu
from gfd.doctor.smoke import cluster as smoke_cluster
from gfd.doctor.smoke import inside as smoke_inside
from gfd.doctor.smoke import start as smoke_start
from gfd.doctor.smoke.model import LAYERS, ApiRead, PodRun
from gfd.doctor.smoke.pod import SmokeOptions
from tests.gfd.doctor.smoke_shapes import LABELS, NODE, UUID, container, node, pod, probe, ran, unschedulable

OPTIONS = SmokeOptions(node=NODE)
WITH_IMAGE = replace(OPTIONS, image="registry.example/train:1")


def one(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, findings
    return findings[0]


# ---- layers 1-4: the Node and the RuntimeClass ----


def test_a_missing_node_is_named():
    f = one(smoke_cluster.node(ApiRead(None, 404, "not found"), NODE))
    assert (f.status, f.evidence) == ("FAIL", f"no node named {NODE} in the cluster")
    assert "kubectl get nodes" in (f.fix or "")


def test_forbidden_reads_ask_for_the_admins_credentials():
    f = one(smoke_cluster.node(ApiRead(None, 403, "forbidden"), NODE))
    assert f.status == "FAIL" and "HTTP 403" in f.evidence and "admin's kubeconfig" in (f.fix or "")


def test_a_node_that_is_not_ready_or_cordoned_fails_layer_1():
    f = one(smoke_cluster.node(ApiRead(node(ready="Unknown")), NODE))
    assert f.status == "FAIL" and "is not Ready (Ready=Unknown; KubeletReady: ok)" in f.evidence
    f = one(smoke_cluster.node(ApiRead(node(unschedulable=True)), NODE))
    assert f.status == "FAIL" and "cordoned" in f.evidence and f"kubectl uncordon {NODE}" in (f.fix or "")
    f = one(smoke_cluster.node(ApiRead(node()), NODE))
    assert (f.status, f.evidence) == ("PASS", f"node {NODE} is Ready (v1.37.2, containerd://1.6.20)")


def test_labels_missing_partial_simulated_and_present():
    assert "none of this project's labels" in one(smoke_cluster.labels(node(labels={}))).evidence
    partial = one(smoke_cluster.labels(node(labels={"nvidia.com/gpu.present": "true"})))
    assert partial.status == "FAIL" and "nvidia.com/gpu.product, nvidia.com/gpu.count" in partial.evidence
    simulated = one(smoke_cluster.labels(node(labels=LABELS | {"nvidia.com/gpu.simulated": "true"})))
    assert simulated.status == "WARN"
    f = one(smoke_cluster.labels(node()))
    assert f.status == "PASS"
    assert f.evidence == (
        "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB, nvidia.com/gpu.count=8, "
        "nvidia.com/cuda.driver-version.full=550.54.15"
    )


def test_the_device_plugin_layer_reads_allocatable_and_tells_unhealthy_from_absent():
    assert one(smoke_cluster.device_plugin(node())).evidence == "allocatable nvidia.com/gpu=8 (capacity 8)"
    absent = one(smoke_cluster.device_plugin(node(gpus=None)))
    assert absent.status == "FAIL" and "the device plugin has not registered" in absent.evidence
    unhealthy = one(smoke_cluster.device_plugin(node(gpus="0", capacity="8")))
    assert unhealthy.status == "FAIL"
    assert unhealthy.evidence == (
        "nvidia.com/gpu capacity 8 but none allocatable: the device plugin has gone (the kubelet keeps the "
        "capacity for some minutes after) or reports every GPU unhealthy"
    )


def test_the_runtime_class_absent_present_or_not_asked_for():
    absent = one(smoke_cluster.runtime_class(ApiRead(None, 404, "not found"), "nvidia"))
    assert absent.status == "FAIL" and absent.evidence.startswith("no RuntimeClass nvidia")
    assert "metadata.name nvidia, handler nvidia" in (absent.fix or "")
    found = one(smoke_cluster.runtime_class(ApiRead({"handler": "nvidia-cdi"}), "nvidia"))
    assert (found.status, found.evidence) == ("PASS", "RuntimeClass nvidia exists (handler nvidia-cdi)")
    assert one(smoke_cluster.runtime_class(None, None)).status == "SKIP"


# ---- layers 5-6: scheduling and start ----


def test_insufficient_gpus_names_the_pods_holding_them():
    message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available"
    run = PodRun(pod=pod("Pending", scheduled=unschedulable(message)), gpu_holders=(("ml/trainer", 8),))
    f = one(smoke_start.scheduling(run, OPTIONS, node()))
    assert f.status == "FAIL"
    assert f.evidence.startswith(f"every GPU on {NODE} is taken, by ml/trainer (8); the scheduler said: 0/1")
    assert "wait until those pods finish" in (f.fix or "")


def test_an_untolerated_taint_is_named_and_the_gpu_taint_is_tolerated():
    taints = [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "training", "effect": "NoSchedule"},
    ]
    message = (
        "0/1 nodes are available: 1 node(s) had untolerated taint(s). preemption: 0/1 nodes are available: 1 "
        "Preemption is not helpful for scheduling."
    )
    run = PodRun(pod=pod("Pending", scheduled=unschedulable(message)))
    f = one(smoke_start.scheduling(run, OPTIONS, node(taints=taints)))
    assert f.status == "FAIL"
    assert f.evidence.startswith(f"{NODE} has taint dedicated=training:NoSchedule, which the pod does not")
    assert "--tolerate KEY" in (f.fix or "")


def test_a_refused_pod_says_why_and_a_placed_one_passes():
    psa = 'pods "x" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true'
    f = one(smoke_start.scheduling(PodRun(refused=psa), WITH_IMAGE, node()))
    assert f.status == "FAIL" and f.evidence == f"the API server refused the pod: {psa}"
    assert "Pod Security" in (f.fix or "")
    assert one(smoke_start.scheduling(ran(), OPTIONS, node())).evidence == f"scheduled onto {NODE}"
    silent = one(smoke_start.scheduling(PodRun(pod=pod("Pending", scheduled={"type": "PodScheduled",
                 "status": "False"}), timed_out=True), OPTIONS, node()))  # fmt: skip
    assert silent.status == "FAIL" and "no word from the scheduler" in silent.evidence


def test_an_unknown_runtime_handler_is_named_from_the_sandbox_event():
    event = {
        "reason": "FailedCreatePodSandBox",
        "message": "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox "
        'runtime: no runtime for "nvidia-cdi" is configured',
    }
    run = PodRun(pod=pod("Pending"), events=(event,))
    assert smoke_start.settled(run.pod, run.events)
    f = one(smoke_start.start(run, OPTIONS, "nvidia-cdi"))
    assert f.status == "FAIL"
    assert f.evidence.startswith(
        "the node's container runtime has no handler 'nvidia-cdi' (RuntimeClass nvidia)"
    )
    assert "nvidia-ctk runtime configure" in (f.fix or "")


@pytest.mark.parametrize(
    ("reason", "message", "words", "fix"),
    [
        ("ErrImageNeverPull", 'Container image "x" is not present', "container workload: ErrImageNeverPull",
         "the node cannot get image registry.example/train:1"),
        ("RunContainerError", "error running prestart hook #0: exit status 1, stdout: , stderr: "
         "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your "
         "driver", "this driver does not meet 'cuda>=12.8'", "upgrade the node's driver"),
        ("RunContainerError", "error running prestart hook #0: nvidia-container-cli: initialization error: "
         "load library failed", "the NVIDIA container toolkit failed", "nvidia-container-cli -k -d /dev/tty"),
        ("CreateContainerConfigError", 'secret "x" not found', "container workload could not start",
         "journalctl -u containerd"),
    ],
)  # fmt: skip
def test_a_container_that_cannot_start_is_explained(reason, message, words, fix):
    statuses = [container("workload", waiting={"reason": reason, "message": message})]
    run = PodRun(pod=pod("Pending", statuses=statuses))
    assert smoke_start.settled(run.pod, run.events)
    f = one(smoke_start.start(run, WITH_IMAGE, "nvidia"))
    assert f.status == "FAIL" and words in f.evidence and fix in (f.fix or "")


def test_a_start_error_after_the_probe_ran_is_still_a_start_failure():
    statuses = [container("workload", terminated={"exitCode": 128, "reason": "StartError", "message": "x"})]
    inits = [container("probe", terminated={"exitCode": 0, "reason": "Completed"})]
    f = one(
        smoke_start.start(PodRun(pod=pod("Failed", statuses=statuses, inits=inits)), WITH_IMAGE, "nvidia")
    )
    assert f.status == "FAIL" and "container workload could not start: StartError" in f.evidence


def test_containers_still_creating_at_the_timeout_fail_with_the_last_events():
    statuses = [container("probe", waiting={"reason": "ContainerCreating"})]
    events = ({"reason": "Pulling", "message": 'Pulling image "big"'},)
    run = PodRun(pod=pod("Pending", statuses=statuses), events=events, timed_out=True)
    assert not smoke_start.settled(run.pod, run.events)
    f = one(smoke_start.start(run, OPTIONS, "nvidia"))
    assert f.status == "FAIL"
    assert f.evidence == (
        'containers not started within 180 s (probe: ContainerCreating); last events: Pulling image "big"'
    )


def test_started_containers_pass_with_their_exit_codes():
    inits = [container("probe", terminated={"exitCode": 0, "reason": "Completed"})]
    statuses = [container("workload", terminated={"exitCode": 3, "reason": "Error"})]
    f = one(
        smoke_start.start(PodRun(pod=pod("Failed", statuses=statuses, inits=inits)), WITH_IMAGE, "nvidia")
    )
    assert (f.status, f.evidence) == (
        "PASS",
        "sandbox started (handler nvidia); probe ran (exit 0); workload ran (exit 3)",
    )


# ---- layers 7-10: inside the pod ----


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


def test_layers_above_the_first_failure_are_skipped():
    failing = [Finding("FAIL", "broken")]
    checks = bottom_up([(layer, (lambda: failing) if layer.number == 5 else (lambda: [Finding("PASS", "ok")]))
                        for layer in LAYERS])  # fmt: skip
    assert [c.status for c in checks] == ["PASS"] * 4 + ["FAIL"] + ["SKIP"] * 5
    assert checks[-1].evidence == "fix layer 5 first"
    skipped = bottom_up([(layer, lambda: failing) for layer in LAYERS[4:]], failed_below=3)
    assert {c.evidence for c in skipped} == {"fix layer 3 first"}


def test_a_pod_the_kubelet_rejects_before_any_container_fails_at_start():
    rejected = pod("Failed")
    message = (
        "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices nvidia.com/gpu"
    )
    rejected["status"] |= {"reason": "UnexpectedAdmissionError", "message": message}
    run = PodRun(pod=rejected)
    assert smoke_start.settled(run.pod, run.events)
    f = one(smoke_start.start(run, OPTIONS, "nvidia"))
    assert f.status == "FAIL"
    assert f.evidence.startswith(
        f"the kubelet on {NODE} rejected the pod: UnexpectedAdmissionError: Allocate"
    )
    assert "device plugin's log" in (f.fix or "")


def test_a_probe_still_running_at_the_timeout_is_named():
    running = pod("Running", statuses=[container("probe", running={})])
    hung = PodRun(pod=running, probe_error="no probe result", timed_out=True)
    f = one(smoke_inside.nvml(hung, OPTIONS, "nvidia"))
    assert f.status == "FAIL" and f.evidence == "the probe did not finish within 180 s; its log: (no output)"
