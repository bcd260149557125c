"""The benchmarks' one entry point, `python -m benchmarks PIECE...`: what it offers and how it refuses a
piece it does not have. Nothing here measures anything (no piece runs, nothing is installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.catalogue import EXTRA, PIECES

ROOT = Path(__file__).resolve().parents[1]


def benchmarks(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_help_lists_every_piece_on_a_line_of_its_own() -> None:
    done = benchmarks("--help")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name, (what, _) in (PIECES | EXTRA).items():
        assert len([line for line in lines if line.split()[:1] == [name] and what in line]) == 1, name


def test_an_unknown_piece_is_one_line_naming_it_and_the_valid_ones_and_exit_2() -> None:
    done = benchmarks("gfd-oneshot", "no-such-piece")
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert "unknown piece no-such-piece;" in line
    assert all(name in line for name in PIECES | EXTRA)
