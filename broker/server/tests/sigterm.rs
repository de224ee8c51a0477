//! The real `conveyor standalone` binary: ready on its probe port, stores a message, exits 0
//! on SIGTERM within a deadline, and still has the message after a restart on the same data
//! directory.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use common::{http_get, DEADLINE};
use conveyor_client::{
    Message, MessageQueue, Producer, ProducerConfig, PullConsumer, PullConsumerConfig, PullStatus,
};
use tokio::time::Instant;

/// A child process killed if the test fails before it exits.
struct Proc {
    child: Option<Child>,
    namesrv: SocketAddr,
    http: SocketAddr,
    log: std::path::PathBuf,
}

impl Proc {
    fn pid(&self) -> i32 {
        self.child.as_ref().expect("child").id() as i32
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .expect("child")
            .try_wait()
            .expect("try_wait")
    }

    /// Waits until /readyz answers 200; `Err` if the process exited first (e.g. a port was
    /// taken in the meantime) or the deadline passed.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.try_wait() {
                return Err(format!("exited early with {status}: {}", self.log()));
            }
            if let Ok((200, _)) = http_get(self.http, "/readyz").await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("not ready in time: {}", self.log()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    async fn terminate(&mut self, limit: Duration) -> ExitStatus {
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
        let rc = unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        assert_eq!(rc, 0, "kill(SIGTERM)");
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.try_wait() {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no exit within {limit:?} of SIGTERM: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind port 0")
        .port()
}

fn spawn_once(data: &Path, config: &Path, log: &Path) -> Proc {
    let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    let (ns, broker, http) = (addr(free_port()), addr(free_port()), addr(free_port()));
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_conveyor"));
    // Only what the test sets: no CONVEYOR_* from the environment.
    for (k, _) in std::env::vars() {
        if k.starts_with("CONVEYOR_") {
            cmd.env_remove(k);
        }
    }
    let child = cmd
        .arg("standalone")
        .arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .arg("--namesrv-listen")
        .arg(ns.to_string())
        .arg("--listen")
        .arg(broker.to_string())
        .arg("--http-listen")
        .arg(http.to_string())
        .env("CONVEYOR_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log"))
        .stderr(log_file)
        .spawn()
        .expect("spawn conveyor");
    Proc {
        child: Some(child),
        namesrv: ns,
        http,
        log: log.to_path_buf(),
    }
}

/// Starts the binary on free ports, retrying if a port was taken between probing and binding.
async fn spawn_ready(data: &Path, config: &Path, log: &Path) -> Proc {
    let mut last = String::new();
    for _ in 0..3 {
        let mut p = spawn_once(data, config, log);
        match p.wait_ready().await {
            Ok(()) => return p,
            Err(e) => last = e,
        }
    }
    panic!("conveyor standalone never became ready: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_cleanly_and_data_survives() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("conveyor.toml");
    let log = tmp.path().join("conveyor.log");
    std::fs::write(
        &config,
        "[store]\nsegment-size = 8388608\nmax-message-size = 1048576\n",
    )
    .expect("config");

    let mut proc = spawn_ready(&data, &config, &log).await;
    let topic = "SigtermTopic";
    let producer = Producer::new(ProducerConfig::new(proc.namesrv.to_string(), "PG_sigterm"))
        .expect("producer");
    let sent = producer
        .send(&Message::new(topic, "survives SIGTERM").with_key("sig-key"))
        .await
        .expect("send");
    producer.close();

    let status = proc.terminate(Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "exit status after SIGTERM: {status}\n{}",
        proc.log()
    );

    let proc = spawn_ready(&data, &config, &log).await;
    let consumer = PullConsumer::new(PullConsumerConfig::new(
        proc.namesrv.to_string(),
        "CG_sigterm",
    ))
    .expect("consumer");
    let queue = MessageQueue {
        topic: topic.into(),
        ..sent.queue.clone()
    };
    // The route comes back with the broker's registration of its persisted topics.
    let deadline = Instant::now() + DEADLINE;
    let got = loop {
        match consumer
            .pull(&queue, sent.queue_offset, 1, Duration::ZERO)
            .await
        {
            Ok(r) if r.status == PullStatus::Found => break r,
            other => assert!(
                Instant::now() < deadline,
                "message not found after restart: {other:?}\n{}",
                proc.log()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(got.messages[0].body, "survives SIGTERM".as_bytes());
    consumer.close();
    let mut proc = proc;
    let status = proc.terminate(Duration::from_secs(20)).await;
    assert!(status.success(), "second exit: {status}");
}
