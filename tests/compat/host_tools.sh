# shellcheck shell=bash
# Sourced by the client suites that run Java and Go programs on the host (acl.sh, tls-rotation.sh):
# installs what they need when it is missing — Debian packages with apt-get, and the Go toolchain
# from the Go module proxy (Debian's golang-go is older than the Go client's go.mod wants; the
# toolchain is itself a module, golang.org/toolchain, fetched to where tests/k8s/install-tools.sh
# puts it). Never skips: what cannot be had makes compat_host_tools fail, and the suite with it.

# compat_host_tools SUITE [COMMAND:PACKAGE ...]: java, javac, mvn, curl, python3, flock and go,
# plus the pairs given; the apt log goes to $CONVEYOR_CACHE/apt-SUITE.log.
compat_host_tools() {
  local suite=$1 cache="${CONVEYOR_CACHE:-$HOME/.cache/conveyor}" pair missing=()
  shift
  mkdir -p "$cache"
  { command -v java && command -v javac; } >/dev/null || missing+=(openjdk-17-jdk-headless)
  for pair in mvn:maven curl:curl python3:python3 flock:util-linux "$@"; do
    command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
  done
  command -v go >/dev/null || [[ -x "$cache/k8s-tools/go/bin/go" ]] || command -v unzip >/dev/null || missing+=(unzip)
  if ((${#missing[@]})); then
    echo "$suite: installing ${missing[*]}" >&2
    if ! { command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]] \
      && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
        >"$cache/apt-$suite.log" 2>&1; }; then
      echo "$suite: cannot install ${missing[*]} (see $cache/apt-$suite.log)" >&2
      return 1
    fi
  fi
  command -v go >/dev/null && return 0
  local go_home="$cache/k8s-tools/go"
  if [[ ! -x "$go_home/bin/go" ]]; then
    local gov="${CONVEYOR_GO_TOOLCHAIN:-go1.25.5}" goarch mod work
    case "$(uname -m)" in x86_64) goarch=amd64 ;; aarch64 | arm64) goarch=arm64 ;; *) goarch=$(uname -m) ;; esac
    mod="v0.0.1-$gov.linux-$goarch"
    work="$(mktemp -d)"
    echo "$suite: fetching the Go toolchain $gov from the Go module proxy" >&2
    if curl -fsSL -o "$work/go.zip" "${GOPROXY_URL:-https://proxy.golang.org}/golang.org/toolchain/@v/$mod.zip" \
      && unzip -q "$work/go.zip" -d "$work" && mkdir -p "$(dirname "$go_home")" && rm -rf "$go_home" \
      && mv "$work/golang.org/toolchain@$mod" "$go_home"; then
      chmod +x "$go_home/bin/"* "$go_home/pkg/tool/"*/* 2>/dev/null
    fi
    rm -rf "$work"
  fi
  if [[ ! -x "$go_home/bin/go" ]]; then
    echo "$suite: go not found and the toolchain could not be fetched" >&2
    return 1
  fi
  export PATH="$go_home/bin:$PATH"
}
