"""Pytest fixtures for the fake Kubernetes API server (registered in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.apiserver.server import FakeApiServer


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """A started FakeApiServer with the project's rbac/ manifests (RBAC and admission policy) loaded."""
    with FakeApiServer() as server:
        yield server
