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
name, as in rbac/ and the chart), and by the rule for that property, recognised by its message: a policy
by another name that happens to refuse a probe, or another rule of ours (the label cap, a prefix the
policy does not allow), says nothing about the property. Only where a refusal names another rule is a
label this writer may set sent to its own Node, also as a dry run: refused too, the fault is not the
property's (a token without a node claim, a cap reached) and is raised as any failed request is;
admitted, the property is not enforced.

The check reads no Node of its own: it probes the newest one the writer's watch delivered. It costs one
LIST of two Nodes (the other Node to probe, and the cluster's size) and four dry runs.

``AdmissionCheck`` runs the check before the first write (where a failure stops the writer) and again
while it runs, where a failure is an alarm (/readyz, a metric, one log line) and the writer goes on
writing: docs/nfd-lite.md says why. Every writer of a cluster proves the same policy, so the repeats are
shared out: each writer checks about every ``admission_check_interval`` times the number of Nodes (at
most once a day, at a random point of it), and the fleet as a whole about once per interval, whatever
its size. After a failed check it checks every interval, so that the alarm ends soon after the policy is
back.
"""

from __future__ import annotations

import logging
import os
import random
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

# A writer's own period between repeated checks is the interval times the cluster's Nodes, at most this.
LONGEST_PERIOD = 86400.0


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
    """What every probe starts from: the writer's own Node as last seen, the probe label, another Node."""

    api: NodeApi
    own: Mapping[str, Any]
    own_labels: Mapping[str, str]
    allowed: str  # a label key this writer may set, absent from its Node
    other: Mapping[str, Any] | None  # another Node to probe (None: none could be listed)


@dataclass(frozen=True)
class Sent:
    """A probe's request: what it is, in a finding's words, and how to send it (always a dry run)."""

    what: str
    send: Callable[[], object]


@dataclass(frozen=True)
class Probe:
    """One property: a dry-run request that RBAC allows and only the policy's rule for ``prop`` refuses.
    ``build`` returns None where it cannot be checked (and says why). ``says``: what the refusal names
    when that rule refuses it (any of them: a rule's messageExpression, or its message where the expression
    fails), so that a refusal for another reason does not pass."""

    prop: str
    build: Callable[[Context], Sent | None]
    says: tuple[str, ...]


def _probe_other_node(ctx: Context) -> Sent | None:
    other = ctx.other
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


# A rule added to the policy gets its probe here, as one entry, with the words of its messages
# (rbac/admission-policy.yaml).
PROBES: tuple[Probe, ...] = (
    Probe(OTHER_NODES, _probe_other_node, ("may only change its own Node", "may only change the Node named")),
    Probe(RESERVED_LABELS, _probe_reserved_label, ("may only change labels under",)),
    Probe(TAINTS, _probe_taint, ("may not add, change or remove taints",)),
    Probe(MANAGED_FIELDS, _probe_managed_fields, ("metadata.managedFields",)),
)


def check_policy(
    api: NodeApi,
    policy: Policy | None = None,
    expected: str | None = None,
    probes: tuple[Probe, ...] = PROBES,
    said: set[str] | None = None,
    own: Mapping[str, Any] | None = None,
) -> int | None:
    """Return if the policy named ``expected`` (default: ``expected_policy()``) refused every probe by the
    probe's rule; raise PolicyNotEnforced naming each property that was admitted or refused by something
    else, and the ApiError itself for anything that is not a policy's answer (unreachable, RBAC, a
    webhook), or where the label this writer may set is refused too, so the caller's retry policy and
    error reporting apply as to any request. ``policy``'s first allowed prefix names the probe label
    (default: nfd-lite's defaults). ``said``: the skipped probes already logged by an earlier check of the
    same writer. ``own``: this writer's Node as last seen (default: read it). Returns the number of Nodes
    in the cluster as its list counted them, None where it could not list them."""
    name = expected or expected_policy()
    prefix = (policy or Policy()).allow_prefixes[0]
    if not own:
        own = api.get_node()
    own_labels = _labels(own)
    allowed = _absent(prefix + PROBE_NAME, own_labels)

    other, nodes = _other_node(api, set() if said is None else said)
    ctx = Context(api, own, own_labels, allowed, other)
    findings: list[tuple[str, str]] = []
    elsewhere: list[tuple[str, str]] = []  # refused by our policy, but naming another rule
    for probe in probes:
        sent = probe.build(ctx)
        if sent is not None:
            verdict = _unless_refused(name, probe, sent)
            if verdict is not None:
                (elsewhere if verdict[0] else findings).append((probe.prop, verdict[1]))
    if elsewhere:
        # Raises the refusal where a label this writer may set is refused too: nothing is known then.
        api.patch_node(_label_patch(own, allowed), dry_run=True)
        findings += elsewhere
    if findings:
        raise PolicyNotEnforced(name, findings)
    return nodes


class AdmissionCheck:
    """When the policy is checked, and what the last check found. Before the first write the check must
    pass (``PolicyNotEnforced`` and any ``ApiError`` are raised: nothing is written until it does). After
    that it runs again while the writer runs (``interval`` 0: only after ``due_now``), each writer about
    every ``interval`` times the Nodes the last check counted, at most LONGEST_PERIOD, at a random point
    between half and one and a half of that, so that writers started together do not check together and
    the fleet as a whole checks about once per ``interval``. A failure then sets ``missing`` (the /readyz
    reason), the ``enforced`` gauge to 0 and says so in one line, once per change, and the next check is
    due within ``interval``, until one passes again."""

    def __init__(
        self,
        api: NodeApi,
        policy: Policy,
        interval: float,
        enforced: Gauge,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.api = api
        self.policy = policy
        self.name = expected_policy()
        self.interval = interval
        self.enforced = enforced
        self._clock = clock
        self._jitter = jitter  # uniform in [0, 1)
        self._next: float | None = None  # when the next check is due; None until one has passed
        self.missing: str | None = None  # one line while the last check found the policy not enforced
        self._missing_props: list[str] = []
        self._said: set[str] = set()  # skipped probes logged
        self.nodes: int | None = None  # the cluster's Nodes as the last check counted them

    @property
    def passed_once(self) -> bool:
        return self._next is not None

    def next_check(self) -> float | None:
        """When (monotonic) a check is due, once the first has passed and while checks are periodic."""
        return self._next if self._next is not None and self.interval > 0 else None

    def period(self) -> float:
        """This writer's mean time between checks now: ``interval`` after a failed check, else its share
        of the fleet's (0: not periodic)."""
        if self.interval <= 0 or self.missing is not None:
            return max(self.interval, 0.0)
        return min(self.interval * max(1, self.nodes or 1), max(LONGEST_PERIOD, self.interval))

    def due_now(self) -> None:
        """Check before the next write (a long API outage may have been an upgrade that dropped it)."""
        if self._next is not None:
            self._next = self._clock()

    def retry_in(self, seconds: float) -> None:
        """A check could not be made (no answer, or an answer that is not a policy's): try again then."""
        if self._next is not None:
            self._next = self._clock() + seconds

    def run_when_due(self, own: Callable[[], Mapping[str, Any]] | None = None) -> None:
        """Check if due, probing the Node ``own`` returns (this writer's as last seen; default: read it),
        asked only then."""
        if self._next is not None and self._clock() < self._next:
            return
        first = self._next is None
        try:
            node = own() if own is not None else None
            nodes = check_policy(self.api, self.policy, self.name, said=self._said, own=node)
        except PolicyNotEnforced as err:
            if first:
                raise
            self._not_enforced(err)
            self._schedule()
            return
        if nodes is not None:
            self.nodes = nodes
        if self.missing is not None:
            log.info("the admission policy '%s' fences this writer again", self.name)
        self.missing, self._missing_props = None, []
        self._schedule()
        self.enforced.set(1)
        if first:
            log.info(
                "admission self-check: the policy '%s' fences this writer; %s",
                self.name,
                f"checked again in about {self.period():.0f} s ({self.nodes or 'an unknown number of'} Nodes "
                "share the checks)"
                if self.interval > 0
                else "checked again after a long API outage",
            )

    def _schedule(self) -> None:
        period = self.period()
        if period <= 0:
            self._next = float("inf")
        else:
            self._next = self._clock() + period * (0.5 + self._jitter())

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


def _unless_refused(expected: str, probe: Probe, sent: Sent) -> tuple[bool, str] | None:
    """None if the policy named ``expected`` refused ``sent`` by the rule ``probe.says`` names; else a
    finding naming ``probe.prop``, first True where our policy refused it by another rule."""
    try:
        sent.send()
    except ApiError as err:
        denial = policy_denial(err.message)
        if denial is None:
            raise
        if denial.policy != expected or denial.binding not in (None, expected):
            by = f"was refused by {denial}, not by '{expected}'"
            return False, f"{probe.prop} are not refused by it: {sent.what} {by}"
        if not any(words in err.message for words in probe.says):
            return True, (
                f"{probe.prop} are not refused by its rule for them: {sent.what} was refused for another "
                f"reason, not naming {probe.says[0]} ({err.message})"
            )
        return None
    return False, f"{probe.prop} are not refused: {sent.what} was admitted"


def _other_node(api: NodeApi, said: set[str]) -> tuple[dict[str, Any] | None, int | None]:
    """A Node to probe other than this one, or None (logged once per ``said``: that property is not
    checked, and why); and the cluster's Nodes as the list counted them (None where it was refused)."""
    count: int | None = None
    try:
        other, count = api.other_node()
    except Forbidden as err:
        if policy_denial(err.message) is not None:
            raise
        kind, reason = "forbidden", f"this token may not list Nodes ({err.message})"
    else:
        if other is not None:
            return other, count
        kind, reason = "alone", "there is no other Node (a one-node cluster)"
    if kind not in said:
        said.add(kind)
        log.warning(
            "admission self-check: %s is not checked, as %s; it is tried again at each check",
            OTHER_NODES,
            reason,
        )
    return None, count


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
