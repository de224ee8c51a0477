//! TLS on the client ports, as Apache RocketMQ serves it: one port takes TLS and plaintext
//! side by side (*permissive*, the Java servers' default: a connection whose first byte is
//! `0x16`, a TLS handshake record, is TLS), or TLS only (*enforcing*), or plaintext only.
//!
//! Why the default is permissive with a self-signed certificate: the 5.x SDKs connect with TLS
//! unless told otherwise (the Java SDK's `enableSsl` is on by default) and do not check the
//! server's certificate, so Apache's proxy starts with a generated certificate
//! (`tlsTestModeEnable`). Conveyor does the same, so those clients work with no settings. A
//! certificate given as PEM files is re-read when either file changes (checked at most once
//! a second, at handshakes), so a rotated certificate (cert-manager renews the Secret, the
//! kubelet updates the mounted files) serves new connections without a restart and without
//! dropping the open ones.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// First byte of a TLS connection: the handshake record type.
const TLS_HANDSHAKE: u8 = 0x16;
/// How long a TLS handshake may take once the client started it.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the certificate files are looked at for a change.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// Which connections a port accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// Plaintext only (RocketMQ's `disabled`).
    Off,
    /// TLS and plaintext on the same port, told apart by the first byte (RocketMQ's default).
    #[default]
    Permissive,
    /// TLS only: a plaintext connection is closed.
    Enforcing,
}

impl std::str::FromStr for TlsMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "off" | "disabled" => Ok(Self::Off),
            "permissive" => Ok(Self::Permissive),
            "enforcing" => Ok(Self::Enforcing),
            _ => Err(format!(
                "unknown TLS mode {s:?} (off, permissive or enforcing)"
            )),
        }
    }
}

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CertSource {
    /// Generated at start for `localhost` (clients that verify certificates refuse it).
    #[default]
    SelfSigned,
    /// PEM files: the chain (leaf first) and its private key, re-read when they change.
    Files {
        /// The certificate chain.
        cert: PathBuf,
        /// The private key (PKCS#8, PKCS#1 or SEC1).
        key: PathBuf,
    },
}

/// TLS settings of the client ports (`[tls]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsConfig {
    /// Which connections are accepted.
    pub mode: TlsMode,
    /// The certificate.
    pub cert: CertSource,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read or parsed.
    #[error("TLS certificate {path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The key does not suit rustls, or does not match the certificate.
    #[error("TLS key: {0}")]
    Key(String),
    /// The self-signed certificate could not be generated.
    #[error("TLS self-signed certificate: {0}")]
    Generate(String),
}

/// Accepts connections on one port in its [`TlsMode`].
#[derive(Clone)]
pub struct Acceptor {
    /// Which connections are accepted.
    mode: TlsMode,
    /// The TLS side; `None` when the mode is [`TlsMode::Off`].
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Acceptor {
    /// An acceptor for `config`, offering `alpn` (for example `h2` for gRPC) to TLS clients.
    /// The certificate is loaded (or generated) now, so a bad file fails the start.
    pub fn new(config: &TlsConfig, alpn: &[&[u8]]) -> Result<Self, TlsError> {
        if config.mode == TlsMode::Off {
            return Ok(Self {
                mode: TlsMode::Off,
                tls: None,
            });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let resolver: Arc<dyn ResolvesServerCert> = match &config.cert {
            CertSource::SelfSigned => Arc::new(FixedCert(Arc::new(self_signed(&provider)?))),
            CertSource::Files { cert, key } => {
                Arc::new(ReloadingCert::load(cert, key, provider.clone())?)
            }
        };
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Key(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        server.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Self {
            mode: config.mode,
            tls: Some(tokio_rustls::TlsAcceptor::from(Arc::new(server))),
        })
    }

    /// The mode this acceptor serves.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// Takes a new connection: plaintext as it is (when the mode allows it), TLS after its
    /// handshake. The client has `first_byte` to start talking (an idle plaintext client of
    /// a permissive port is told apart only by its first byte), then 10 s for the handshake.
    /// An error means the connection is to be dropped (a plaintext client on an enforcing
    /// port, a failed or too slow handshake); it never concerns other connections.
    pub async fn accept(&self, tcp: TcpStream, first_byte: Duration) -> io::Result<MaybeTls> {
        let Some(tls) = &self.tls else {
            return Ok(MaybeTls::Plain(tcp));
        };
        let is_tls = tokio::time::timeout(first_byte, async {
            let mut first = [0u8; 1];
            io::Result::Ok(tcp.peek(&mut first).await? == 1 && first[0] == TLS_HANDSHAKE)
        })
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the client sent nothing"))??;
        match (is_tls, self.mode) {
            (true, _) => tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))?
                .map(|s| MaybeTls::Tls(Box::new(s))),
            (false, TlsMode::Enforcing) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "plaintext connection on a TLS-only port",
            )),
            (false, _) => Ok(MaybeTls::Plain(tcp)),
        }
    }
}

/// A generated certificate for `localhost` and the loopback addresses.
fn self_signed(provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let generate = || -> Result<_, rcgen::Error> {
        let mut params = rcgen::CertificateParams::new(names)?;
        // A host name as subject: clients that trust this certificate by pinning it name
        // the server after its subject (gRPC's `ssl_target_name_override`), and that name
        // goes out as SNI, which must be a DNS name.
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "localhost");
        let key = rcgen::KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok((cert, key))
    };
    let (cert, key) = generate().map_err(|e| TlsError::Generate(e.to_string()))?;
    let key = PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| TlsError::Generate(e.to_string()))?;
    certified(vec![cert.der().clone()], key, provider)
}

/// The chain and key as rustls signs with them, checked to belong together.
fn certified(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::Key(e.to_string()))?;
    let certified = CertifiedKey::new(chain, signer);
    certified
        .keys_match()
        .map_err(|e| TlsError::Key(format!("the key does not match the certificate: {e}")))?;
    Ok(certified)
}

/// Reads a PEM chain and key.
fn read_pem(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let pem_error = |path: &Path, reason: String| TlsError::Pem {
        path: path.to_path_buf(),
        reason,
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| pem_error(cert, e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(pem_error(cert, "no CERTIFICATE block".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error(key, e.to_string()))?;
    certified(chain, key_der, provider)
}

/// The same certificate for every connection.
#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A certificate from files, re-read when they change.
#[derive(Debug)]
struct ReloadingCert {
    /// The chain's file.
    cert_path: PathBuf,
    /// The key's file.
    key_path: PathBuf,
    /// Loads the key.
    provider: Arc<CryptoProvider>,
    /// What is served now.
    current: Mutex<Loaded>,
}

/// The certificate served and what its files looked like when it was read.
#[derive(Debug)]
struct Loaded {
    /// The certificate.
    key: Arc<CertifiedKey>,
    /// Modification times of the chain and key files when read.
    stamps: (Option<SystemTime>, Option<SystemTime>),
    /// When the files were last looked at.
    checked: Instant,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl ReloadingCert {
    fn load(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let stamps = (modified(cert), modified(key));
        let loaded = read_pem(cert, key, &provider)?;
        Ok(Self {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            provider,
            current: Mutex::new(Loaded {
                key: Arc::new(loaded),
                stamps,
                checked: Instant::now(),
            }),
        })
    }

    /// The certificate to serve, re-read first when a file changed. A file caught half
    /// written (or a new key not matching yet) keeps the old certificate, tried again at
    /// the next check.
    fn current(&self) -> Arc<CertifiedKey> {
        let mut loaded = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if loaded.checked.elapsed() >= RELOAD_CHECK {
            loaded.checked = Instant::now();
            let stamps = (modified(&self.cert_path), modified(&self.key_path));
            if stamps != loaded.stamps {
                match read_pem(&self.cert_path, &self.key_path, &self.provider) {
                    Ok(key) => {
                        tracing::info!(cert = %self.cert_path.display(), "TLS certificate reloaded");
                        loaded.key = Arc::new(key);
                        loaded.stamps = stamps;
                    }
                    Err(e) => tracing::warn!(error = %e, "TLS certificate not reloaded"),
                }
            }
        }
        loaded.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// An accepted connection, plaintext or TLS.
#[derive(Debug)]
pub enum MaybeTls {
    /// Plaintext.
    Plain(TcpStream),
    /// TLS, handshake done.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl MaybeTls {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(s) => s.get_ref().0,
        }
    }

    /// Whether the connection is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_))
    }

    /// Separate read and write halves, for a reader and a writer task. Plaintext keeps
    /// TCP's own halves (no lock between them on the hot path).
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Self::Plain(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
            Self::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (ReadHalf::Tls(Box::new(r)), WriteHalf::Tls(Box::new(w)))
            }
        }
    }
}

/// The read half of a [`MaybeTls`].
#[derive(Debug)]
pub enum ReadHalf {
    /// Plaintext.
    Plain(tokio::net::tcp::OwnedReadHalf),
    /// TLS.
    Tls(Box<tokio::io::ReadHalf<tokio_rustls::server::TlsStream<TcpStream>>>),
}

/// The write half of a [`MaybeTls`].
#[derive(Debug)]
pub enum WriteHalf {
    /// Plaintext.
    Plain(tokio::net::tcp::OwnedWriteHalf),
    /// TLS.
    Tls(Box<tokio::io::WriteHalf<tokio_rustls::server::TlsStream<TcpStream>>>),
}

/// Implements AsyncRead or AsyncWrite for an enum whose variants `Plain` and `Tls` each hold
/// a stream of that kind (the TLS one boxed), by handing each call to the variant.
macro_rules! delegate_io {
    (read $t:ty) => {
        impl AsyncRead for $t {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
                    Self::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
                }
            }
        }
    };
    (write $t:ty) => {
        impl AsyncWrite for $t {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
                    Self::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_flush(cx),
                    Self::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
                    Self::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
                }
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                    Self::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    Self::Plain(s) => s.is_write_vectored(),
                    Self::Tls(s) => s.is_write_vectored(),
                }
            }
        }
    };
}

delegate_io!(read MaybeTls);
delegate_io!(write MaybeTls);
delegate_io!(read ReadHalf);
delegate_io!(write WriteHalf);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_by_name_and_refuse_others() {
        assert_eq!("permissive".parse::<TlsMode>(), Ok(TlsMode::Permissive));
        assert_eq!("ENFORCING".parse::<TlsMode>(), Ok(TlsMode::Enforcing));
        assert_eq!("disabled".parse::<TlsMode>(), Ok(TlsMode::Off));
        assert!("on".parse::<TlsMode>().is_err());
    }

    #[test]
    fn a_missing_certificate_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = TlsConfig {
            mode: TlsMode::Enforcing,
            cert: CertSource::Files {
                cert: dir.path().join("tls.crt"),
                key: dir.path().join("tls.key"),
            },
        };
        let err = Acceptor::new(&config, &[]).err().expect("must fail");
        assert!(err.to_string().contains("tls.crt"), "{err}");
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = rcgen::generate_simple_self_signed(vec!["a".into()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b".into()]).unwrap();
        std::fs::write(dir.path().join("tls.crt"), a.cert.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), b.signing_key.serialize_pem()).unwrap();
        let config = TlsConfig {
            mode: TlsMode::Permissive,
            cert: CertSource::Files {
                cert: dir.path().join("tls.crt"),
                key: dir.path().join("tls.key"),
            },
        };
        let err = Acceptor::new(&config, &[]).err().expect("must fail");
        assert!(matches!(err, TlsError::Key(_)), "{err}");
    }
}
