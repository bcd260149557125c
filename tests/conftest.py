"""Shared pytest set-up: the real control plane (tests/kube), the real one-node cluster (tests/node), the
project image built once per session (tests/image_build.py) and the fault-injecting fake API server
(tests/apiserver) register their fixtures here."""

pytest_plugins = [
    "tests.apiserver.fixtures",
    "tests.kube.fixtures",
    "tests.node.fixtures",
    "tests.image_build",
]
