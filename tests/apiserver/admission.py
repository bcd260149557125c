"""ValidatingAdmissionPolicy evaluation with cel-expr-python, as the API server runs it for a write.

Only what this project's policy needs is modelled: matchConstraints.resourceRules (groups, versions,
operations, resources), matchConditions, variables, validations with message/messageExpression/reason,
failurePolicy, and bindings with validationActions Deny. Params and namespace selectors are not.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from cel_expr_python import cel
from cel_expr_python.ext import ext_optional, ext_strings

from tests.apiserver.auth import UserInfo
from tests.apiserver.status import ApiError, qualified

_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
_VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "variables")


@lru_cache(maxsize=1)
def _env() -> Any:
    # The API server's CEL has the optional and strings libraries; `DYN` mirrors the unstructured values.
    return cel.NewEnv(
        variables=dict.fromkeys(_VARIABLES, cel.Type.DYN),
        extensions=[ext_optional.ExtOptional(), ext_strings.ExtStrings()],
    )


@lru_cache(maxsize=512)
def compile_expression(expression: str) -> Any:
    return _env().compile(expression)


class EvalError(Exception):
    pass


def activation(data: dict[str, Any]) -> Any:
    """The data converted to CEL values once, for several expressions (ten times cheaper than per call)."""
    try:
        return _env().Activation(data=data)
    except Exception as exc:
        raise EvalError(str(exc)) from exc


def evaluate(expression: str, data: dict[str, Any] | Any) -> Any:
    """Plain Python value of a CEL expression over a dict or an activation; EvalError for any CEL error."""
    try:
        compiled = compile_expression(expression)
        result = compiled.eval(data=data) if isinstance(data, dict) else compiled.eval(data)
        return result.plain_value()
    except Exception as exc:  # the bindings raise plain RuntimeError/ValueError for CEL errors
        raise EvalError(str(exc)) from exc


@dataclass(frozen=True)
class Request:
    """What admission sees of a write."""

    operation: str  # CREATE, UPDATE, DELETE
    api_group: str
    version: str
    resource: str
    kind: str
    name: str
    user: UserInfo
    subresource: str = ""
    dry_run: bool = False

    def as_cel(self) -> dict[str, Any]:
        gvk = {"group": self.api_group, "version": self.version, "kind": self.kind}
        gvr = {"group": self.api_group, "version": self.version, "resource": self.resource}
        body: dict[str, Any] = {
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": self.name,
            "operation": self.operation,
            "userInfo": self.user.as_admission(),
            "dryRun": self.dry_run,
        }
        if self.subresource:  # omitempty, as in the real AdmissionRequest
            body["subResource"] = self.subresource
        return body


class Admission:
    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self.policies = {
            d["metadata"]["name"]: d for d in documents if d.get("kind") == "ValidatingAdmissionPolicy"
        }
        self.bindings = [d for d in documents if d.get("kind") == "ValidatingAdmissionPolicyBinding"]

    @classmethod
    def from_dir(cls, path: Path) -> Admission:
        docs: list[dict[str, Any]] = []
        for file in sorted(path.glob("*.yaml")) if path.is_dir() else []:
            docs += [d for d in yaml.safe_load_all(file.read_text()) if isinstance(d, dict)]
        return cls(docs)

    def validate(self, req: Request, obj: dict[str, Any] | None, old: dict[str, Any] | None) -> None:
        """Raise the real server's error for the first binding whose policy denies the request."""
        for binding in self.bindings:
            policy = self.policies.get(binding["spec"]["policyName"])
            if policy is None or "Deny" not in binding["spec"].get("validationActions", []):
                continue
            denial = _run_policy(policy["spec"], req, obj, old)
            if denial is not None:
                message, reason = denial
                text = (
                    f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding "
                    f"'{binding['metadata']['name']}' denied request: {message}"
                )
                subject = f'{qualified(req.resource, req.api_group)} "{req.name}"'
                raise ApiError(
                    _CODES.get(reason, 422),
                    f"{subject} is forbidden: {text}",
                    reason=reason,
                    details={"name": req.name, "kind": req.resource, "causes": [{"message": text}]},
                )


def _matches(spec: dict[str, Any], req: Request) -> bool:
    combined = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
    for rule in (spec.get("matchConstraints") or {}).get("resourceRules") or []:
        if (
            _listed(rule.get("apiGroups"), req.api_group)
            and _listed(rule.get("apiVersions"), req.version)
            and _listed(rule.get("operations"), req.operation)
            and any(fnmatch.fnmatchcase(combined, r) or r == "*" for r in rule.get("resources") or [])
        ):
            return True
    return False


def _listed(values: list[str] | None, value: str) -> bool:
    return bool(values) and ("*" in values or value in values)  # type: ignore[operator]


def _run_policy(
    spec: dict[str, Any], req: Request, obj: dict[str, Any] | None, old: dict[str, Any] | None
) -> tuple[str, str] | None:
    """(message, reason) when the policy denies, None when it allows or does not apply."""
    if not _matches(spec, req):
        return None
    fail_closed = spec.get("failurePolicy", "Fail") == "Fail"
    data: dict[str, Any] = {
        "object": obj,
        "oldObject": old,
        "request": req.as_cel(),
        "params": None,
        "namespaceObject": None,
    }
    try:
        bound = activation(data | {"variables": {}})
        for condition in spec.get("matchConditions") or []:
            if evaluate(condition["expression"], bound) is not True:
                return None
        variables: dict[str, Any] = {}
        for variable in spec.get("variables") or []:
            # A variable that fails stays unset: any validation using it then errors, as on the real server.
            try:
                variables[variable["name"]] = evaluate(variable["expression"], bound)
            except EvalError:
                continue
            bound = activation(data | {"variables": variables})
        for validation in spec.get("validations") or []:
            if evaluate(validation["expression"], bound) is True:
                continue
            return _message(validation, bound), validation.get("reason", "Invalid")
    except EvalError as exc:
        return (f"expression resulted in error: {exc}", "Invalid") if fail_closed else None
    return None


def _message(validation: dict[str, Any], data: Any) -> str:
    if "messageExpression" in validation:
        try:
            text = evaluate(validation["messageExpression"], data)
            if isinstance(text, str) and text.strip():
                return text
        except EvalError:
            pass  # the real server falls back to `message`
    return str(validation.get("message") or f"failed expression: {validation['expression']}")
