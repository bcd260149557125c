"""Shared pytest set-up: the fake API server fixture lives with the server itself."""

pytest_plugins = ["tests.apiserver.fixtures"]
