//! TLS for outgoing remoting connections, as RocketMQ's clients do it with `tls.enable=true`:
//! the whole process's clients switch at once ([`set_client_tls`], RocketMQ's JVM-wide
//! `TlsSystemConfig`), so a broker whose ports enforce TLS also reaches its name servers,
//! controller and peers over TLS. The server's certificate is not verified, RocketMQ's
//! default (`tls.client.authServer=false`): the traffic is encrypted, and who may do what is
//! the access control's concern.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Whether new connections of every client of this process use TLS.
static CLIENT_TLS: AtomicBool = AtomicBool::new(false);

/// Makes every remoting client of this process connect with TLS (`true`) or plaintext.
pub fn set_client_tls(on: bool) {
    CLIENT_TLS.store(on, Ordering::Release);
}

/// Whether clients connect with TLS ([`crate::RemotingConfig`]'s default).
pub fn client_tls() -> bool {
    CLIENT_TLS.load(Ordering::Acquire)
}

/// The client side of TLS: no certificate check, the provider's signature checks kept.
pub fn connector() -> tokio_rustls::TlsConnector {
    tokio_rustls::TlsConnector::from(Arc::new(unverified_client_config()))
}

/// A rustls client configuration that accepts any server certificate (RocketMQ's clients'
/// default), for this crate's connections and for tools and tests that speak TLS.
pub fn unverified_client_config() -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_no_client_auth()
}

/// Accepts the server's certificate whatever it is (RocketMQ's `authServer=false`).
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
