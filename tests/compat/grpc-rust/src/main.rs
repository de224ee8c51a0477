//! The RocketMQ 5.x gRPC checks with the official Rust SDK (crates.io `rocketmq`, apache/rocketmq-clients rust/).
//!
//!   grpc-rust-checks PROGRAM      PROGRAM: Producers | SimpleConsumers (sdk.sh run PROGRAM)
//!
//! Environment as grpc-java's programs: GRPC_ENDPOINT, GRPC_CHECKS, GRPC_RUN_ID, GRPC_TLS, GRPC_TIMEOUT_SCALE,
//! GRPC_LOG_DIR, GRPC_PROGRAM_SECS; and GRPC_RUST_SDK_VERSION (sdk.sh: the locked `rocketmq` version).
//! Exit status 0 when every selected check passed.

mod g;
mod producers;
mod simple_consumers;

use std::io::Write;

fn main() {
    let program = std::env::args().nth(1).unwrap_or_default();
    let scenarios = match program.as_str() {
        "Producers" => producers::scenarios(),
        "SimpleConsumers" => simple_consumers::scenarios(),
        _ => {
            eprintln!("usage: grpc-rust-checks Producers|SimpleConsumers");
            std::process::exit(2);
        }
    };
    g::init_output(&program);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let ok = rt.block_on(g::run_all(scenarios));
    let _ = std::io::stdout().flush();
    // Exit at once, like the Java programs' halt: the SDK's background tasks need not wind down.
    std::process::exit(if ok { 0 } else { 1 });
}
