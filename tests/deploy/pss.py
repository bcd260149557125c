"""The Pod Security Standards (baseline and restricted, as of Kubernetes 1.30) as checks on a pod spec.

Written from the published standard, so a test can say which level a rendered pod meets.
"""

from __future__ import annotations

from typing import Any

_RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
_BASELINE_CAPS = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}


def _all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"], *pod.get("ephemeralContainers", [])]


def baseline_violations(pod: dict[str, Any]) -> list[str]:
    out = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(f"{key} is true")
    for vol in pod.get("volumes", []):
        if "hostPath" in vol:
            out.append(f"volume {vol['name']} is a hostPath")
    if pod.get("securityContext", {}).get("sysctls"):
        out.append("sysctls set")
    for c in _all_containers(pod):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            out.append(f"container {c['name']} is privileged")
        extra = set(sc.get("capabilities", {}).get("add", [])) - _BASELINE_CAPS
        if extra:
            out.append(f"container {c['name']} adds {sorted(extra)}")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            out.append(f"container {c['name']} uses a hostPort")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"container {c['name']} sets procMount")
    return out


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    out = baseline_violations(pod)
    psc = pod.get("securityContext", {})
    for vol in pod.get("volumes", []):
        kinds = set(vol) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            out.append(f"volume {vol['name']} has type {sorted(kinds)}")
    for c in _all_containers(pod):
        sc = c.get("securityContext", {})
        name = c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"container {name} does not set allowPrivilegeEscalation: false")
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"container {name} is not runAsNonRoot")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(f"container {name} runs as uid 0")
        seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"container {name} has seccomp {seccomp}")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            out.append(f"container {name} does not drop ALL capabilities")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"container {name} adds capabilities beyond NET_BIND_SERVICE")
    return out


def level(pod: dict[str, Any]) -> str:
    if not restricted_violations(pod):
        return "restricted"
    return "baseline" if not baseline_violations(pod) else "privileged"
