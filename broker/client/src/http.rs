//! One HTTP GET, for what speaks HTTP next to RocketMQ's protocol: a broker's `/metrics`
//! (the scrape-cost benchmark) and a Prometheus server's query API (the operator's consumer
//! autoscaler), over `http://` or `https://` (the system's roots or a given CA), with an
//! `Authorization` header when the server wants credentials.

use std::sync::{Arc, OnceLock};
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

/// How a GET authenticates and which servers it trusts over https.
#[derive(Clone, Default)]
pub struct GetOptions {
    /// The `Authorization` header (`Bearer <token>`, `Basic <base64>`), if any.
    pub authorization: Option<String>,
    /// The roots an https server's certificate must chain to; `None`: the system's.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for GetOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credentials themselves.
        f.debug_struct("GetOptions")
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<set>"),
            )
            .field("custom_roots", &self.tls.is_some())
            .finish()
    }
}

/// A client configuration trusting the certificates of `pem` (a CA bundle) only.
pub fn trusting(pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("not a PEM certificate: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("unusable CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("no certificate in the CA bundle".into());
    }
    Ok(Arc::new(client_config(roots)))
}

fn client_config(roots: rustls::RootCertStore) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// The system's roots, loaded once.
fn system_roots() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!(error = %e, "a system root certificate could not be read");
            }
            let (added, ignored) = roots.add_parsable_certificates(found.certs);
            tracing::debug!(added, ignored, "system root certificates");
            Arc::new(client_config(roots))
        })
        .clone()
}

/// GETs `url` (`http://host:port/path?query`): the status code and the whole body.
pub async fn get(url: &str, timeout: Duration) -> Result<(u16, Bytes), HttpError> {
    get_with(url, &GetOptions::default(), timeout).await
}

/// GETs `url` (`http://` or `https://`) with `options`: the status code and the whole body.
pub async fn get_with(
    url: &str,
    options: &GetOptions,
    timeout: Duration,
) -> Result<(u16, Bytes), HttpError> {
    tokio::time::timeout(timeout, get_unbounded(url, options))
        .await
        .map_err(|_| HttpError::Timeout {
            url: url.to_string(),
            timeout,
        })?
}

async fn get_unbounded(url: &str, options: &GetOptions) -> Result<(u16, Bytes), HttpError> {
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
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(bad("only http:// and https:// are supported".into())),
    };
    let host = uri.host().ok_or_else(|| bad("no host".into()))?.to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let stream = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| failed(format!("cannot reach {host}:{port}: {e}")))?;
    let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
    // Origin-form (`/path?query`), as HTTP/1.1 asks of a request to the origin server: the
    // absolute form is for proxies, and not every server takes it.
    let target = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let mut request = hyper::Request::get(target).header(hyper::header::HOST, authority);
    if let Some(value) = &options.authorization {
        request = request.header(hyper::header::AUTHORIZATION, value);
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| bad(e.to_string()))?;
    let response = if https {
        // An IP address in the URL is checked against the certificate's IP SANs.
        let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']))
            .map_err(|e| bad(format!("{host} is not a TLS server name: {e}")))?
            .to_owned();
        let config = options.tls.clone().unwrap_or_else(system_roots);
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, stream)
            .await
            .map_err(|e| failed(format!("TLS with {host}:{port}: {e}")))?;
        send(tls, request).await
    } else {
        send(stream, request).await
    };
    let response = response.map_err(failed)?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| failed(e.to_string()))?
        .to_bytes();
    Ok((status, body))
}

/// One request over `io` (HTTP/1.1); the connection is dropped once the body is read.
async fn send<T>(
    io: T,
    request: hyper::Request<Empty<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| e.to_string())?;
    let conn = tokio::spawn(conn);
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string());
    // The connection task ends by itself once the response is read and the sender dropped.
    drop(sender);
    if response.is_err() {
        conn.abort();
    }
    response
}
