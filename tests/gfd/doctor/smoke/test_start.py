"""Smoke-test layers 5-6 (gfd/doctor/smoke/start.py), from hand-written pod status and events: scheduling and
container start, what the evidence says and which fix is offered."""

from __future__ import annotations

import pytest

from gfd.doctor.smoke import start as smoke_start
from gfd.doctor.smoke.model import PodRun
from tests.gfd.doctor.smoke.shapes import (
    NODE,
    OPTIONS,
    WITH_IMAGE,
    container,
    node,
    one,
    pod,
    ran,
    unschedulable,
)


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
