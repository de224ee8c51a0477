#!/usr/bin/env bash
# Builds the gRPC checks (grpc-java/, the official Java 5.x gRPC SDK rocketmq-client-java) from Maven Central.
# The sibling of fetch.sh (which builds the remoting clients and mqadmin; grpc.sh runs both). Idempotent: when the
# sources are unchanged and the artifacts exist it returns in well under a second.
#
# Outputs, under ${CONVEYOR_CACHE:-$HOME/.cache/conveyor}:
#   m2/                          local Maven repository (shared with fetch.sh)
#   compat/grpc-java.classpath   classpath (compiled checks + rocketmq-client-java and its dependencies)
#   compat/grpc-java.version     SDK version, e.g. 5.2.0
#   compat/grpc-stamp            hash of the inputs of the last successful build
#
# Usage: tests/compat/grpc-fetch.sh [--force]
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
M2="$CACHE/m2"

inputs_hash() {
  (
    cd "$HERE"
    find grpc-fetch.sh grpc-java/pom.xml grpc-java/src -type f | LC_ALL=C sort | xargs sha256sum
    java -version 2>&1 | head -1
  ) | sha256sum | cut -d' ' -f1
}

artifacts_present() {
  [[ -s "$OUT/grpc-java.classpath" && -s "$OUT/grpc-java.version" ]] || return 1
  local entry
  while IFS= read -r entry; do
    [[ -e "$entry" ]] || return 1
  done < <(tr ':' '\n' <"$OUT/grpc-java.classpath")
}

strip_colors() { sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d'; }

for tool in java javac mvn sha256sum; do
  command -v "$tool" >/dev/null || { echo "grpc-fetch.sh: $tool not found on PATH" >&2; exit 1; }
done

mkdir -p "$OUT" "$M2"
hash="$(inputs_hash)"
if [[ "${1:-}" != "--force" && -f "$OUT/grpc-stamp" && "$(cat "$OUT/grpc-stamp")" == "$hash" ]] && artifacts_present; then
  echo "compat: gRPC checks up to date in $OUT"
  exit 0
fi
rm -f "$OUT/grpc-stamp"

build="$OUT/grpc-java-build"
rm -rf "${build:?}"
echo "compat: building the gRPC checks (rocketmq-client-java)"
mvn -B -q -ntp -f "$HERE/grpc-java/pom.xml" \
  -Dmaven.repo.local="$M2" \
  -Dgrpc.buildDir="$build" \
  -Dmdep.outputFile="$build/deps" \
  compile dependency:build-classpath 2>&1 | strip_colors
echo "$build/classes:$(cat "$build/deps")" >"$OUT/grpc-java.classpath.tmp"
version="$(tr ':' '\n' <"$build/deps" | sed -n 's|.*/rocketmq-client-java-\([0-9][^/]*\)\.jar$|\1|p' | head -1)"
[[ -n "$version" ]] || { echo "grpc-fetch.sh: rocketmq-client-java not on the classpath" >&2; exit 1; }
echo "$version" >"$OUT/grpc-java.version"
mv "$OUT/grpc-java.classpath.tmp" "$OUT/grpc-java.classpath"

echo "$hash" >"$OUT/grpc-stamp"
echo "compat: gRPC checks ready in $OUT (rocketmq-client-java $version)"
