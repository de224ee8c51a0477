//! The operator's HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (the process serves
//! HTTP) and `/readyz` (see [`State`]). Routing is a pure function of the path and the
//! telemetry, so the probes are tested without a socket; [`serve`] only does the HTTP/1 framing.

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::state::{State, Telemetry};

/// Default of `--http-listen`: all interfaces, port 8081 (the brokers' HTTP port is 8080).
pub const DEFAULT_HTTP_LISTEN: &str = "0.0.0.0:8081";

/// Value of `--http-listen`: an address, or `off` for no HTTP endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listen {
    /// No endpoint (probes and metrics unavailable).
    Off,
    /// Listen on this address.
    On(SocketAddr),
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(Listen::Off);
        }
        s.parse()
            .map(Listen::On)
            .map_err(|e| format!("{s:?} is neither `off` nor an address like 0.0.0.0:8081: {e}"))
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Off => f.write_str("off"),
            Listen::On(a) => a.fmt(f),
        }
    }
}

/// An HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Status code.
    pub status: StatusCode,
    /// `Content-Type` header.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

const PLAIN: &str = "text/plain; charset=utf-8";
/// Prometheus text exposition format 0.0.4.
const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Answers a request for `path`.
pub fn answer(telemetry: &Telemetry, path: &str) -> Reply {
    let reply = |status, content_type, body: String| Reply {
        status,
        content_type,
        body,
    };
    match path {
        "/healthz" => reply(StatusCode::OK, PLAIN, "ok\n".into()),
        "/readyz" => {
            let state: State = telemetry.state();
            let status = if state.ready() {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            reply(status, PLAIN, format!("{}\n", state.describe()))
        }
        "/metrics" => reply(StatusCode::OK, PROMETHEUS, telemetry.metrics.render()),
        _ => reply(StatusCode::NOT_FOUND, PLAIN, "not found\n".into()),
    }
}

/// Serves [`answer`] on `listener` until the task is dropped (the process exits).
pub async fn serve(listener: TcpListener, telemetry: Telemetry) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::debug!(error = %e, "http: accept failed");
                continue;
            }
        };
        let telemetry = telemetry.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let r = answer(&telemetry, req.uri().path());
                async move {
                    let mut resp = Response::new(Full::new(Bytes::from(r.body)));
                    *resp.status_mut() = r.status;
                    resp.headers_mut()
                        .insert(CONTENT_TYPE, HeaderValue::from_static(r.content_type));
                    Ok::<_, Infallible>(resp)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn listen_parses_off_and_addresses() {
        assert_eq!("off".parse::<Listen>(), Ok(Listen::Off));
        assert_eq!("OFF".parse::<Listen>(), Ok(Listen::Off));
        let default: Listen = DEFAULT_HTTP_LISTEN.parse().unwrap();
        assert_eq!(default, Listen::On("0.0.0.0:8081".parse().unwrap()));
        assert_eq!(default.to_string(), DEFAULT_HTTP_LISTEN);
        assert!("8081".parse::<Listen>().is_err());
    }

    #[test]
    fn probes_follow_the_state() {
        let t = Telemetry::new();
        assert_eq!(answer(&t, "/healthz").status, StatusCode::OK);
        let r = answer(&t, "/readyz");
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.body.starts_with("starting"), "{}", r.body);
        for (state, code) in [
            (State::Syncing, StatusCode::SERVICE_UNAVAILABLE),
            (State::Running, StatusCode::OK),
            (State::LeaseUnreachable, StatusCode::SERVICE_UNAVAILABLE),
            (State::Standby, StatusCode::OK),
        ] {
            t.set_state(state);
            assert_eq!(answer(&t, "/readyz").status, code, "{state:?}");
            // Liveness never depends on the state.
            assert_eq!(answer(&t, "/healthz").status, StatusCode::OK);
        }
        assert_eq!(answer(&t, "/nope").status, StatusCode::NOT_FOUND);
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn the_endpoint_serves_metrics_and_probes_over_http() {
        let t = Telemetry::new();
        t.metrics
            .record_reconcile(Duration::from_millis(7), Some(("api", "Conflict")));
        t.set_state(State::Running);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, t.clone()));

        let metrics = get(addr, "/metrics").await;
        assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
        assert!(
            metrics.contains("content-type: text/plain; version=0.0.4"),
            "{metrics}"
        );
        for line in [
            "conveyor_operator_reconciliations_total 1",
            "conveyor_operator_reconcile_errors_total{kind=\"api\",reason=\"Conflict\"} 1",
            "conveyor_operator_reconcile_duration_seconds_count 1",
            "conveyor_operator_leader 1",
        ] {
            assert!(
                metrics.lines().any(|l| l == line),
                "no {line:?} in {metrics}"
            );
        }
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        t.set_state(State::Starting);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        server.abort();
    }
}
