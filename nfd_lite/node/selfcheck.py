"""Is the admission policy enforced? Without it, RBAC alone lets this writer's token change any Node,
taints and spec included, and nothing would say so.

The check asks the server about the properties themselves, each by a server-side dry run (``dryRun=All``:
admission runs, nothing is stored) of a patch that RBAC allows and only the policy refuses, one entry of
``PROBES`` each:

- a label on another Node (one the token can list; skipped, and said so, on a one-node cluster),
- a label in a namespace reserved for Kubernetes on its own Node,
- a taint on its own Node,
- a forged managedFields entry of another manager on its own Node, which only the policy's managedFields
  rules refuse (the previous release's policy, without them, admits it: a policy of the right name but an
  older version does not pass).

Each must be refused by this writer's own policy, recognised by its name and its binding's (the same
name, as in rbac/ and the chart): a policy by another name that happens to refuse a probe says nothing
about the properties ours enforces. First, a label this writer may set is sent to its own Node, also as
a dry run, and must be admitted: the label on the other Node differs from it only by the Node, so its
refusal can only be the policy's rule about Nodes.

``AdmissionCheck`` runs the check before the first write (where a failure stops the writer) and again
every ``admission_check_interval`` while it runs, where a failure is an alarm (/readyz, a metric, one log
line) and the writer goes on writing: docs/nfd-lite.md says why.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nfd_lite.api.client import NodeApi
from nfd_lite.api.errors import ApiError, Forbidden, policy_denial
from nfd_lite.files.policy import Policy
from nfd_lite.node.reconciler import OWNED_ANNOTATION, read_record, write_record
from promtext import Gauge

log = logging.getLogger(__name__)

POLICY_ENV = "NFD_LITE_ADMISSION_POLICY"  # the chart sets it to its policy's release-scoped name
DEFAULT_POLICY = "gpu-labeller-nfd-lite"  # as rbac/admission-policy.yaml names the policy and its binding

PROBE_NAME = "admission-probe"  # the probe label's name, under the writer's first allowed prefix
RESERVED_PROBE = "node-role.kubernetes.io/gpu-labeller-admission-probe"
TAINT_PROBE = "gpu-labeller.io/admission-probe"
PROBE_VALUE = "must-be-refused"
FORGED_MANAGER = "gpu-labeller-admission-probe"  # the manager of the forged managedFields entry

# The properties the policy must enforce, as the check names them when one is not.
OTHER_NODES = "writes to other Nodes"
RESERVED_LABELS = "labels reserved for Kubernetes"
TAINTS = "taints"
MANAGED_FIELDS = "forged managedFields entries of other managers"


class PolicyNotEnforced(Exception):
    """The server admitted a request the admission policy must refuse, or something other than that
    policy refused it (so whether the policy would have cannot be told). ``findings`` name each property,
    the request and what answered it; ``missing`` are the properties."""

    def __init__(self, policy: str, findings: list[tuple[str, str]]) -> None:
        self.policy = policy
        self.missing = [prop for prop, _ in findings]
        self.findings = [text for _, text in findings]
        super().__init__(
            f"the admission policy '{policy}' that fences this writer is not enforced on this cluster: "
            + "; ".join(self.findings)
            + " (dry runs: nothing was stored), so RBAC alone would let this token do that: install "
            "rbac/admission-policy.yaml (chart: admissionPolicy.enabled=true; Kubernetes >= 1.30), set "
            f"{POLICY_ENV} to the policy's name if it is installed under another (its binding named alike), "
            "or accept the risk explicitly with --allow-without-admission-policy"
        )

    def summary(self) -> str:
        """One line for /readyz: which properties are not enforced, without the advice."""
        return f"the admission policy '{self.policy}' is not enforced: {', '.join(self.missing)}"


def expected_policy() -> str:
    """The name of this writer's policy and its binding: env NFD_LITE_ADMISSION_POLICY, else rbac/'s."""
    return os.environ.get(POLICY_ENV) or DEFAULT_POLICY


@dataclass(frozen=True)
class Context:
    """What every probe starts from: the writer's own Node as read once, and the admitted probe label."""

    api: NodeApi
    own: Mapping[str, Any]
    own_labels: Mapping[str, str]
    allowed: str  # the label key the admitted probe used
    said: set[str]  # skipped probes already logged (once per writer, not at every periodic check)


@dataclass(frozen=True)
class Sent:
    """A probe's request: what it is, in a finding's words, and how to send it (always a dry run)."""

    what: str
    send: Callable[[], object]


@dataclass(frozen=True)
class Probe:
    """One property: a dry-run request that RBAC allows and only the policy's rule for ``prop`` refuses.
    ``build`` returns None where it cannot be checked (and says why). ``says``: what the refusal must name,
    where only one rule can refuse the request, so that a refusal for another reason does not pass."""

    prop: str
    build: Callable[[Context], Sent | None]
    says: str | None = None


def _probe_other_node(ctx: Context) -> Sent | None:
    other = _other_node(ctx.api, ctx.said)
    if other is None:
        return None
    name = str(other["metadata"]["name"])
    body = _label_patch(other, _absent(ctx.allowed, ctx.own_labels, _labels(other)))
    return Sent(f"a label on Node {name}", lambda: ctx.api.probe_other_node(name, body))


def _probe_reserved_label(ctx: Context) -> Sent:
    key = _absent(RESERVED_PROBE, ctx.own_labels)
    body = _label_patch(ctx.own, key)
    return Sent(
        f"label {key} on this Node ({ctx.api.node_name})", lambda: ctx.api.patch_node(body, dry_run=True)
    )


def _probe_taint(ctx: Context) -> Sent:
    body = {"spec": {"taints": _with_probe_taint(ctx.own)}}
    return Sent(f"a taint on this Node ({ctx.api.node_name})", lambda: ctx.api.patch_node(body, dry_run=True))


def _probe_managed_fields(ctx: Context) -> Sent:
    """The Node's managedFields as read, plus an Apply entry of another manager claiming a label: a
    merge patch replaces the whole list, and the server keeps what a write to the main resource supplies,
    so only the policy's rule that other managers' entries stay as they were refuses it. (A later
    server-side apply by that manager would remove what the entry claims: round 3's forge.)"""
    entries: list[Any] = list((ctx.own.get("metadata") or {}).get("managedFields") or [])
    managers = {str(e.get("manager")) for e in entries if isinstance(e, Mapping)}
    manager = _absent(FORGED_MANAGER, dict.fromkeys(managers, ""))
    forged = {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {f"f:{ctx.allowed}": {}}}},
    }
    body = {"metadata": {"managedFields": [*entries, forged]}}
    return Sent(
        f"a managedFields entry of manager {manager} on this Node ({ctx.api.node_name})",
        lambda: ctx.api.patch_node(body, dry_run=True),
    )


# A rule added to the policy gets its probe here, as one entry.
PROBES: tuple[Probe, ...] = (
    Probe(OTHER_NODES, _probe_other_node),
    Probe(RESERVED_LABELS, _probe_reserved_label),
    Probe(TAINTS, _probe_taint),
    Probe(MANAGED_FIELDS, _probe_managed_fields, says="metadata.managedFields"),
)


def check_policy(
    api: NodeApi,
    policy: Policy | None = None,
    expected: str | None = None,
    probes: tuple[Probe, ...] = PROBES,
    said: set[str] | None = None,
) -> None:
    """Return if the policy named ``expected`` (default: ``expected_policy()``) refused every probe; raise
    PolicyNotEnforced naming each property that was admitted or refused by something else, and the ApiError
    itself for anything that is not a policy's answer (unreachable, RBAC, a webhook), or for any refusal of
    the label this writer may set, so the caller's retry policy and error reporting apply as to any
    request. ``policy``'s first allowed prefix names the probe label (default: nfd-lite's defaults).
    ``said``: the skipped probes already logged by an earlier check of the same writer."""
    name = expected or expected_policy()
    prefix = (policy or Policy()).allow_prefixes[0]
    own = api.get_node()
    own_labels = _labels(own)
    allowed = _absent(prefix + PROBE_NAME, own_labels)
    api.patch_node(_label_patch(own, allowed), dry_run=True)

    ctx = Context(api, own, own_labels, allowed, set() if said is None else said)
    findings: list[tuple[str, str]] = []
    for probe in probes:
        sent = probe.build(ctx)
        if sent is not None:
            findings += [(probe.prop, text) for text in _unless_refused(name, probe, sent)]
    if findings:
        raise PolicyNotEnforced(name, findings)


class AdmissionCheck:
    """When the policy is checked, and what the last check found. Before the first write the check must
    pass (``PolicyNotEnforced`` and any ``ApiError`` are raised: nothing is written until it does). After
    that it runs again every ``interval`` seconds (0: only after ``due_now``); a failure then sets
    ``missing`` (the /readyz reason), the ``enforced`` gauge to 0 and says so in one line, once per change,
    until a check passes again."""

    def __init__(
        self,
        api: NodeApi,
        policy: Policy,
        interval: float,
        enforced: Gauge,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.policy = policy
        self.name = expected_policy()
        self.interval = interval
        self.enforced = enforced
        self._clock = clock
        self._next: float | None = None  # when the next check is due; None until one has passed
        self.missing: str | None = None  # one line while the last check found the policy not enforced
        self._missing_props: list[str] = []
        self._said: set[str] = set()  # skipped probes logged

    @property
    def passed_once(self) -> bool:
        return self._next is not None

    def next_check(self) -> float | None:
        """When (monotonic) a check is due, once the first has passed and while checks are periodic."""
        return self._next if self._next is not None and self.interval > 0 else None

    def due_now(self) -> None:
        """Check before the next write (a long API outage may have been an upgrade that dropped it)."""
        if self._next is not None:
            self._next = self._clock()

    def retry_in(self, seconds: float) -> None:
        """A check could not be made (no answer, or an answer that is not a policy's): try again then."""
        if self._next is not None:
            self._next = self._clock() + seconds

    def run_when_due(self) -> None:
        if self._next is not None and self._clock() < self._next:
            return
        first = self._next is None
        try:
            check_policy(self.api, self.policy, self.name, said=self._said)
        except PolicyNotEnforced as err:
            if first:
                raise
            self._schedule()
            self._not_enforced(err)
            return
        self._schedule()
        self.enforced.set(1)
        if self.missing is not None:
            log.info("the admission policy '%s' fences this writer again", self.name)
        self.missing, self._missing_props = None, []

    def _schedule(self) -> None:
        self._next = self._clock() + (self.interval if self.interval > 0 else float("inf"))

    def _not_enforced(self, err: PolicyNotEnforced) -> None:
        self.enforced.set(0)
        self.missing = err.summary()
        if err.missing != self._missing_props:
            self._missing_props = err.missing
            when = f"every {self.interval:g} s" if self.interval > 0 else "after a long API outage"
            log.error(
                "the admission policy '%s' no longer fences this writer: %s (dry runs: nothing was stored); "
                "labels are still written, /readyz fails and nfd_lite_admission_policy_enforced is 0 until "
                "it does again (checked %s): restore the policy and its binding as in "
                "rbac/admission-policy.yaml or the chart",
                err.policy,
                "; ".join(err.findings),
                when,
            )


def _unless_refused(expected: str, probe: Probe, sent: Sent) -> list[str]:
    """[] if the policy named ``expected`` refused ``sent`` (naming ``probe.says``, if set); else one
    finding naming ``probe.prop``."""
    try:
        sent.send()
    except ApiError as err:
        denial = policy_denial(err.message)
        if denial is None:
            raise
        if denial.policy != expected or denial.binding not in (None, expected):
            by = f"was refused by {denial}, not by '{expected}'"
            return [f"{probe.prop} are not refused by it: {sent.what} {by}"]
        if probe.says is not None and probe.says not in err.message:
            return [
                f"{probe.prop} are not refused by its rule for them: {sent.what} was refused for another "
                f"reason, not naming {probe.says} ({err.message})"
            ]
        return []
    return [f"{probe.prop} are not refused: {sent.what} was admitted"]


def _other_node(api: NodeApi, said: set[str]) -> dict[str, Any] | None:
    """A Node to probe other than this one, or None (logged once per ``said``: that property is not
    checked, and why)."""
    try:
        other = api.other_node()
    except Forbidden as err:
        if policy_denial(err.message) is not None:
            raise
        kind, reason = "forbidden", f"this token may not list Nodes ({err.message})"
    else:
        if other is not None:
            return other
        kind, reason = "alone", "there is no other Node (a one-node cluster)"
    if kind not in said:
        said.add(kind)
        log.warning(
            "admission self-check: %s is not checked, as %s; it is tried again at each check",
            OTHER_NODES,
            reason,
        )
    return None


def _labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def _label_patch(node: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A new label as a real write sends it: recorded in the ownership annotation (the policy refuses a
    created label it does not list), so that only the rule a probe is about can refuse it."""
    owned = read_record((node.get("metadata") or {}).get("annotations") or {})
    return {
        "metadata": {
            "labels": {key: PROBE_VALUE},
            "annotations": {OWNED_ANNOTATION: write_record(owned | {key})},
        }
    }


def _absent(key: str, *labels: Mapping[str, str]) -> str:
    """``key``, or ``key`` with a number appended, that none of ``labels`` carries: the probe adds a
    label, so the policy's rules about changing an existing one never decide the answer."""
    candidate, n = key, 0
    while any(candidate in each for each in labels):
        n += 1
        candidate = f"{key}-{n}"
    return candidate


def _with_probe_taint(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Node's taints with the probe's added (or, if already there, removed): a change either way."""
    taints: list[dict[str, Any]] = list((node.get("spec") or {}).get("taints") or [])
    kept = [t for t in taints if t.get("key") != TAINT_PROBE]
    if len(kept) != len(taints):
        return kept
    return [*taints, {"key": TAINT_PROBE, "value": PROBE_VALUE, "effect": "NoSchedule"}]
