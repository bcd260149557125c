"""What a failed request means: the error class decided once from the server's answer, and the one line a
human reads for a 401 or 403."""

from __future__ import annotations

import json

import pytest

from nfd_lite.api.errors import (
    AccessDenied,
    AdmissionRefused,
    ApiError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    Gone,
    NotFound,
    ServerError,
    Throttled,
    Unauthorized,
    api_error,
    explain,
    response_error,
)

# As the API server words them: the validating dispatcher's denial (with and without a binding's name)
# and RBAC's (here for a node and a service account whose names happen to contain "admission").
POLICY_DENIAL = (
    "nodes \"gpu-1\" is forbidden: ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite' with binding "
    "'gpu-labeller-nfd-lite' denied request: nfd-lite may only change the Node named in its token"
)
UNBOUND_POLICY_DENIAL = "ValidatingAdmissionPolicy 'p' denied request: no"
RBAC_DENIAL = (
    'nodes "admission-1" is forbidden: User "system:serviceaccount:admission:nfd-lite" cannot patch '
    'resource "nodes" in API group "" at the cluster scope'
)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (0, ConnectionFailed),
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (410, Gone),
        (429, Throttled),
        (500, ServerError),
        (503, ServerError),
        (422, ApiError),
    ],
)
def test_each_status_is_the_class_saying_what_it_means(status: int, kind: type[ApiError]) -> None:
    err = api_error(status, "m", verb="get")
    assert type(err) is kind
    assert (err.status, err.message, err.verb) == (status, "m", "get")


def test_a_refusal_by_a_validating_admission_policy_is_admission_refused() -> None:
    for message in (POLICY_DENIAL, UNBOUND_POLICY_DENIAL):
        err = api_error(403, message, verb="patch")
        assert isinstance(err, AdmissionRefused) and isinstance(err, Forbidden)


def test_rbac_refusals_are_forbidden_whatever_the_names_in_them() -> None:
    err = api_error(403, RBAC_DENIAL, verb="patch")
    assert type(err) is Forbidden
    assert type(api_error(403, "the ValidatingAdmissionPolicy is installed", verb="patch")) is Forbidden


def test_only_a_403_is_an_admission_refusal() -> None:
    assert type(api_error(422, POLICY_DENIAL)) is ApiError  # a policy whose reason is Invalid


def test_the_message_comes_from_the_status_object_or_the_body() -> None:
    status = json.dumps({"kind": "Status", "message": POLICY_DENIAL, "reason": "Forbidden"}).encode()
    err = response_error(403, status, {}, verb="patch")
    assert isinstance(err, AdmissionRefused) and err.message == POLICY_DENIAL
    reason_only = json.dumps({"kind": "Status", "reason": "NotFound"}).encode()
    assert response_error(404, reason_only, {}, verb="get").message == "NotFound"
    assert response_error(502, b"<html>" + b"x" * 500, {}, verb="get").message == "<html>" + "x" * 194
    assert response_error(502, b"", {}, verb="get").message == "HTTP 502"


@pytest.mark.parametrize(
    ("status", "header", "retry_after"),
    [(429, "3", 3.0), (503, "0.5", 0.5), (429, "-2", 0.0), (429, "soon", None), (500, "3", None)],
)
def test_retry_after_is_kept_for_429_and_503_only(
    status: int, header: str, retry_after: float | None
) -> None:
    assert response_error(status, b"", {"Retry-After": header}, verb="get").retry_after == retry_after


@pytest.mark.parametrize(
    ("err", "starts"),
    [
        (api_error(401, "Unauthorized", verb="get"), "the API server rejected the credentials (401)"),
        (api_error(403, POLICY_DENIAL, verb="patch"), "an admission policy refused the patch of this node"),
        (
            api_error(403, RBAC_DENIAL, verb="patch"),
            "permission denied (403): the service account needs 'patch'",
        ),
    ],
)
def test_explain_says_which_credential_permission_or_policy(err: AccessDenied, starts: str) -> None:
    line = explain(err)
    assert line.startswith(starts)
    assert line.endswith(f"({err.message})")


def test_a_managed_fields_refusal_is_not_blamed_on_the_label_prefixes() -> None:
    """The policy's managedFields rule refusing a write once sent operators to the prefixes."""
    message = (
        "ValidatingAdmissionPolicy 'gpu-labeller-nfd-lite' with binding 'gpu-labeller-nfd-lite' denied "
        "request: nfd-lite may not change metadata.managedFields"
    )
    line = explain(api_error(403, message, verb="patch"))
    assert "field-ownership record (metadata.managedFields)" in line
    assert "prefix" not in line
