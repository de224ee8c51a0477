#!/usr/bin/env bash
# Builds the image from ./Dockerfile with buildah (no Docker engine, no registry), then checks it:
# non-root user, both binaries present, and `conveyor standalone` inside it answers a client.
#
# No registry is reachable here, so the Dockerfile's build stage (RUST_IMAGE, normally
# docker.io/library/rust) is replaced by a local builder image: a debootstrap'ed Debian bookworm
# plus gcc and the host's Rust toolchain. Crates come from crates.io inside the build; the cargo
# home and target directory are cached under $CONVEYOR_CACHE/image so later builds are incremental.
# Installs buildah, podman, debootstrap and runc from Debian's packages when they are missing
# (the test command installs what its tests need); fails when they cannot be installed. Leaves the image's
# conveyor binary in $CONVEYOR_CACHE/image/bin/conveyor.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}/image"
mkdir -p "$CACHE/cargo-home" "$CACHE/target"
missing=()
for t in buildah podman debootstrap runc; do
  command -v "$t" >/dev/null || missing+=("$t")
done
if ((${#missing[@]})); then
  echo "  installing ${missing[*]} (Debian packages)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah podman debootstrap runc; } >"$CACHE/apt.log" 2>&1; then
    echo "  FAIL image build: could not install buildah podman debootstrap runc (see $CACHE/apt.log)"
    exit 1
  fi
fi
S=(--storage-driver vfs)
TAG=localhost/conveyor:0.1.0
BASE=localhost/debian-base:bookworm
BUILDER=localhost/conveyor-rust:bookworm
t0=$(date +%s)
if ! podman "${S[@]}" image exists "$BASE"; then
  if [ ! -f "$CACHE/debian-bookworm-minbase.tar" ]; then
    MIRROR=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
    R=$(mktemp -d)
    debootstrap --variant=minbase bookworm "$R/rootfs" "${MIRROR:-http://deb.debian.org/debian}" >/dev/null
    tar -C "$R/rootfs" -cf "$CACHE/debian-bookworm-minbase.tar" .
    rm -rf "$R"
  fi
  podman "${S[@]}" import --change 'CMD ["/bin/bash"]' "$CACHE/debian-bookworm-minbase.tar" "$BASE" >/dev/null
  echo "  base image ready after $(( $(date +%s) - t0 )) s"
fi
if ! podman "${S[@]}" image exists "$BUILDER"; then
  TC=$(rustc --print sysroot)
  W=$(mktemp -d)
  tar -C "$TC" --exclude=./share -cf "$W/rust.tar" ./bin/rustc ./bin/cargo ./lib
  cat > "$W/Containerfile" <<EOF
FROM $BASE
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev ca-certificates && rm -rf /var/lib/apt/lists/*
ADD rust.tar /usr/local/rust/
ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin CARGO_HOME=/usr/local/cargo
EOF
  buildah bud "${S[@]}" --isolation chroot --pull=never -t "$BUILDER" -f "$W/Containerfile" "$W" >/dev/null
  rm -rf "$W"
  echo "  builder image ready after $(( $(date +%s) - t0 )) s"
fi
t1=$(date +%s)
# The host's CA bundle, so crates.io is reachable through whatever TLS proxy the host trusts.
CA=()
[ -f /etc/ssl/certs/ca-certificates.crt ] && CA=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
buildah bud "${S[@]}" --isolation chroot --pull=never --layers=false \
  --build-arg RUST_IMAGE="$BUILDER" "${CA[@]}" \
  --volume "$CACHE/cargo-home:/usr/local/cargo" --volume "$CACHE/target:/src/target-image" \
  -t "$TAG" -f Dockerfile . > "$CACHE/build.log" 2>&1 || { tail -30 "$CACHE/build.log"; echo "  FAIL image build"; exit 1; }
echo "  ok   image built from Dockerfile in $(( $(date +%s) - t1 )) s ($(podman "${S[@]}" image inspect --format '{{.Size}}' "$TAG") bytes)"
# The image's binaries, also on the host: tests/all.sh runs the real-client suite with this conveyor (the binary
# shipped, and no second release build of the same sources on the host).
mkdir -p "$CACHE/bin"
BIN_CID=$(podman "${S[@]}" create --pull=never "$TAG")
podman "${S[@]}" cp "$BIN_CID:/usr/local/bin/conveyor" "$CACHE/bin/conveyor.tmp" &&
  mv "$CACHE/bin/conveyor.tmp" "$CACHE/bin/conveyor" || { echo "  FAIL copying conveyor out of the image"; exit 1; }
podman "${S[@]}" rm "$BIN_CID" >/dev/null
echo "  ok   the image's conveyor copied to $CACHE/bin/conveyor"

FAIL=0
user=$(podman "${S[@]}" image inspect --format '{{.Config.User}}' "$TAG")
if [ "$user" = "10001:10001" ]; then echo "  ok   image user is $user (non-root)"; else echo "  FAIL image user is '$user'"; FAIL=1; fi
RUN=(podman "${S[@]}" run --runtime runc --ulimit nofile=1024:20000 --ulimit nproc=1024:20000 --pull=never)
"${RUN[@]}" --rm --network none --entrypoint /usr/local/bin/conveyor-operator "$TAG" crd > "$CACHE/crd.out" 2>&1 || true
if grep -q 'name: messagequeueclusters.conveyor.dev' "$CACHE/crd.out"; then
  echo "  ok   conveyor-operator runs in the image"
else echo "  FAIL conveyor-operator crd in the image"; FAIL=1; fi
if "${RUN[@]}" --rm --network none --entrypoint /bin/sh "$TAG" -c true 2>/dev/null; then
  echo "  FAIL the image has a shell"; FAIL=1
else echo "  ok   no shell in the image"; fi
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NP=$(port); BP=$(port); HP=$(port)
CID=$("${RUN[@]}" -d --network host "$TAG" standalone --data-dir /var/lib/conveyor \
  --namesrv-listen "127.0.0.1:$NP" --listen "127.0.0.1:$BP" --http-listen "127.0.0.1:$HP" --grpc-listen 127.0.0.1:0)
trap 'podman "${S[@]}" rm -f "$CID" >/dev/null 2>&1 || true' EXIT
for _ in $(seq 1 60); do curl -sf "http://127.0.0.1:$HP/readyz" >/dev/null && break; sleep 0.5; done
uid=$(podman "${S[@]}" top "$CID" user 2>/dev/null | tail -n1 | tr -d ' ')
echo "    container process user: ${uid:-unknown}"
if "${RUN[@]}" --rm --network host "$TAG" admin cluster --namesrv-addr "127.0.0.1:$NP" | tee "$CACHE/admin.out" | grep -q "127.0.0.1:$BP"; then
  echo "  ok   conveyor standalone in the image answers a client (conveyor admin cluster)"
else
  echo "  FAIL standalone did not answer; container log:"; podman "${S[@]}" logs "$CID" | tail -20; cat "$CACHE/admin.out"; FAIL=1
fi
exit "$FAIL"
