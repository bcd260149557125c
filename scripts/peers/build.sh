#!/usr/bin/env bash
# Builds the test-only peers (the real programs we test against and compare with) from their pinned Go
# modules. Each peer is a directory here with a go.mod/go.sum that pins it and a `tools` file: one line per
# output, "OUTPUT PACKAGE [go build flags...]" (shell-quoted). Outputs go to .cache/peers/NAME/, rebuilt only when the
# peer's go.mod, go.sum, tools, own sources or the Go version change. The product never uses these.
# usage: scripts/peers/build.sh NAME...
set -euo pipefail
cd "$(dirname "$0")"
PEERS=$PWD
CACHE=$(cd ../.. && pwd)/.cache/peers
export GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath"
export CGO_ENABLED=${CGO_ENABLED:-1}

mkdir -p "$CACHE"
for name in "$@"; do
  dir=$PEERS/$name
  out=$CACHE/$name
  # One build of a peer at a time (parallel test runs may all ask for it); the others wait, then find it built.
  exec {lock}>"$CACHE/.$name.lock"
  flock "$lock"
  # A peer may carry Go/C source of its own (nvidia-mock-nvml): that counts too.
  mapfile -t sources < <(cd "$dir" && find . -name '*.go' -o -name '*.c' | LC_ALL=C sort)
  key=$(cd "$dir" && cat go.mod go.sum tools "${sources[@]}" <(go version) | sha256sum | cut -c1-16)
  if [ "$(cat "$out/.key" 2>/dev/null)" = "$key" ]; then
    exec {lock}>&-
    continue
  fi
  echo "peers: building $name (first run: minutes; cached in $out)" >&2
  start=$SECONDS
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp"
  while read -r output package flags; do
    [ -z "$output" ] || [ "${output:0:1}" = "#" ] && continue
    eval "args=($flags)" # flags may be quoted, e.g. -ldflags='-s -X ...'
    (cd "$dir" && go build "${args[@]}" -o "$out.tmp/$output" "$package")
  done <"$dir/tools"
  echo "$key" >"$out.tmp/.key"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  echo "peers: $name built in $((SECONDS - start)) s" >&2
  exec {lock}>&-
done
