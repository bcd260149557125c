"""The bottom-up walk (gfd/doctor/engine.py): once a layer fails, the layers above it are skipped."""

from __future__ import annotations

from gfd.doctor.engine import bottom_up
from gfd.doctor.model import Finding
from gfd.doctor.smoke.model import LAYERS


def test_layers_above_the_first_failure_are_skipped():
    failing = [Finding("FAIL", "broken")]
    checks = bottom_up([(layer, (lambda: failing) if layer.number == 5 else (lambda: [Finding("PASS", "ok")]))
                        for layer in LAYERS])  # fmt: skip
    assert [c.status for c in checks] == ["PASS"] * 4 + ["FAIL"] + ["SKIP"] * 5
    assert checks[-1].evidence == "fix layer 5 first"
    skipped = bottom_up([(layer, lambda: failing) for layer in LAYERS[4:]], failed_below=3)
    assert {c.evidence for c in skipped} == {"fix layer 3 first"}
