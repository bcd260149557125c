"""Smoke-test layers 5 and 6, judged from the pod's status and events: did the scheduler place it (else its
reason), and did the runtime start its sandbox and containers (else the kubelet's event or the container's
waiting reason, with the runtime's own words). ``settled`` says when waiting longer would show nothing new."""

from __future__ import annotations

import re

from gfd.doctor.kube import one_line
from gfd.doctor.model import Finding
from gfd.doctor.smoke.model import Json, PodRun, condition
from gfd.doctor.smoke.pod import GPU_RESOURCE, SmokeOptions, pod_tolerations, tolerates

# Waiting reasons the kubelet gives when a container cannot be made or started (it retries some of them,
# but the same error comes back: the smoke test reports the first).
START_FAILURES = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "PreCreateHookError",
        "PreStartHookError",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "ImageInspectError",
    }
)
IMAGE_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"})
NEVER_RAN = frozenset({"StartError", "ContainerCannotRun"})  # terminated without running
SANDBOX_FAILED = "FailedCreatePodSandBox"
_NO_HANDLER = re.compile(r'no runtime for "([^"]*)" is configured')  # containerd's words
_REQUIREMENT = re.compile(r"unsatisfied condition: ([^,\\\"]+)")  # nvidia-container-cli's
_HOOK_WORDS = ("prestart hook", "createRuntime hook", "nvidia-container-cli", "nvidia-container-runtime")


def containers(pod: Json | None) -> list[Json]:
    """Init containers, then the others: the order they run in."""
    status = (pod or {}).get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def scheduled(pod: Json | None) -> bool:
    return bool(((pod or {}).get("spec") or {}).get("nodeName")) or (
        condition(pod, "PodScheduled").get("status") == "True"
    )


def _sandbox_failure(events: tuple[Json, ...]) -> str | None:
    failed = [e for e in events if e.get("reason") == SANDBOX_FAILED]
    return one_line(failed[-1].get("message", "")) if failed else None


def _start_failure(pod: Json | None) -> tuple[str, str, str] | None:
    """The first container the runtime could not start: (name, reason, message)."""
    for c in containers(pod):
        state = c.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason") in START_FAILURES:
            return c.get("name", "?"), waiting["reason"], one_line(waiting.get("message", ""))
        if terminated.get("reason") in NEVER_RAN:
            return c.get("name", "?"), terminated["reason"], one_line(terminated.get("message", ""))
    return None


def settled(pod: Json | None, events: tuple[Json, ...]) -> bool:
    """Finished, or stuck where only a change to the cluster would move it on."""
    phase = ((pod or {}).get("status") or {}).get("phase")
    unschedulable = condition(pod, "PodScheduled").get("reason") == "Unschedulable"
    return (
        phase in ("Succeeded", "Failed")
        or unschedulable
        or _sandbox_failure(events) is not None
        or _start_failure(pod) is not None
    )


def scheduling(run: PodRun, options: SmokeOptions, node: Json) -> list[Finding]:
    if run.refused is not None:
        return [_refused(run.refused, options)]
    if scheduled(run.pod):
        return [Finding("PASS", f"scheduled onto {options.node}")]
    said = condition(run.pod, "PodScheduled")
    message = one_line(said.get("message", ""))
    if said.get("reason") != "Unschedulable":
        return [
            Finding(
                "FAIL",
                f"not scheduled within {options.timeout_s:g} s and no word from the scheduler",
                "check that kube-scheduler runs (`kubectl -n kube-system get pods`)",
            )
        ]
    if f"Insufficient {GPU_RESOURCE}" in message:
        holders = ", ".join(f"{name} ({count})" for name, count in run.gpu_holders)
        return [
            Finding(
                "FAIL",
                f"every GPU on {options.node} is taken"
                + (f", by {holders}" if holders else "")
                + f"; the scheduler said: {message}",
                "wait until those pods finish, or stop one: a pod holds its GPUs until it ends",
            )
        ]
    if "untolerated taint" in message:
        taints = [
            t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") != "PreferNoSchedule"
        ]
        blocking = [_taint(t) for t in taints if not tolerates(pod_tolerations(options), t)]
        return [
            Finding(
                "FAIL",
                f"{options.node} has taint {', '.join(blocking) or '(see message)'}, which the pod does not "
                f"tolerate; the scheduler said: {message}",
                "GPU workloads meant for this node need a toleration for it; or remove it "
                f"(`kubectl taint nodes {options.node} KEY-`); `--tolerate KEY` lets the smoke test past it",
            )
        ]
    return [
        Finding("FAIL", f"the scheduler said: {message}", "the scheduler's message names what does not fit")
    ]


def _taint(t: Json) -> str:
    value = f"={t['value']}" if t.get("value") else ""
    return f"{t.get('key')}{value}:{t.get('effect')}"


def _refused(message: str, options: SmokeOptions) -> Finding:
    said = f"the API server refused the pod: {one_line(message)}"
    if "PodSecurity" in message:
        fix = (
            f"namespace {options.namespace} enforces a Pod Security level your image's pod does not meet; "
            "pass a --namespace that admits it (the probe alone meets 'restricted')"
        )
    elif "quota" in message:
        fix = f"the ResourceQuota of namespace {options.namespace} leaves no room: use another --namespace"
    elif "RuntimeClass" in message:
        fix = f"create RuntimeClass {options.runtime_class}, or pass --runtime-class"
    else:
        fix = "the API server's message says why; an admission webhook or policy may refuse GPU pods"
    return Finding("FAIL", said, fix)


def start(run: PodRun, options: SmokeOptions, handler: str | None) -> list[Finding]:
    sandbox = _sandbox_failure(run.events)
    if sandbox is not None:
        return [_sandbox(sandbox, options, handler)]
    failed = _start_failure(run.pod)
    if failed is not None:
        return [_container(*failed, options)]
    status = (run.pod or {}).get("status") or {}
    phase = status.get("phase")
    ran_any = any({"running", "terminated"} & set(c.get("state") or {}) for c in containers(run.pod))
    if phase == "Failed" and not ran_any:
        # The kubelet refused the pod before any container: its admission (devices, resources) or eviction.
        said = one_line(f"{status.get('reason', '')}: {status.get('message', '')}".strip(": "))
        return [
            Finding(
                "FAIL",
                f"the kubelet on {options.node} rejected the pod: {said or 'no reason given'}",
                "a GPU the scheduler counted could not be allocated: check the device plugin's log on the "
                "node (it may have just lost a GPU)"
                if GPU_RESOURCE in said or "UnexpectedAdmissionError" in said
                else "the kubelet's log on the node says more (`journalctl -u kubelet`)",
            )
        ]
    if phase == "Pending":
        waiting = [
            f"{c.get('name')}: {(c.get('state') or {}).get('waiting', {}).get('reason', 'waiting')}"
            for c in containers(run.pod)
        ]
        events = "; ".join(one_line(e.get("message", ""), 160) for e in run.events[-3:])
        return [
            Finding(
                "FAIL",
                f"containers not started within {options.timeout_s:g} s ({', '.join(waiting) or 'no status'})"
                + (f"; last events: {events}" if events else ""),
                "a large image may still be pulling: raise --timeout; else the events name what is slow",
            )
        ]
    ran = "; ".join(_ran(c) for c in containers(run.pod))
    where = f"handler {handler}" if handler else "the default runtime"
    return [Finding("PASS", f"sandbox started ({where}); {ran}")]


def _ran(c: Json) -> str:
    state = c.get("state") or {}
    if "terminated" in state:
        return f"{c.get('name')} ran (exit {(state['terminated'] or {}).get('exitCode')})"
    if "running" in state:
        return f"{c.get('name')} running"
    return f"{c.get('name')} not started (a container before it failed)"


def _sandbox(message: str, options: SmokeOptions, handler: str | None) -> Finding:
    missing = _NO_HANDLER.search(message)
    if missing:
        asked = f" (RuntimeClass {options.runtime_class})" if options.runtime_class else ""
        return Finding(
            "FAIL",
            f"the node's container runtime has no handler {missing.group(1)!r}{asked}: {message}",
            "add the NVIDIA runtime to containerd under that name (`sudo nvidia-ctk runtime configure "
            "--runtime=containerd`, then restart containerd), or set the RuntimeClass's handler to the "
            "name the runtime has in containerd's config",
        )
    return Finding(
        "FAIL",
        f"the pod's sandbox could not be created: {message}",
        "the container runtime's and the CNI plugin's logs on the node say more (`journalctl -u containerd`)",
    )


def _container(name: str, reason: str, message: str, options: SmokeOptions) -> Finding:
    image = options.probe_image if name == "probe" else options.image
    if reason in IMAGE_FAILURES:
        return Finding(
            "FAIL",
            f"container {name}: {reason}: {message}",
            f"the node cannot get image {image}: load it there, or push it where the node can pull it (with "
            "an imagePullSecret in --namespace); --probe-image names another copy of the gpu-labeller image",
        )
    requirement = _REQUIREMENT.search(message)
    if requirement:
        return Finding(
            "FAIL",
            f"the NVIDIA container toolkit refused image {image}: it declares NVIDIA_REQUIRE_CUDA and this "
            f"driver does not meet {requirement.group(1).strip()!r} ({reason}: {message})",
            "upgrade the node's driver, or use an image built for an older CUDA; `gfd doctor --cuda X.Y` on "
            "the node says which driver a CUDA release needs",
        )
    if any(word in message for word in _HOOK_WORDS):
        return Finding(
            "FAIL",
            f"the NVIDIA container toolkit failed while starting container {name}: {reason}: {message}",
            "run `nvidia-container-cli -k -d /dev/tty info` on the node: it names the broken part (driver, "
            "libraries, device nodes); `gfd doctor` there checks the layers below Kubernetes",
        )
    return Finding(
        "FAIL",
        f"container {name} could not start: {reason}: {message}",
        "the message is the container runtime's; its log on the node (`journalctl -u containerd`) says more",
    )
