#!/usr/bin/env bash
# A release of gpu-labeller, step by step: what .github/workflows/release.yaml runs on a tag vX.Y.Z and what
# the rehearsal on the real test node runs against a registry on loopback (tests/node/test_release_rehearsal.py),
# so the two cannot drift. docs/deploy.md ("Releases") shows the commands.
#
# usage: scripts/release.sh STEP...   (in this order; each step may run in a job of its own)
#   image       root: each platform of PLATFORMS built by scripts/build-image.sh (which runs both commands in it
#               as uid 65532, arm64 under QEMU), labelled with the release, one manifest list of them pushed
#               to IMAGE:VERSION; its digest into OUT/image-digest
#   provenance  a SLSA v1 build provenance statement of IMAGE@digest into OUT/ (who built it from which commit)
#   sbom        a CycloneDX JSON SBOM of IMAGE@digest into OUT/: by syft where it is installed (the workflow:
#               the whole image, Debian's packages and the Python environment), else by cyclonedx-py over the
#               image's Python environment (/opt/gpu-labeller), the image pulled by its digest with buildah (root)
#   sign-image  cosign sign IMAGE@digest, and attest the provenance and the SBOM to it
#   package     the chart with version and appVersion VERSION and its image pinned to IMAGE:VERSION@digest
#               (values.yaml image.repository and image.digest, Artifact Hub's artifacthub.io/images), linted,
#               then rendered with no values: it must pull exactly that image; into OUT/gpu-labeller-VERSION.tgz
#   push-chart  helm push of that package to oci://CHARTS; its digest into OUT/chart-digest
#   sign-chart  cosign sign CHARTS/gpu-labeller@digest
# sbom and the signing steps need syft (or cyclonedx-py) and cosign: where they are not installed, the step says
# so and does nothing, unless REQUIRE_SIGNED=1 (the workflow), where it fails, as does a chart that would not pin
# its image.
# Signing is keyless (the workflow: its GitHub OIDC identity in a Fulcio certificate, each signature in Rekor's
# public log) unless COSIGN_KEY names a key file (`cosign generate-key-pair`'s cosign.key, its password in
# COSIGN_PASSWORD): then that key signs and nothing goes to Rekor (--tlog-upload=false), for signers and
# verifiers that cannot reach it; `cosign verify --key cosign.pub --private-infrastructure` verifies.
#
# Environment: VERSION (X.Y.Z, required); CHART_DIR (default charts/gpu-labeller); IMAGE (default the chart's
#   image.repository); CHARTS (default IMAGE's owner/charts); PLATFORMS (default linux/amd64,linux/arm64);
#   REGISTRY_CA (a CA certificate file the registry's TLS certificate chains to, for buildah and helm;
#   default: the system's trust); IMAGE_DIGEST (the manifest list's, for the later steps; default
#   OUT/image-digest); OUT (default $RUNNER_TEMP/release/VERSION, else .cache/release/VERSION); REVISION
#   (default git HEAD); HELM (default helm); BUILDAH_ROOT (default .cache/buildah-release, apart from the
#   development builds' storage); REQUIRE_SIGNED; COSIGN_KEY, COSIGN_PASSWORD (cosign reads it itself).
#   REGISTRY_CA is cosign's --registry-cacert too.
# Credentials: buildah's (buildah login, or REGISTRY_AUTH_FILE), helm's (helm registry login), cosign's and
# syft's (docker login). In GitHub Actions each result also goes to GITHUB_OUTPUT: image-digest, provenance,
# sbom, chart, chart-digest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CHART_DIR=${CHART_DIR:-$ROOT/charts/gpu-labeller}

log() { printf 'release: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

STEPS="image provenance sbom sign-image package push-chart sign-chart"
[ $# -gt 0 ] || die "no step given (usage: scripts/release.sh STEP..., steps: $STEPS)"
VERSION=${VERSION:-}
[ -n "$VERSION" ] || die "VERSION is not set (the release's X.Y.Z, the tag without its v)"
# SemVer 2.0.0, as helm requires of a chart version; the image tag and appVersion are the same string.
semver='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
[[ $VERSION =~ $semver ]] || die "VERSION=$VERSION is no SemVer version X.Y.Z (a tag vX.Y.Z releases X.Y.Z)"
[[ $VERSION != *+* ]] || die "VERSION=$VERSION has build metadata (+...), which an image tag cannot carry"

default_image=$(sed -n '/^image:/,/^[^ #]/s/^  repository: *//p' "$CHART_DIR/values.yaml")
IMAGE=${IMAGE:-$default_image}
CHARTS=${CHARTS:-${IMAGE%/*}/charts}
PLATFORMS=${PLATFORMS:-linux/amd64,linux/arm64}
OUT=${OUT:-${RUNNER_TEMP:-$ROOT/.cache}/release/$VERSION}
HELM=${HELM:-helm}
REQUIRE_SIGNED=${REQUIRE_SIGNED:-0}
REGISTRY_CA=${REGISTRY_CA:-}
[ -z "$REGISTRY_CA" ] || [ -s "$REGISTRY_CA" ] || die "REGISTRY_CA=$REGISTRY_CA is no file"
COSIGN_KEY=${COSIGN_KEY:-}
[ -z "$COSIGN_KEY" ] || [ -s "$COSIGN_KEY" ] || die "COSIGN_KEY=$COSIGN_KEY is no file (cosign generate-key-pair writes one)"
mkdir -p "$OUT"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# A result for the later steps (OUT/NAME) and, in GitHub Actions, for later steps and jobs (GITHUB_OUTPUT).
result() {
  printf '%s\n' "$2" >"$OUT/$1"
  if [ -n "${GITHUB_OUTPUT:-}" ]; then printf '%s=%s\n' "$1" "$2" >>"$GITHUB_OUTPUT"; fi
}

image_digest() {
  local digest=${IMAGE_DIGEST:-}
  [ -n "$digest" ] || digest=$(cat "$OUT/image-digest" 2>/dev/null || true)
  [ -z "$digest" ] || [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "image digest '$digest' is no sha256:<64 hex>"
  printf '%s' "$digest"
}

# Whether an optional tool is here; without it a step is skipped, or fails where the release demands it.
have() {
  command -v "$1" >/dev/null && return 0
  [ "$REQUIRE_SIGNED" != 1 ] || die "$2 needs $1, which is not installed (REQUIRE_SIGNED=1)"
  log "$2: skipped, $1 is not installed (the release workflow installs it and signs keyless)"
  return 1
}

# ---- the image --------------------------------------------------------------------------------------

# buildah on the release's own storage, apart from the development builds'.
BUILDAH_ROOT=${BUILDAH_ROOT:-$ROOT/.cache/buildah-release}
buildah_release() { buildah --storage-driver vfs --root "$BUILDAH_ROOT/storage" --runroot "$BUILDAH_ROOT/run" "$@"; }

# buildah's options to trust REGISTRY_CA: it reads the CA certificates (*.crt) of a directory.
buildah_tls() {
  [ -n "$REGISTRY_CA" ] || return 0
  mkdir -p "$OUT/registry-ca"
  cp "$REGISTRY_CA" "$OUT/registry-ca/ca.crt"
  printf '%s\n' --cert-dir "$OUT/registry-ca"
}

step_image() {
  [ "$(id -u)" = 0 ] || die "image: must run as root (scripts/build-image.sh builds with buildah's chroot isolation)"
  export BUILDAH_ROOT
  local buildah=(buildah_release)
  local local_repo=localhost/gpu-labeller-release
  local list=$local_repo:$VERSION
  local revision created platform arch built ctr
  revision=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
  created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local images=()
  for platform in ${PLATFORMS//,/ }; do
    arch=${platform#linux/}
    [ "$platform" = "linux/$arch" ] || die "PLATFORMS: '$platform' is not linux/ARCH"
    built=$local_repo:$VERSION-$arch
    log "image: building $platform with scripts/build-image.sh"
    ARCH=$arch REPOSITORY=$local_repo IMAGE=$built scripts/build-image.sh \
      || die "image: scripts/build-image.sh failed for $platform"
    # build-image.sh labels a development build; the release's version, commit and time replace those.
    ctr=$("${buildah[@]}" from --quiet --pull=never "$built")
    "${buildah[@]}" config --label "org.opencontainers.image.version=$VERSION" \
      --label "org.opencontainers.image.revision=$revision" \
      --label "org.opencontainers.image.created=$created" "$ctr"
    "${buildah[@]}" commit --quiet --rm "$ctr" "$built" >/dev/null
    images+=("$built")
  done
  [ ${#images[@]} -gt 0 ] || die "PLATFORMS is empty"
  "${buildah[@]}" rmi --prune >/dev/null 2>&1 || true
  "${buildah[@]}" manifest rm "$list" >/dev/null 2>&1 || true
  "${buildah[@]}" manifest create "$list" >/dev/null
  for built in "${images[@]}"; do
    "${buildah[@]}" manifest add "$list" "$built" >/dev/null
  done
  local tls
  mapfile -t tls < <(buildah_tls)
  log "image: pushing the manifest list of ${PLATFORMS} to $IMAGE:$VERSION"
  "${buildah[@]}" manifest push --quiet --all --format oci "${tls[@]}" --digestfile "$OUT/pushed.digest" \
    "$list" "docker://$IMAGE:$VERSION" || die "image: pushing $IMAGE:$VERSION failed (credentials: buildah login)"
  local digest
  digest=$(cat "$OUT/pushed.digest")
  rm -f "$OUT/pushed.digest"
  # buildah 1.28 exits 0 having pushed nothing when a list's image lost its manifest in the storage.
  [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "image: buildah pushed nothing to $IMAGE:$VERSION (no digest)"
  result image-digest "$digest"
  log "image: pushed $IMAGE:$VERSION@$digest"
}

step_provenance() {
  local digest
  digest=$(image_digest)
  [ -n "$digest" ] || die "provenance: no image digest (run the image step, or set IMAGE_DIGEST)"
  local server=${GITHUB_SERVER_URL:-https://github.com} repository=${GITHUB_REPOSITORY:-gpu-labeller/gpu-labeller}
  local revision=${REVISION:-${GITHUB_SHA:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}}
  local statement=$OUT/gpu-labeller-$VERSION.provenance.json
  # The SLSA v1 predicate (https://slsa.dev/spec/v1.0/provenance): cosign attest wraps it in an in-toto
  # statement whose subject is IMAGE@digest. Outside GitHub Actions the builder is this host's script.
  python3 - "$statement" "$server" "$repository" "$revision" "$VERSION" "$PLATFORMS" "$IMAGE" "$digest" <<'PY'
import json, os, socket, sys
out, server, repository, revision, version, platforms, image, digest = sys.argv[1:9]
env = os.environ.get
in_actions = env("GITHUB_ACTIONS") == "true"
workflow = env("GITHUB_WORKFLOW_REF", "")
run = f"{server}/{repository}/actions/runs/{env('GITHUB_RUN_ID', '')}/attempts/{env('GITHUB_RUN_ATTEMPT', '')}"
predicate = {
    "buildDefinition": {
        "buildType": f"{server}/{repository}/blob/{revision}/scripts/release.sh",
        "externalParameters": {
            "version": version,
            "platforms": platforms.split(","),
            "image": image,
            **({"workflow": workflow, "ref": env("GITHUB_REF", "")} if in_actions else {}),
        },
        "resolvedDependencies": [
            {"uri": f"git+{server}/{repository}@{env('GITHUB_REF', revision)}", "digest": {"gitCommit": revision}}
        ],
    },
    "runDetails": {
        "builder": {"id": f"{server}/{workflow}" if in_actions else f"file://{socket.gethostname()}/scripts/release.sh"},
        "metadata": {"invocationId": run if in_actions else f"{image}@{digest}"},
    },
}
with open(out, "w") as f:
    json.dump(predicate, f, indent=2)
PY
  result provenance "$statement"
}

step_sbom() {
  local digest
  digest=$(image_digest)
  [ -n "$digest" ] || die "sbom: no image digest (run the image step, or set IMAGE_DIGEST)"
  local sbom=$OUT/gpu-labeller-$VERSION.cdx.json
  if command -v syft >/dev/null || ! command -v cyclonedx-py >/dev/null; then
    have syft sbom || return 0
    syft scan "registry:$IMAGE@$digest" --output "cyclonedx-json=$sbom"
  else
    sbom_of_python_environment "$digest" "$sbom"
  fi
  result sbom "$sbom"
}

# cyclonedx-py (OWASP CycloneDX's, from PyPI) lists the distributions of a Python environment; here the
# image's, pulled by its digest (the host's platform of the list) and mounted with buildah, which needs root.
sbom_of_python_environment() {
  local digest=$1 sbom=$2
  [ "$(id -u)" = 0 ] || die "sbom: cyclonedx-py reads the image's files, which buildah mounts as root only (or install syft)"
  # A storage of its own, gone with WORK: pulled into the release's, the image (the same one the image step
  # built) would take the registry's manifest in place of its own, and the local list could not be pushed.
  local store=(buildah --storage-driver vfs --root "$WORK/sbom/storage" --runroot "$WORK/sbom/run")
  local tls ctr mnt sites
  mapfile -t tls < <(buildah_tls)
  ctr=$("${store[@]}" from --quiet "${tls[@]}" "docker://$IMAGE@$digest") || die "sbom: pulling $IMAGE@$digest failed"
  mnt=$("${store[@]}" mount "$ctr")
  sites=("$mnt"/opt/gpu-labeller/lib/python3*/site-packages)
  [ ${#sites[@]} = 1 ] && [ -d "${sites[0]}" ] || die "sbom: $IMAGE@$digest has no /opt/gpu-labeller/lib/python3*/site-packages"
  # cyclonedx-py asks an interpreter for its sys.path and reads the distributions found there; the image's
  # venv has no system site-packages, so its one site-packages is where they all are, here under the mount.
  python3 -c 'import json, sys; print("#!/bin/sh\necho " + json.dumps(json.dumps(sys.argv[1:])))' "${sites[0]}" \
    >"$WORK/image-python"
  chmod +x "$WORK/image-python"
  cyclonedx-py environment --output-reproducible --output-file "$sbom" "$WORK/image-python" \
    || die "sbom: cyclonedx-py failed"
  "${store[@]}" rm "$ctr" >/dev/null
  log "sbom: $sbom lists the Python environment of $IMAGE@$digest (cyclonedx-py; no syft here)"
}

# cosign's options for signing: a key file without Rekor where COSIGN_KEY is set, else keyless; the registry's CA.
cosign_signing() {
  printf '%s\n' --yes
  if [ -n "$COSIGN_KEY" ]; then printf '%s\n' --key "$COSIGN_KEY" --tlog-upload=false; fi
  if [ -n "$REGISTRY_CA" ]; then printf '%s\n' --registry-cacert "$REGISTRY_CA"; fi
}

step_sign_image() {
  local digest
  digest=$(image_digest)
  [ -n "$digest" ] || die "sign-image: no image digest (run the image step, or set IMAGE_DIGEST)"
  have cosign sign-image || return 0
  local signing
  mapfile -t signing < <(cosign_signing)
  cosign sign "${signing[@]}" "$IMAGE@$digest" || die "sign-image: cosign sign $IMAGE@$digest failed"
  # Each statement the steps before made, attested to the same digest; the release has both.
  local pair suffix type predicate
  for pair in "provenance.json slsaprovenance1" "cdx.json cyclonedx"; do
    read -r suffix type <<<"$pair"
    predicate=$OUT/gpu-labeller-$VERSION.$suffix
    if [ -s "$predicate" ]; then
      cosign attest "${signing[@]}" --type "$type" --predicate "$predicate" "$IMAGE@$digest" \
        || die "sign-image: cosign attest --type $type $IMAGE@$digest failed"
    elif [ "$REQUIRE_SIGNED" = 1 ]; then
      die "sign-image: no $predicate to attest (run the provenance and sbom steps first)"
    fi
  done
}

# ---- the chart --------------------------------------------------------------------------------------

step_package() {
  local digest want
  digest=$(image_digest)
  if [ -z "$digest" ]; then
    [ "$REQUIRE_SIGNED" != 1 ] || die "package: no image digest to pin (a signed chart names the image it released)"
    log "package: no image digest (IMAGE_DIGEST unset, no $OUT/image-digest): the chart pulls $IMAGE:$VERSION by tag"
    want=$IMAGE:$VERSION
  else
    want=$IMAGE:$VERSION@$digest
  fi
  local work=$WORK/chart
  rm -rf "$work"
  mkdir -p "$work"
  cp -r "$CHART_DIR" "$work/gpu-labeller"
  # The image this release pushed, in the copy only: values.yaml's image block (its comments kept) and the
  # images Artifact Hub lists and scans.
  python3 - "$work/gpu-labeller" "$IMAGE" "$digest" "$want" "$PLATFORMS" <<'PY'
import re, sys
from pathlib import Path
chart, image, digest, want, platforms = sys.argv[1:6]
values = Path(chart, "values.yaml")
text = values.read_text()
block = re.search(r"^image:\n(?:(?:  .*|\s*)\n)*", text, re.M)
assert block, "values.yaml: no image: block"
pinned, n = re.subn(r"^  repository: .*$", f"  repository: {image}", block.group(0), count=1, flags=re.M)
pinned, m = re.subn(r'^  digest: .*$', f'  digest: "{digest}"', pinned, count=1, flags=re.M)
assert n == m == 1, "values.yaml: image.repository or image.digest missing"
values.write_text(text[: block.start()] + pinned + text[block.end() :])
meta = Path(chart, "Chart.yaml")
text = meta.read_text()
listed = "".join(f"        - {p}\n" for p in platforms.split(","))
entry = r"^(      image: ).*\n(      platforms:\n)(?:        - .*\n)+"
text, n = re.subn(entry, rf"\g<1>{want}\n\g<2>{listed}", text, flags=re.M)
assert n == 1, "Chart.yaml: no artifacthub.io/images entry with platforms"
meta.write_text(text)
PY
  "$HELM" lint --strict "$work/gpu-labeller" >/dev/null || die "package: helm lint --strict failed"
  "$HELM" package "$work/gpu-labeller" --version "$VERSION" --app-version "$VERSION" --destination "$OUT" >/dev/null
  local packaged=$OUT/gpu-labeller-$VERSION.tgz
  # Rendered with no values and no cluster, as a user installs it: every container pulls this release.
  local pulled
  pulled=$("$HELM" template gpu-labeller "$packaged" --namespace gpu-labeller | awk '$1 == "image:" {print $2}' | sort -u)
  if [ "$pulled" != "$want" ]; then
    rm -f "$packaged"
    die "package: the packaged chart pulls ${pulled:-nothing}, not $want"
  fi
  result chart "$packaged"
  log "package: $packaged pulls $want"
}

step_push_chart() {
  local packaged=$OUT/gpu-labeller-$VERSION.tgz
  [ -s "$packaged" ] || die "push-chart: no $packaged (run the package step)"
  local tls=()
  [ -z "$REGISTRY_CA" ] || tls=(--ca-file "$REGISTRY_CA")
  local said
  said=$("$HELM" push "$packaged" "oci://$CHARTS" "${tls[@]}" 2>&1) || die "push-chart: helm push failed: $said"
  printf '%s\n' "$said" >&2
  local digest
  digest=$(printf '%s\n' "$said" | sed -n 's/^Digest: *//p')
  [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "push-chart: helm push named no digest"
  result chart-digest "$digest"
  log "push-chart: pushed oci://$CHARTS/gpu-labeller:$VERSION@$digest"
}

step_sign_chart() {
  local digest
  digest=$(cat "$OUT/chart-digest" 2>/dev/null || true)
  [ -n "$digest" ] || die "sign-chart: no $OUT/chart-digest (run the push-chart step)"
  have cosign sign-chart || return 0
  local signing
  mapfile -t signing < <(cosign_signing)
  # By the digest the push reported, not by a tag someone could move.
  cosign sign "${signing[@]}" "$CHARTS/gpu-labeller@$digest" || die "sign-chart: cosign sign failed"
}

for step in "$@"; do
  case $step in
    image) step_image ;;
    provenance) step_provenance ;;
    sbom) step_sbom ;;
    sign-image) step_sign_image ;;
    package) step_package ;;
    push-chart) step_push_chart ;;
    sign-chart) step_sign_chart ;;
    *) die "unknown step '$step' (steps: $STEPS)" ;;
  esac
done
# Run with sudo (the image step), what it wrote belongs to whoever ran sudo, for the steps after it.
if [ -n "${SUDO_UID:-}" ]; then chown -R "$SUDO_UID:${SUDO_GID:-$SUDO_UID}" "$OUT"; fi
