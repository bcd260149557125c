#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, then runs
# lint, format check, type check and every test. This is the command CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'

# helm v3 and v4, kubectl and checkov, pinned and cached under .cache/tools and .venv-checkov
scripts/install-tools.sh

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest "$@"
