//! One plain-HTTP GET, for what speaks HTTP next to RocketMQ's protocol: a broker's
//! `/metrics` (the scrape-cost benchmark) and a Prometheus server's query API (the operator's
//! consumer autoscaler). Plain HTTP only: both are loopback or in-cluster endpoints.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};

/// Why a GET failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The URL cannot be used (not `http://host[:port]/…`).
    #[error("{url}: {why}")]
    BadUrl {
        /// The URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// Connecting, sending or reading failed.
    #[error("{url}: {why}")]
    Failed {
        /// The URL.
        url: String,
        /// What failed.
        why: String,
    },
    /// No whole answer within the timeout.
    #[error("{url}: no answer within {timeout:?}")]
    Timeout {
        /// The URL.
        url: String,
        /// The timeout.
        timeout: Duration,
    },
}

/// GETs `url` (`http://host:port/path?query`): the status code and the whole body.
pub async fn get(url: &str, timeout: Duration) -> Result<(u16, Bytes), HttpError> {
    tokio::time::timeout(timeout, get_unbounded(url))
        .await
        .map_err(|_| HttpError::Timeout {
            url: url.to_string(),
            timeout,
        })?
}

async fn get_unbounded(url: &str) -> Result<(u16, Bytes), HttpError> {
    let bad = |why: String| HttpError::BadUrl {
        url: url.to_string(),
        why,
    };
    let failed = |why: String| HttpError::Failed {
        url: url.to_string(),
        why,
    };
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| bad(e.to_string()))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad("only http:// is supported".into()));
    }
    let host = uri.host().ok_or_else(|| bad("no host".into()))?.to_string();
    let port = uri.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| failed(format!("cannot reach {host}:{port}: {e}")))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| failed(e.to_string()))?;
    let conn = tokio::spawn(conn);
    let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
    let request = hyper::Request::get(uri)
        .header(hyper::header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|e| bad(e.to_string()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| failed(e.to_string()))?
        .to_bytes();
    conn.abort();
    Ok((status, body))
}
