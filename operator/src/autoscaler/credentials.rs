//! The credentials and CA of a Prometheus that wants them, read from the Secret a
//! ConsumerAutoscaler names (`spec.prometheus.authentication`). The keys are the parameters
//! of KEDA's Prometheus scaler, so that mode Keda hands KEDA the same Secret in a
//! TriggerAuthentication (see `keda`).

use std::collections::BTreeMap;

use base64::Engine;
use conveyor_client::http::{trusting, GetOptions};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::{Api, Client};

use super::resource::{PrometheusAuthMode, PrometheusAuthentication};

/// The Secret key of the bearer token (KEDA's `bearerToken`).
pub const BEARER_TOKEN: &str = "bearerToken";
/// The Secret key of the user name (KEDA's `username`).
pub const USERNAME: &str = "username";
/// The Secret key of the password (KEDA's `password`).
pub const PASSWORD: &str = "password";
/// The Secret key of the PEM CA bundle (KEDA's `ca`).
pub const CA: &str = "ca";

/// What the GET to Prometheus sends and trusts, from the Secret's `data` (pure).
pub fn options(
    auth: &PrometheusAuthentication,
    data: &BTreeMap<String, ByteString>,
) -> Result<GetOptions, String> {
    let text = |key: &str| -> Result<String, String> {
        let value = data
            .get(key)
            .ok_or_else(|| format!("Secret {} has no key {key}", auth.secret_name))?;
        let value = String::from_utf8(value.0.clone())
            .map_err(|_| format!("key {key} of Secret {} is not UTF-8", auth.secret_name))?;
        Ok(value.trim_end_matches(['\r', '\n']).to_string())
    };
    let authorization = match auth.mode {
        None => None,
        Some(PrometheusAuthMode::Bearer) => Some(format!("Bearer {}", text(BEARER_TOKEN)?)),
        Some(PrometheusAuthMode::Basic) => {
            let pair = format!("{}:{}", text(USERNAME)?, text(PASSWORD)?);
            Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            ))
        }
    };
    let tls = match data.get(CA) {
        Some(pem) => Some(
            trusting(&pem.0)
                .map_err(|e| format!("key {CA} of Secret {}: {e}", auth.secret_name))?,
        ),
        None => None,
    };
    Ok(GetOptions { authorization, tls })
}

/// Reads the Secret `auth` names in namespace `ns` and turns it into [`options`].
pub async fn read(
    client: &Client,
    ns: &str,
    auth: &PrometheusAuthentication,
) -> Result<GetOptions, String> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(&auth.secret_name)
        .await
        .map_err(|e| format!("cannot read Secret {}: {e}", auth.secret_name))?
        .ok_or_else(|| format!("Secret {} does not exist", auth.secret_name))?;
    options(auth, &secret.data.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    fn auth(mode: Option<PrometheusAuthMode>) -> PrometheusAuthentication {
        PrometheusAuthentication {
            secret_name: "prom".into(),
            mode,
        }
    }

    #[test]
    fn bearer_and_basic_headers_from_keda_keys() {
        let o = options(
            &auth(Some(PrometheusAuthMode::Bearer)),
            &data(&[("bearerToken", "s3cret\n")]),
        )
        .unwrap();
        assert_eq!(o.authorization.as_deref(), Some("Bearer s3cret"));
        assert!(o.tls.is_none());
        // RFC 7617's example.
        let o = options(
            &auth(Some(PrometheusAuthMode::Basic)),
            &data(&[("username", "Aladdin"), ("password", "open sesame")]),
        )
        .unwrap();
        assert_eq!(
            o.authorization.as_deref(),
            Some("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
        );
    }

    #[test]
    fn a_missing_key_or_a_bad_ca_is_an_error_naming_it() {
        let e = options(
            &auth(Some(PrometheusAuthMode::Basic)),
            &data(&[("username", "u")]),
        )
        .unwrap_err();
        assert!(e.contains("no key password"), "{e}");
        let e = options(&auth(None), &data(&[("ca", "not a certificate")])).unwrap_err();
        assert!(e.contains("key ca of Secret prom"), "{e}");
        // No mode: nothing sent, only the CA (absent here) used.
        let o = options(&auth(None), &data(&[])).unwrap();
        assert!(o.authorization.is_none() && o.tls.is_none());
    }
}
