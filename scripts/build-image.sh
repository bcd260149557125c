#!/usr/bin/env bash
# Builds the gpu-labeller image without a Docker engine or a registry, then runs both commands in it as
# the image's non-root user (uid 65532):
#   - a Debian base image is made locally with debootstrap (cached under .cache/image-base/),
#   - the Dockerfile is built by buildah with chroot isolation and vfs storage (works as root in CI, also
#     inside an unprivileged container where overlay and user namespaces are unavailable),
#   - `gfd --oneshot --backend mock` writes a feature file, `nfd-lite --dry-run` turns it into labels.
# ARCH=arm64 on an x86-64 host builds and runs the Jetson/Graviton image under emulation: Debian's
# qemu-user-static, registered in binfmt_misc with the F flag (the kernel keeps the emulator open, so it
# also runs inside buildah's chroot, where its path does not exist).
# Needs root and Debian/PyPI reachability; installs buildah, debootstrap (and qemu-user-static for a
# foreign ARCH) with apt-get when missing.
#
# The image is also tagged REPOSITORY:APPVERSION, APPVERSION being the chart's appVersion, which is the tag
# the chart pulls when only image.repository is set (-ARCH appended for a foreign ARCH); PUSH=1 pushes it
# to REPOSITORY:APPVERSION once every check passed. So from a checkout these two use the same image:
#   REPOSITORY=registry.example.com/gpu-labeller PUSH=1 scripts/build-image.sh
#   helm install gpu-labeller charts/gpu-labeller -n gpu-labeller --set image.repository=registry.example.com/gpu-labeller
# `--dry-run` prints the tags and the push target and builds nothing (no root needed).
#
# Environment: ARCH (Debian architecture of the image, default the host's), REPOSITORY (default
#   localhost/gpu-labeller), IMAGE (tag, default REPOSITORY:dev, with -ARCH appended for a foreign ARCH),
#   PUSH (1: push to REPOSITORY:APPVERSION; registry credentials from `buildah login`), SUITE (default
#   bookworm), DEBIAN_MIRROR, PROFILE (mock profile inside the image), BUILDAH_ROOT (storage, default
#   .cache/buildah).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf 'build-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

DRY_RUN=0
case ${1:-} in
  "") ;;
  --dry-run) DRY_RUN=1 ;;
  *) die "unknown argument '$1' (the only one is --dry-run; settings come from the environment)" ;;
esac

HOST_ARCH=$(dpkg --print-architecture 2>/dev/null || uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')
ARCH=${ARCH:-$HOST_ARCH}
# The tag the chart pulls when only image.repository is set (_helpers.tpl: image.tag defaults to it).
APP_VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/gpu-labeller/Chart.yaml)
[ -n "$APP_VERSION" ] || die "charts/gpu-labeller/Chart.yaml has no appVersion line"
REPOSITORY=${REPOSITORY:-localhost/gpu-labeller}
suffix=
[ "$ARCH" = "$HOST_ARCH" ] || suffix=-$ARCH
IMAGE=${IMAGE:-$REPOSITORY:dev$suffix}
APP_IMAGE=$REPOSITORY:$APP_VERSION$suffix
PUSH=${PUSH:-0}
case $PUSH in
  0) PUSH_TO= ;;
  # One architecture per push, under the tag the chart pulls; a mixed cluster needs a manifest list.
  1) PUSH_TO=docker://$REPOSITORY:$APP_VERSION ;;
  *) die "PUSH=$PUSH: 1 pushes, 0 (the default) does not" ;;
esac
case $REPOSITORY in
  localhost/*) [ -z "$PUSH_TO" ] || die "PUSH=1 needs REPOSITORY set to your registry (it is $REPOSITORY)" ;;
esac
if [ "$DRY_RUN" = 1 ]; then
  printf 'image=%s\ntag=%s\npush=%s\nhelm=--set image.repository=%s\n' "$IMAGE" "$APP_IMAGE" "$PUSH_TO" "$REPOSITORY"
  exit 0
fi
SUITE=${SUITE:-bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PROFILE=${PROFILE:-/usr/share/gpu-labeller/profiles/dgx-a100-mig.yaml}
BUILDAH_ROOT=${BUILDAH_ROOT:-$ROOT/.cache/buildah}
BASE_DIR=$ROOT/.cache/image-base
BASE_TAR=$BASE_DIR/debian-$SUITE-$ARCH-python3.tar
BASE_IMAGE=localhost/gpu-labeller-base:$SUITE-python3-$ARCH

# Exit status 3: this host cannot run ARCH's programs (the reason is the last line); nothing was wrong.
cannot_emulate() { log "cannot emulate $ARCH: $*"; exit 3; }

[ "$(id -u)" = 0 ] || die "must run as root (buildah with chroot isolation and vfs storage needs it)"

case $ARCH in
  amd64) QEMU_ARCH=x86_64 ;;
  arm64) QEMU_ARCH=aarch64 ;;
  *) die "ARCH=$ARCH is not supported (amd64 or arm64)" ;;
esac
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ "$ARCH" != "$HOST_ARCH" ]; then
  [ -x "/usr/bin/qemu-$QEMU_ARCH-static" ] || missing+=(qemu-user-static)
  command -v update-binfmts >/dev/null || missing+=(binfmt-support)
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- emulation of a foreign ARCH --------------------------------------------------------------------
if [ "$ARCH" != "$HOST_ARCH" ]; then
  binfmt=/proc/sys/fs/binfmt_misc
  if [ ! -e "$binfmt/register" ]; then
    grep -qw binfmt_misc /proc/filesystems \
      || cannot_emulate "the kernel has no binfmt_misc (not in /proc/filesystems)"
    mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null \
      || cannot_emulate "mounting binfmt_misc on $binfmt was refused (a container needs the host's registration or CAP_SYS_ADMIN)"
  fi
  # Installing qemu-user-static registers it; where the package's trigger did not run, register now.
  [ -e "$binfmt/qemu-$QEMU_ARCH" ] || update-binfmts --enable "qemu-$QEMU_ARCH" >/dev/null 2>&1 || true
  entry=$binfmt/qemu-$QEMU_ARCH
  [ -e "$entry" ] || cannot_emulate "qemu-$QEMU_ARCH is not registered in $binfmt (update-binfmts --enable qemu-$QEMU_ARCH failed)"
  grep -qx enabled "$entry" || cannot_emulate "$entry is disabled (echo 1 >$entry)"
  grep -q '^flags:.*F' "$entry" \
    || cannot_emulate "$entry lacks the F flag, so the emulator is not found inside the build chroot"
  log "emulating $ARCH with $(sed -n 's/^interpreter //p' "$entry") ($(grep '^flags:' "$entry"))"
fi

# One storage location for every call; vfs copies whole layers but needs no kernel features.
BUILDAH=(buildah --storage-driver vfs --root "$BUILDAH_ROOT/storage" --runroot "$BUILDAH_ROOT/run")
export BUILDAH_ISOLATION=chroot
mkdir -p "$BUILDAH_ROOT" "$BASE_DIR"
# The storage is this script's own: working containers left by an interrupted run only take space.
"${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true

# --- base image: Debian minbase + python3 (venv) + CA certificates, made with debootstrap --------------
if [ ! -s "$BASE_TAR" ]; then
  log "debootstrap $SUITE for $ARCH into a base image (once; cached in $BASE_TAR)"
  rootfs=$(mktemp -d "$BASE_DIR/rootfs.XXXXXX")
  debootstrap --arch="$ARCH" --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$rootfs" "$DEBIAN_MIRROR" >"$BASE_DIR/debootstrap.log" 2>&1 \
    || { tail -20 "$BASE_DIR/debootstrap.log" >&2; rm -rf "$rootfs"; die "debootstrap failed"; }
  # Smaller image: no apt lists, caches or docs are needed at run time.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
  tar -C "$rootfs" --numeric-owner -cf "$BASE_TAR.tmp" .
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  rm -rf "$rootfs"
fi
if ! "${BUILDAH[@]}" inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  log "importing $BASE_TAR as $BASE_IMAGE"
  ctr=$("${BUILDAH[@]}" from --quiet scratch)
  "${BUILDAH[@]}" add --quiet "$ctr" "$BASE_TAR" /
  "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd /bin/sh --os linux --arch "$ARCH" "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
fi

# --- the image ---------------------------------------------------------------------------------------
log "building $IMAGE for linux/$ARCH from Dockerfile (BASE_IMAGE=$BASE_IMAGE)"
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The host's CA bundle reaches pip as a build secret, for networks that re-sign TLS (it is not kept
# in the image).
secret=()
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
[ -s "$ca" ] && secret=(--secret "id=pip-ca,src=$ca")
"${BUILDAH[@]}" build --isolation chroot --pull=never --platform "linux/$ARCH" "${secret[@]}" \
  --build-arg "BASE_IMAGE=$BASE_IMAGE" \
  --build-arg "REVISION=$revision" \
  -f Dockerfile -t "$IMAGE" . >"$BUILDAH_ROOT/build-$ARCH.log" 2>&1 \
  || { tail -30 "$BUILDAH_ROOT/build-$ARCH.log" >&2; die "buildah build failed (full log: $BUILDAH_ROOT/build-$ARCH.log)"; }

# vfs stores every image as a full copy: drop the previous build and the build stage, keep base + image.
"${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true

user=$("${BUILDAH[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")
[ "$user" = "65532:65532" ] || die "image user is '$user', expected 65532:65532"
arch=$("${BUILDAH[@]}" inspect --type image --format '{{.OCIv1.Architecture}}' "$IMAGE")
[ "$arch" = "$ARCH" ] || die "image architecture is '$arch', expected $ARCH"
size=$("${BUILDAH[@]}" images --format '{{.Size}}' "$IMAGE" | head -1)
log "image $IMAGE: user $user, architecture $arch, size $size"

# --- run both commands as the image's user -----------------------------------------------------------
work=$(mktemp -d)
ctr=$("${BUILDAH[@]}" from --quiet --pull=never --platform "linux/$ARCH" "$IMAGE")
cleanup() { "${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/features"
chown 65532:65532 "$work/features"
mkdir -p "$work/empty"
# As under readOnlyRootFilesystem: the world-writable directories of the image are covered read-only, so
# uid 65532 can write nowhere but the feature directory (the root filesystem is root-owned).
ro=()
for d in /tmp /var/tmp /run/lock; do ro+=(-v "$work/empty:$d:ro"); done
run() {
  "${BUILDAH[@]}" run --isolation chroot --user 65532:65532 "${ro[@]}" -v "$work/features:/features" \
    "$ctr" -- "$@"
}
# Nothing else in the image may be writable by that user.
writable=$("${BUILDAH[@]}" run --isolation chroot "$ctr" -- \
  find / -xdev \( -perm -0002 -o -user 65532 \) ! -type l ! -path '/proc/*' ! -path '/dev/*' -print 2>/dev/null || true)
[ "$(echo "$writable" | grep -vxE '/tmp|/var/tmp|/run/lock' | grep -c .)" = 0 ] \
  || die "writable by everyone or uid 65532 in the image: $writable"

# The interpreter really is the image's architecture (under emulation on a foreign host).
machine=$(run python3 -c 'import platform; print(platform.machine())')
[ "$machine" = "$QEMU_ARCH" ] || die "python3 in the image runs as '$machine', expected $QEMU_ARCH"
log "python3 in the image runs as $machine"

# Every module the daemons load must be in the image (the build prunes unused parts of dependencies).
run python3 -c 'import gfd.cli, gfd.daemon, gfd.backends.nvml, gfd.backends.tegra, nfd_lite.cli, nfd_lite.service, kubernetes.client, kubernetes.watch'

log "$(run gfd --version)"
log "gfd --oneshot --backend mock --mock-profile $PROFILE"
run gfd --oneshot --backend mock --mock-profile "$PROFILE" --output-file /features/source.d/gfd
grep -qx 'nvidia.com/gpu.present=true' "$work/features/source.d/gfd" || die "gfd wrote no nvidia.com/gpu.present=true"
grep -qx 'nvidia.com/gpu.simulated=true' "$work/features/source.d/gfd" || die "gfd did not mark mock labels simulated"
stat -c '%u' "$work/features/source.d/gfd" | grep -qx 65532 || die "feature file not written by uid 65532"

log "nfd-lite --dry-run --features-dir /features/source.d"
run nfd-lite --dry-run --node-name image-test-node --features-dir /features/source.d --metrics-address '' \
  >"$work/dry-run.json"
python3 - "$work/dry-run.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
labels = out["labels"]
assert labels.get("nvidia.com/gpu.present") == "true", labels
assert out["rejected"] == [], out["rejected"]
print(f"build-image: nfd-lite would set {len(labels)} labels, e.g. nvidia.com/gpu.product={labels.get('nvidia.com/gpu.product')}", file=sys.stderr)
PY
log "ok: $IMAGE runs gfd and nfd-lite as uid 65532"

"${BUILDAH[@]}" tag "$IMAGE" "$APP_IMAGE"
log "tagged $APP_IMAGE (the chart's appVersion)"
# The previous build that tag held is a full copy under vfs: drop it now that nothing names it.
"${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
if [ -n "$PUSH_TO" ]; then
  "${BUILDAH[@]}" push --quiet "$APP_IMAGE" "$PUSH_TO" || die "pushing $APP_IMAGE to $PUSH_TO failed (credentials: buildah login)"
  log "pushed $PUSH_TO; install with: --set image.repository=$REPOSITORY"
fi
