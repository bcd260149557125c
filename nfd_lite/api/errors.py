"""What a failed API request means: one ApiError subclass per kind of failure, decided here once from the
server's answer, and one line for a human when a credential, permission or policy is missing."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

# How the API server words a ValidatingAdmissionPolicy's denial (its validating dispatcher), with or
# without the binding's name; every other 403 is RBAC's or another admission controller's.
_POLICY_DENIAL = re.compile(
    r"ValidatingAdmissionPolicy '(?P<policy>[^']*)'(?: with binding '(?P<binding>[^']*)')? denied request"
)


@dataclass(frozen=True)
class PolicyDenial:
    """Which ValidatingAdmissionPolicy (and binding, when the server names it) refused a request."""

    policy: str
    binding: str | None

    def __str__(self) -> str:
        named = f"ValidatingAdmissionPolicy '{self.policy}'"
        return named + (f" with binding '{self.binding}'" if self.binding is not None else "")


def policy_denial(message: str) -> PolicyDenial | None:
    """The policy the server names in ``message`` as having denied the request, or None. A policy's
    ``reason`` sets the status (403, but 422 by default, or 401, 413), so this reads the wording only."""
    found = _POLICY_DENIAL.search(message)
    return PolicyDenial(found["policy"], found["binding"]) if found else None


class ApiError(Exception):
    """A failed request: ``status`` is the HTTP code, 0 for connection errors and timeouts. Callers tell
    failures apart by subclass (what the failure means), never by comparing ``status`` or the message."""

    def __init__(
        self, status: int, message: str, *, retry_after: float | None = None, verb: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after  # seconds the server asked us to wait (429, 503), if it said
        self.verb = verb  # the Kubernetes verb of the failed request: get, list, watch or patch

    @property
    def code(self) -> str:
        """Metric label: the HTTP code, or "connection"."""
        return str(self.status) if self.status else "connection"


class ConnectionFailed(ApiError):
    """No answer: the connection failed or timed out, or a watch stream broke off (status 0)."""


class UnusableAnswer(ConnectionFailed):
    """An answer that cannot be used (status 0): over the size cap, still incomplete at its deadline (a
    server dripping it), not JSON, or a watch the server keeps open past its timeout. Retried as a broken
    connection is, on a new connection: what a server answers next may be whole."""


class AccessDenied(ApiError):
    """401 or 403: a credential or permission is missing, which retrying alone does not fix."""


class Unauthorized(AccessDenied):
    """401: the server did not accept the credentials."""


class Forbidden(AccessDenied):
    """403: RBAC or an admission controller refused the request."""


class AdmissionRefused(Forbidden):
    """403 from a ValidatingAdmissionPolicy: RBAC allowed the request and the policy refused it."""


class NotFound(ApiError):
    """404: the Node does not exist."""


class Conflict(ApiError):
    """409: the Node changed since it was read (the patch carried a stale resourceVersion)."""


class Gone(ApiError):
    """410: the watch's resourceVersion is too old to resume from; list again."""


class Throttled(ApiError):
    """429: too many requests; ``retry_after`` says how long to wait, when the server said."""


class ServerError(ApiError):
    """5xx: the server (or something in front of it) failed."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    429: Throttled,
}


def api_error(status: int, message: str, *, retry_after: float | None = None, verb: str = "") -> ApiError:
    """The ApiError subclass saying what ``status`` and the server's ``message`` mean."""
    if status == 0:
        kind: type[ApiError] = ConnectionFailed
    elif status >= 500:
        kind = ServerError
    elif status == 403 and _POLICY_DENIAL.search(message):
        kind = AdmissionRefused
    else:
        kind = _BY_STATUS.get(status, ApiError)
    return kind(status, message, retry_after=retry_after, verb=verb)


def response_error(status: int, body: bytes, headers: Mapping[str, str], *, verb: str) -> ApiError:
    """The error of an HTTP answer that is not 2xx: its Status object's message (or the body's start)."""
    try:
        decoded = json.loads(body)
        message = str(decoded.get("message") or decoded.get("reason") or "")
    except (ValueError, AttributeError):
        message = body[:200].decode("utf-8", "replace")
    retry_after = _retry_after(headers) if status in (429, 503) else None
    return api_error(status, message or f"HTTP {status}", retry_after=retry_after, verb=verb)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        return max(0.0, float(headers.get("Retry-After", "")))
    except ValueError:
        return None


def _policy_hint(message: str) -> str:
    """What a policy refusal means, from the rule its message names: blaming the prefixes for every refusal
    sent operators to the wrong setting when the policy refused the server's own managedFields bookkeeping."""
    if "managedFields" in message:
        return (
            "it refused the field-ownership record (metadata.managedFields) the request would leave; "
            "rbac/README.md says which changes of it the policy admits"
        )
    if "may only change labels under" in message:
        return "the label is outside the allowed prefixes (--allow-prefix and the policy's own list)"
    return "the policy's message says which rule"


def explain(err: AccessDenied) -> str:
    """One clear line for 401/403: which credential or permission is missing, or which policy refused."""
    if isinstance(err, Unauthorized):
        return (
            "the API server rejected the credentials (401): the service account token is missing, expired "
            f"or revoked; the token file is re-read on every retry ({err.message})"
        )
    if isinstance(err, AdmissionRefused):
        return (
            f"an admission policy refused the {err.verb or 'request'} of this node (403): "
            f"{_policy_hint(err.message)} ({err.message})"
        )
    return (
        f"permission denied (403): the service account needs '{err.verb}' on core 'nodes' for this node; "
        f"check ClusterRole/ClusterRoleBinding gpu-labeller-nfd-lite ({err.message})"
    )
