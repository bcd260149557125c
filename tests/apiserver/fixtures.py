"""Pytest fixtures for the fake Kubernetes API server."""
