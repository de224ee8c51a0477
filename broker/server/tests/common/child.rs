//! A `conveyor standalone` (or `conveyor broker`) child process for tests that need a real
//! process: SIGKILL, power loss, resource limits, replication between processes. Its output
//! goes to a log file whose tail failure messages show.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use super::http_get;

/// The broker child process; killed (SIGKILL) when dropped.
pub struct Broker {
    /// The process, until killed.
    pub child: Option<Child>,
    /// Its name server address.
    pub namesrv: SocketAddr,
    /// Its broker address.
    pub broker: SocketAddr,
    /// Its HTTP probe address.
    pub http: SocketAddr,
    /// Its replication stream address.
    pub replication: SocketAddr,
    /// Its log file.
    pub log: PathBuf,
}

impl Broker {
    /// Starts `conveyor standalone` on `data` with `config` (a settings file), logging to
    /// `log`, and waits until `/readyz` answers 200; retries if a probed port was taken
    /// meanwhile.
    pub async fn start(data: &Path, config: &Path, log: &Path) -> Broker {
        Self::start_as(data, config, log, Mode::Standalone, &[]).await
    }

    /// [`Broker::start`] in `mode`, with `extra` arguments after the usual ones.
    pub async fn start_as(
        data: &Path,
        config: &Path,
        log: &Path,
        mode: Mode,
        extra: &[&str],
    ) -> Broker {
        Self::start_at(&Place::default(), data, config, log, mode, extra).await
    }

    /// [`Broker::start_as`] at `place`.
    pub async fn start_at(
        place: &Place,
        data: &Path,
        config: &Path,
        log: &Path,
        mode: Mode,
        extra: &[&str],
    ) -> Broker {
        let mut last = String::new();
        for _ in 0..3 {
            let mut b = Self::spawn_at(place, data, config, log, mode, extra);
            let deadline = Instant::now() + Duration::from_secs(60);
            let ready = loop {
                if let Some(status) = b.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                    break Err(format!("exited with {status}"));
                }
                if let Ok((200, _)) = http_get(b.http, "/readyz").await {
                    break Ok(());
                }
                if Instant::now() >= deadline {
                    break Err("not ready in 60 s".to_string());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            match ready {
                Ok(()) => return b,
                Err(e) => last = format!("{e}\n{}", b.log_tail()),
            }
        }
        panic!("conveyor standalone never became ready: {last}");
    }

    /// Starts the process without waiting for it to be ready.
    pub fn spawn(data: &Path, config: &Path, log: &Path) -> Broker {
        Self::spawn_as(data, config, log, Mode::Standalone, &[])
    }

    /// [`Broker::spawn`] in `mode`, with `extra` arguments.
    pub fn spawn_as(data: &Path, config: &Path, log: &Path, mode: Mode, extra: &[&str]) -> Broker {
        Self::spawn_at(&Place::default(), data, config, log, mode, extra)
    }

    /// [`Broker::spawn_as`] at `place`.
    pub fn spawn_at(
        place: &Place,
        data: &Path,
        config: &Path,
        log: &Path,
        mode: Mode,
        extra: &[&str],
    ) -> Broker {
        let addr = |p: u16| SocketAddr::new(place.ip, p);
        let (broker, http, replication) = (addr(free_port()), addr(free_port()), addr(free_port()));
        let ns = match mode {
            Mode::Standalone | Mode::NameServer | Mode::Controller => addr(free_port()),
            Mode::Broker { namesrv } => namesrv,
        };
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let binary = env!("CARGO_BIN_EXE_conveyor");
        let mut cmd = match &place.netns {
            // `ip netns exec` execs the binary: the child's pid is the broker's.
            Some(netns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", netns, binary]);
                c
            }
            None => Command::new(binary),
        };
        for (k, _) in std::env::vars() {
            if k.starts_with("CONVEYOR_") {
                cmd.env_remove(k);
            }
        }
        match mode {
            Mode::Standalone => cmd
                .arg("standalone")
                .arg("--namesrv-listen")
                .arg(ns.to_string()),
            Mode::Broker { namesrv } => cmd
                .arg("broker")
                .arg("--namesrv-addr")
                .arg(namesrv.to_string()),
            // These listen on `--listen` (the `broker` address below).
            Mode::NameServer => cmd.arg("namesrv"),
            Mode::Controller => cmd.arg("controller"),
        };
        if matches!(mode, Mode::Standalone | Mode::Broker { .. }) {
            cmd.arg("--replication-listen").arg(replication.to_string());
            // Several brokers share this host: no fixed gRPC port (the default is 8081).
            cmd.arg("--grpc-listen")
                .arg(std::net::SocketAddr::new(broker.ip(), 0).to_string());
        }
        let child = cmd
            .arg("--config")
            .arg(config)
            .arg("--data-dir")
            .arg(data)
            .args(extra)
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
        Broker {
            child: Some(child),
            namesrv: ns,
            broker,
            http,
            replication,
            log: log.to_path_buf(),
        }
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last 4,000 bytes of the log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(4000);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        text[start..].to_string()
    }

    /// Sends SIGTERM and waits (at most `limit`) for the exit status.
    pub async fn terminate(&mut self, limit: Duration) -> std::process::ExitStatus {
        let pid = self.pid().expect("broker running") as i32;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill(SIGTERM)");
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no exit within {limit:?} of SIGTERM: {}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGSTOP: the process stops answering anything (a long GC pause, a frozen VM).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        // kill(2) only queues the signal: wait until every thread has stopped, or a request
        // sent right after could still be served by a thread not yet stopped (seen on a busy
        // machine: the "frozen" master stored and replicated it).
        let pid = self.pid().expect("running");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !all_threads_stopped(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "process {pid} did not stop after SIGSTOP"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// SIGCONT after [`Broker::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = self.pid().expect("running") as i32;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({sig})");
    }

    /// SIGKILL (no cleanup of any kind in the broker) and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGKILL without waiting for the process to be gone (a plug may follow at once).
    pub fn sigkill(&mut self) -> Child {
        let mut c = self.child.take().expect("broker running");
        c.kill().expect("SIGKILL the broker");
        c
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where a child runs: a network namespace (the test's own when `None`) and the address it
/// listens on there.
#[derive(Debug, Clone)]
pub struct Place {
    /// The network namespace, made by the test ([`super::netns::Lab`]).
    pub netns: Option<String>,
    /// Every port of the child listens on this address.
    pub ip: IpAddr,
}

impl Default for Place {
    /// Loopback of the test's own namespace.
    fn default() -> Self {
        Self {
            netns: None,
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }
}

/// How a child runs.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// `conveyor standalone`: its own name server and a broker.
    Standalone,
    /// `conveyor broker`, registering with the name server at `namesrv`.
    Broker {
        /// The name server.
        namesrv: SocketAddr,
    },
    /// `conveyor namesrv`, listening on the child's `broker` address.
    NameServer,
    /// `conveyor controller`, listening on the child's `broker` address.
    Controller,
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind port 0")
        .port()
}

/// Whether every thread of `pid` is stopped (state `T` in `/proc/<pid>/task/*/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            // The state follows the command name, which is in parentheses and may hold spaces.
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| rest.starts_with('T'))
            })
            .unwrap_or(true) // a thread that just exited
    })
}
