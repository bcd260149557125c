#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, then runs
# lint, format check, type check and every test. This is the command CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# What this run installs and where; everything is kept, so a second run reuses it and only checks versions.
gomod=$(go env GOMODCACHE 2>/dev/null || echo "$HOME/go/pkg/mod")
gocache=$(go env GOCACHE 2>/dev/null || echo "$HOME/.cache/go-build")
where() {
  local state="not there yet: installed now"
  [ -e "$2" ] && state="there ($(du -sh "$2" 2>/dev/null | cut -f1)): reused"
  printf 'test.sh: %-62s %-18s %s\n' "$1" "${2/#$HOME/\~}" "$state" >&2
}
echo "test.sh: installs (first run: a few GB and minutes of building; nothing outside these places" \
  "but the image test's apt packages)" >&2
where "Python venv: the project and its test dependencies" .venv
where "checkov (its own venv: it pins many packages)" .venv-checkov
where "helm 3 and 4, kubectl, shellcheck; links to the tools below" .cache/tools
where "Go builds: Kubernetes, etcd, NFD, NVIDIA GFD and device plugin, kwok, Prometheus, registry, cosign" .cache/peers
where "Go module cache (the sources of those builds)" "$gomod"
where "Go build cache" "$gocache"
if [ "$(id -u)" = 0 ]; then
  where "image test: Debian base images (amd64, arm64)" .cache/image-base
  where "image test: buildah storage" .cache/buildah
  echo "test.sh: image test: apt-get installs buildah, debootstrap, qemu-user-static, binfmt-support" \
    "when missing" >&2
  echo "test.sh: real node (tests/node): apt-get installs containerd, runc, containernetworking-plugins," \
    "iptables, conntrack, busybox-static when missing; runs in /tmp/gpu-labeller-node" >&2
fi

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'

# helm v3 and v4, kubectl, checkov, actionlint, shellcheck and the Go-built peers, pinned and cached
scripts/install-tools.sh

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest "$@"
