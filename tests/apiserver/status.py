"""Kubernetes `Status` objects and the error type the fake server raises to answer with one."""

from __future__ import annotations

from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(
    code: int,
    message: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The body the real API server sends with every non-2xx answer (and inside watch ERROR events)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else REASONS.get(code, ""),
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """Raised anywhere while handling a request; the handler turns it into a Status answer."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return status_body(self.code, self.message, self.reason, self.details)


def qualified(resource: str, group: str) -> str:
    """`nodes` or `runtimeclasses.node.k8s.io`, as the real server names a resource in messages."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    details = {"name": name, "kind": resource} | ({"group": group} if group else {})
    return ApiError(404, f'{qualified(resource, group)} "{name}" not found', details=details)


def conflict(resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        details={"name": name, "kind": resource},
    )


# field.ErrorType: the words a cause's message starts with -> the cause's reason.
_CAUSE_TYPES = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Unsupported value": "FieldValueNotSupported",
    "Too long": "FieldValueTooLong",
    "Forbidden": "FieldValueForbidden",
}


def _cause_type(problem: str) -> str:
    return next((t for words, t in _CAUSE_TYPES.items() if problem.startswith(words)), "FieldValueInvalid")


def invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 as the real server words it: `Node "x" is invalid: field: problem`, or with several distinct
    problems `Node "x" is invalid: [field: one, field: two]` (each cause is listed in the details)."""
    distinct = list(dict.fromkeys(f"{field}: {problem}" for field, problem in causes))
    text = distinct[0] if len(distinct) == 1 else "[" + ", ".join(distinct) + "]"
    return ApiError(
        422,
        f'{kind} "{name}" is invalid: {text}',
        details={
            "name": name,
            "kind": kind,
            "causes": [
                {"reason": _cause_type(problem), "message": problem, "field": field}
                for field, problem in causes
            ],
        },
    )
