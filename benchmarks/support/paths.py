"""The repository the benchmarks measure: they run from its root (``python -m benchmarks``) and read its
files (rbac/, profiles/, README.md, the peers built under .cache/) from here."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
