"""The bottom-up walk both modes make: each layer judged in order; once one fails, the layers above it are
skipped, as a person would, since their answers would rest on the broken one."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from gfd.doctor.model import Check, Finding, Layer

Judge = Callable[[], list[Finding]]  # a layer's findings, asked only when every layer below it passed
Blocked = Callable[[int], list[Finding]]  # a layer's findings instead, once layer N below it failed


def skipped(failed: int) -> list[Finding]:
    """What a layer says by default when layer ``failed`` below it failed."""
    return [Finding("SKIP", f"fix layer {failed} first")]


def bottom_up(
    layers: Iterable[tuple[Layer, Judge]],
    failed_below: int | None = None,
    *,
    blocked: Mapping[Layer, Blocked] | None = None,
) -> list[Check]:
    """Judge each layer in order. ``failed_below``: a layer under these already failed. ``blocked``: the
    layers that still answer something of their own above a failure (checks that read only the cluster)."""
    checks: list[Check] = []
    failed = failed_below
    instead = blocked or {}
    for layer, judge in layers:
        findings = judge() if failed is None else instead.get(layer, skipped)(failed)
        checks.extend(_check(layer, f) for f in findings)
        if failed is None and any(f.status == "FAIL" for f in findings):
            failed = layer.number
    return checks


def _check(layer: Layer, f: Finding) -> Check:
    name = f"{layer.name}: {f.item}" if f.item else layer.name
    return Check(layer.number, name, layer.purpose, f.status, f.evidence, f.fix)


def first_failure(checks: list[Check]) -> Check | None:
    return next((c for c in checks if c.status == "FAIL"), None)
