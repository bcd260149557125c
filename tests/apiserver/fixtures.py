"""Pytest fixtures for the fake Kubernetes API server (registered in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.apiserver.server import FakeApiServer


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """A started FakeApiServer with the project's RBAC from rbac/. The admission policy is not loaded:
    it is proven on the real kube-apiserver (tests/kube), and this server is kept for fault injection."""
    with FakeApiServer(admission=False) as server:
        yield server
