#!/usr/bin/env bash
# Downloads and builds everything the compatibility tests need, from Maven Central and the Go module proxy.
# Idempotent: when the sources are unchanged and the artifacts exist it returns in well under a second.
#
# Outputs, under ${CONVEYOR_CACHE:-$HOME/.cache/conveyor}:
#   m2/                         local Maven repository
#   go/mod, go/build            GOMODCACHE and GOCACHE
#   compat/java-rmq4.classpath  classpath (compiled tests + rocketmq-client/tools 4.9.x and dependencies)
#   compat/java-rmq4.version    client version, e.g. 4.9.8
#   compat/java-rmq5.classpath  same for 5.x
#   compat/java-rmq5.version
#   compat/compat-go            the Go client test binary
#   compat/stamp                hash of the inputs of the last successful build
#
# Usage: tests/compat/fetch.sh [--force]
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}"
OUT="$CACHE/compat"
M2="$CACHE/m2"
PROFILES=(rmq4 rmq5)

inputs_hash() {
  (
    cd "$HERE"
    find fetch.sh java/pom.xml java/src go -type f | LC_ALL=C sort | xargs sha256sum
    java -version 2>&1 | head -1
    go version
  ) | sha256sum | cut -d' ' -f1
}

artifacts_present() {
  local p
  for p in "${PROFILES[@]}"; do
    [[ -s "$OUT/java-$p.classpath" && -s "$OUT/java-$p.version" ]] || return 1
    # Every classpath entry must still exist (the Maven repository may have been cleaned).
    local entry
    while IFS= read -r entry; do
      [[ -e "$entry" ]] || return 1
    done < <(tr ':' '\n' < "$OUT/java-$p.classpath")
  done
  [[ -x "$OUT/compat-go" ]]
}

# Debian's Maven 3.8 prints colour resets even in batch mode; drop them (and the empty lines they leave).
strip_colors() { sed -e 's/\x1b\[[0-9;]*m//g' -e '/^$/d'; }

for tool in java javac mvn go sha256sum; do
  command -v "$tool" >/dev/null || { echo "fetch.sh: $tool not found on PATH" >&2; exit 1; }
done

mkdir -p "$OUT" "$M2"
hash="$(inputs_hash)"
if [[ "${1:-}" != "--force" && -f "$OUT/stamp" && "$(cat "$OUT/stamp")" == "$hash" ]] && artifacts_present; then
  echo "compat: artifacts up to date in $OUT"
  exit 0
fi
rm -f "$OUT/stamp"

# --- Java: compile the test programs once per client generation and record their runtime classpath. ---
for p in "${PROFILES[@]}"; do
  build="$OUT/java-build"
  rm -rf "${build:?}/$p"
  echo "compat: building Java tests ($p)"
  mvn -B -q -ntp -f "$HERE/java/pom.xml" -P "$p" \
    -Dmaven.repo.local="$M2" \
    -Dcompat.buildDir="$build" \
    -Dmdep.outputFile="$build/$p.deps" \
    compile dependency:build-classpath 2>&1 | strip_colors
  echo "$build/$p/classes:$(cat "$build/$p.deps")" > "$OUT/java-$p.classpath.tmp"
  version="$(tr ':' '\n' < "$build/$p.deps" | sed -n 's|.*/rocketmq-client-\([0-9][^/]*\)\.jar$|\1|p' | head -1)"
  [[ -n "$version" ]] || { echo "fetch.sh: rocketmq-client not on the $p classpath" >&2; exit 1; }
  echo "$version" > "$OUT/java-$p.version"
  mv "$OUT/java-$p.classpath.tmp" "$OUT/java-$p.classpath"
done

# --- Go: build the rocketmq-client-go test binary with a private module and build cache. ---
echo "compat: building Go test"
(
  cd "$HERE/go"
  export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local
  export GOFLAGS="-mod=readonly -buildvcs=false"
  go build -o "$OUT/compat-go.tmp" .
)
mv "$OUT/compat-go.tmp" "$OUT/compat-go"

echo "$hash" > "$OUT/stamp"
echo "compat: ready in $OUT (java $(cat "$OUT/java-rmq4.version") and $(cat "$OUT/java-rmq5.version"), go $(go version -m "$OUT/compat-go" | awk '$2 == "github.com/apache/rocketmq-client-go/v2" {print $3}'))"
