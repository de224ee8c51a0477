#!/usr/bin/env bash
# Regenerates src/generated/apache.rocketmq.v2.rs from proto/ after the .proto files were edited.
#
# It builds a throw-away generator crate (tonic-prost-build + protox, a pure-Rust protobuf
# compiler, so no protoc is needed) in a temporary directory outside the repository and runs it
# against this crate. Never run by the build or the tests; the generated file is committed.
#
# Environment:
#   CARGO_TARGET_DIR  target dir for the generator (default: /tmp/grpc-gen/target, kept between runs)
set -euo pipefail

crate_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/grpc-gen.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/tmp/grpc-gen/target}"

mkdir -p "$work/src"
cat > "$work/Cargo.toml" <<'TOML'
[package]
name = "conveyor-grpc-gen"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]

[dependencies]
protox = "=0.10.0"
tonic-prost-build = "=0.14.9"
TOML

cat > "$work/src/main.rs" <<'RS'
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let crate_dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: conveyor-grpc-gen <crate dir>")?);
    let proto_dir = crate_dir.join("proto");
    let out_dir = crate_dir.join("src").join("generated");
    std::fs::create_dir_all(&out_dir)?;

    let files = ["apache/rocketmq/v2/definition.proto", "apache/rocketmq/v2/service.proto"];
    let fds = protox::compile(files, [&proto_dir])?;

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(true)
        .emit_rerun_if_changed(false)
        .out_dir(&out_dir)
        .compile_fds(fds)?;
    Ok(())
}
RS

out="$crate_dir/src/generated/apache.rocketmq.v2.rs"
cargo run --quiet --manifest-path "$work/Cargo.toml" -- "$crate_dir"
# rustfmt does not descend into include!()d files, but keep the file rustfmt-clean anyway.
rustfmt --edition 2021 "$out"
echo "regenerated $out"
