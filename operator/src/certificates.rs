//! The certificates the operator makes for a cluster with `spec.security.tls.generateCertificates`
//! (and no `secretName`): a CA of its own, kept in the Secret `<cluster>-ca` (made once, 10
//! years), and a server certificate signed by it for every name-server and broker DNS name,
//! kept with the CA's certificate in the Secret `<cluster>-tls` that the pods mount. The server
//! certificate is valid 90 days and made again 30 days before it ends, or as soon as the
//! cluster's DNS names change (a group added): the kubelet updates the mounted files and the
//! servers re-read them, so rotation needs no restart, and clients that trust the CA keep
//! trusting the new certificate.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::builders::{hash, names, namespace, owned_secret, owner_reference};
use crate::crd::MessageQueueCluster;
use crate::reconcile::apply::apply;
use crate::reconcile::context::Error;

/// Annotation of the server certificate's Secret: when it ends (Unix seconds).
pub const NOT_AFTER_ANNOTATION: &str = "conveyor.dev/not-after";
/// Annotation of the server certificate's Secret: the hash of the DNS names it was made for.
pub const NAMES_ANNOTATION: &str = "conveyor.dev/dns-names";

const DAY: i64 = 86_400;
/// How long a server certificate is valid.
pub const SERVER_VALIDITY_DAYS: i64 = 90;
/// How long before its end a server certificate is replaced.
pub const RENEW_BEFORE_DAYS: i64 = 30;
/// How long the CA is valid.
pub const CA_VALIDITY_DAYS: i64 = 3650;

/// Every DNS name clients and peers reach the cluster's servers by.
pub fn dns_names(mqc: &MessageQueueCluster) -> Vec<String> {
    let cluster = mqc.name_any();
    let ns = namespace(mqc);
    let mut services = vec![
        names::name_server(&cluster),
        format!("*.{}", names::name_server_headless(&cluster)),
    ];
    for g in 0..mqc.spec.broker.groups.max(1) {
        services.push(format!("*.{}", names::broker_group(&cluster, g)));
    }
    let mut out = vec!["localhost".to_string()];
    for s in services {
        out.push(format!("{s}.{ns}.svc"));
        out.push(format!("{s}.{ns}.svc.cluster.local"));
    }
    out
}

/// Whether a server certificate ending at `not_after` (Unix seconds; `None`: unknown) made
/// for names hashing to `made_for` must be made again for `names_hash` at `now`.
pub fn needs_new(
    not_after: Option<i64>,
    made_for: Option<&str>,
    names_hash: &str,
    now: i64,
) -> bool {
    match not_after {
        None => true,
        Some(end) => end - now < RENEW_BEFORE_DAYS * DAY || made_for != Some(names_hash),
    }
}

fn secret(mqc: &MessageQueueCluster, name: String, data: Vec<(&str, String)>) -> Secret {
    owned_secret(
        name,
        &namespace(mqc),
        &mqc.name_any(),
        "tls",
        owner_reference(mqc),
        data,
    )
}

fn value(s: &Secret, key: &str) -> Option<String> {
    String::from_utf8(s.data.as_ref()?.get(key)?.0.clone()).ok()
}

fn tls_error(e: rcgen::Error) -> Error {
    Error::Certificate(e.to_string())
}

fn validity(params: &mut rcgen::CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

/// A new CA: (certificate PEM, key PEM).
fn new_ca(mqc: &MessageQueueCluster) -> Result<(String, String), rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("conveyor {}/{} CA", namespace(mqc), mqc.name_any()),
    );
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, CA_VALIDITY_DAYS);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A server certificate for `names` signed by the CA: (certificate PEM, key PEM, not after).
fn new_server(
    names: Vec<String>,
    ca_cert: &str,
    ca_key: &str,
) -> Result<(String, String, i64), rcgen::Error> {
    let issuer = rcgen::Issuer::from_ca_cert_pem(ca_cert, rcgen::KeyPair::from_pem(ca_key)?)?;
    let mut params = rcgen::CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "conveyor");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    validity(&mut params, SERVER_VALIDITY_DAYS);
    let not_after = params.not_after.unix_timestamp();
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

/// Makes the CA if there is none, and the server certificate when it is missing, near its
/// end or made for other names.
pub async fn ensure(client: &Client, mqc: &MessageQueueCluster) -> Result<(), Error> {
    let tls = &mqc.spec.security.tls;
    if !tls.generate_certificates || tls.secret_name.is_some() {
        return Ok(());
    }
    let ns = namespace(mqc);
    let cluster = mqc.name_any();
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let ca = match api.get_opt(&names::ca(&cluster)).await? {
        Some(s) => (
            value(&s, "ca.crt").unwrap_or_default(),
            value(&s, "ca.key").unwrap_or_default(),
        ),
        None => {
            let (cert, key) = new_ca(mqc).map_err(tls_error)?;
            let s = secret(
                mqc,
                names::ca(&cluster),
                vec![("ca.crt", cert.clone()), ("ca.key", key.clone())],
            );
            crate::reconcile::apply::create_if_absent(client, &ns, &s).await?;
            tracing::info!(cluster, "TLS: made the cluster's CA");
            (cert, key)
        }
    };
    let dns = dns_names(mqc);
    let names_hash = hash(&dns.iter().map(String::as_str).collect::<Vec<_>>());
    let current = api.get_opt(&names::tls(&cluster)).await?;
    let annotation = |k: &str| {
        current
            .as_ref()
            .and_then(|s| s.annotations().get(k).cloned())
    };
    let not_after = annotation(NOT_AFTER_ANNOTATION).and_then(|v| v.parse().ok());
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    if !needs_new(
        not_after,
        annotation(NAMES_ANNOTATION).as_deref(),
        &names_hash,
        now,
    ) {
        return Ok(());
    }
    let (cert, key, not_after) = new_server(dns, &ca.0, &ca.1).map_err(tls_error)?;
    let mut s = secret(
        mqc,
        names::tls(&cluster),
        vec![("tls.crt", cert), ("tls.key", key), ("ca.crt", ca.0)],
    );
    s.metadata.annotations = Some(
        [
            (NOT_AFTER_ANNOTATION.to_string(), not_after.to_string()),
            (NAMES_ANNOTATION.to_string(), names_hash),
        ]
        .into(),
    );
    apply(client, &ns, &s).await?;
    tracing::info!(
        cluster,
        not_after,
        "TLS: made a server certificate signed by the cluster's CA"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_certificate_is_made_again_near_its_end_or_for_new_names() {
        let now = 1_800_000_000;
        assert!(needs_new(None, None, "h", now));
        assert!(!needs_new(Some(now + 60 * DAY), Some("h"), "h", now));
        assert!(needs_new(Some(now + 29 * DAY), Some("h"), "h", now));
        assert!(needs_new(Some(now + 60 * DAY), Some("old"), "h", now));
    }

    #[test]
    fn the_server_certificate_chains_to_the_ca_and_names_every_service() {
        let mut mqc = crate::builders::tests::cluster(2, 2);
        mqc.spec.security.tls.generate_certificates = true;
        let names = dns_names(&mqc);
        assert!(
            names.contains(&"*.orders-broker-1.mq.svc".to_string()),
            "{names:?}"
        );
        assert!(names.contains(&"orders-namesrv.mq.svc".to_string()));
        let (ca_cert, ca_key) = new_ca(&mqc).unwrap();
        let (cert, key, not_after) = new_server(names, &ca_cert, &ca_key).unwrap();
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        assert!((not_after - now - SERVER_VALIDITY_DAYS * DAY).abs() < 60);
        // rustls verifies the chain: the server certificate for a broker's name, under the CA.
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca_cert.as_bytes()).unwrap())
            .unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            provider,
        )
        .build()
        .unwrap();
        let leaf = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
        let name = ServerName::try_from("orders-broker-1-0.orders-broker-1.mq.svc").unwrap();
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
            .expect("the server certificate verifies under the cluster's CA");
        assert!(key.contains("PRIVATE KEY"));
    }
}
