//! Request signatures of RocketMQ's ACL: what the Java client's `AclClientRPCHook` and the Go
//! client's ACL interceptor add to each request, and what a broker checks. Both sides build
//! the same content — the values of every ext field except `Signature`, in key order with no
//! separator, as UTF-8, then the body — and sign it with HMAC-SHA1 keyed by the secret key,
//! Base64-encoded.
//!
//! It lives here, beside the client that signs, so that the broker checks with the very code
//! its own outgoing requests (registration, controller, relayed writes) are signed with.

use std::sync::{Arc, RwLock};

use base64::Engine as _;
use conveyor_protocol::command::{ExtFields, RemotingCommand};

/// The ext field naming the signer.
pub const ACCESS_KEY: &str = "AccessKey";
/// The ext field holding the signature.
pub const SIGNATURE: &str = "Signature";
/// The ext field of a temporary credential's token (signed, not checked, as in RocketMQ).
pub const SECURITY_TOKEN: &str = "SecurityToken";

/// An access key and its secret: who signs requests.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Public name of the user (`AccessKey`).
    pub access_key: String,
    /// The secret the signature is keyed with; never sent.
    pub secret_key: String,
    /// A temporary credential's token, sent and signed when set.
    pub security_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Credentials of `access_key` with `secret_key`.
    pub fn new(access_key: impl Into<String>, secret_key: impl Into<String>) -> Self {
        Self {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            security_token: None,
        }
    }

    /// Adds `AccessKey` (and `SecurityToken`) to `request` and signs it, as
    /// `AclClientRPCHook.doBeforeRequest` does.
    pub fn sign(&self, request: &mut RemotingCommand) {
        request.set_ext(ACCESS_KEY, &self.access_key);
        if let Some(token) = &self.security_token {
            request.set_ext(SECURITY_TOKEN, token);
        }
        request.ext_fields.remove(SIGNATURE);
        let signature = encode(&tag(
            &self.secret_key,
            signed_parts(&request.ext_fields, &request.body, false),
        ));
        request.set_ext(SIGNATURE, signature);
    }
}

/// What a signature covers, in order: every ext field's value but `Signature`'s in key order
/// (byte order, as Java's `TreeMap` of ASCII keys), then the body. `skip_unique_key_query`:
/// leave out `_UNIQUE_KEY_QUERY`, which clients up to 4.9.3 added after signing. The parts are
/// fed to the HMAC one by one: a large body is never copied to be signed or checked.
pub fn signed_parts<'a>(
    ext: &'a ExtFields,
    body: &'a [u8],
    skip_unique_key_query: bool,
) -> impl Iterator<Item = &'a [u8]> {
    ext.iter()
        .filter(move |(key, _)| {
            *key != SIGNATURE && !(skip_unique_key_query && *key == "_UNIQUE_KEY_QUERY")
        })
        .map(|(_, value)| value.as_bytes())
        .chain(std::iter::once(body))
}

/// HMAC-SHA1 of `parts` (as one message) keyed by `secret` (`AclSigner.calSignature`).
fn tag<'a>(secret: &str, parts: impl IntoIterator<Item = &'a [u8]>) -> ring::hmac::Tag {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
    let mut context = ring::hmac::Context::with_key(&key);
    for part in parts {
        context.update(part);
    }
    context.sign()
}

fn encode(tag: &ring::hmac::Tag) -> String {
    base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
}

/// True when `expected` equals `tag`, compared in constant time.
fn tag_is(tag: &ring::hmac::Tag, expected: &[u8]) -> bool {
    let tag = tag.as_ref();
    tag.len() == expected.len() && tag.iter().zip(expected).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// Base64 of HMAC-SHA1 of `content` keyed by `secret`.
pub fn signature(secret: &str, content: &[u8]) -> String {
    encode(&tag(secret, [content]))
}

/// True when `given` (Base64) is the signature of `parts` under `secret`.
pub fn verify<'a>(secret: &str, parts: impl IntoIterator<Item = &'a [u8]>, given: &str) -> bool {
    base64::engine::general_purpose::STANDARD
        .decode(given)
        .is_ok_and(|expected| tag_is(&tag(secret, parts), &expected))
}

/// True when `expected` (raw bytes) is the HMAC-SHA1 of `content` under `secret`.
pub fn verify_tag(secret: &str, content: &[u8], expected: &[u8]) -> bool {
    tag_is(&tag(secret, [content]), expected)
}

static CLIENT_CREDENTIALS: RwLock<Option<Arc<Credentials>>> = RwLock::new(None);

/// Makes every remoting client of this process sign its requests with `credentials` (a
/// broker's cluster identity, an admin tool's user), or stop signing (`None`); as RocketMQ
/// registers one RPC hook per client instance.
pub fn set_client_credentials(credentials: Option<Credentials>) {
    *CLIENT_CREDENTIALS
        .write()
        .unwrap_or_else(|e| e.into_inner()) = credentials.map(Arc::new);
}

/// What clients sign with ([`crate::RemotingConfig`]'s default).
pub fn client_credentials() -> Option<Arc<Credentials>> {
    CLIENT_CREDENTIALS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(ext: &ExtFields, body: &[u8], skip: bool) -> Vec<u8> {
        signed_parts(ext, body, skip).collect::<Vec<_>>().concat()
    }

    #[test]
    fn the_signature_is_rocketmqs_test_vector() {
        // AclSignerTest: "RocketMQ" under "12345678".
        assert_eq!(
            signature("12345678", b"RocketMQ"),
            "IUc8rrO/0gDch8CjObLQsW2rsiA="
        );
        let vector: [&[u8]; 1] = [b"RocketMQ"];
        assert!(verify("12345678", vector, "IUc8rrO/0gDch8CjObLQsW2rsiA="));
        assert!(!verify("12345679", vector, "IUc8rrO/0gDch8CjObLQsW2rsiA="));
        assert!(!verify("12345678", vector, "not base64!"));
        // Fed in pieces, the same message signs the same.
        let pieces: [&[u8]; 2] = [b"Rocket", b"MQ"];
        assert!(verify("12345678", pieces, "IUc8rrO/0gDch8CjObLQsW2rsiA="));
    }

    #[test]
    fn content_is_the_values_in_key_order_then_the_body() {
        let mut ext = ExtFields::new();
        ext.insert("topic".into(), "T".into());
        ext.insert("AccessKey".into(), "ak".into());
        ext.insert("Signature".into(), "ignored".into());
        ext.insert("a".into(), "G".into());
        ext.insert("_UNIQUE_KEY_QUERY".into(), "true".into());
        assert_eq!(content(&ext, b"body", false), b"aktrueGTbody");
        assert_eq!(content(&ext, b"body", true), b"akGTbody");
    }

    #[test]
    fn a_signed_request_verifies_and_a_changed_one_does_not() {
        let creds = Credentials::new("rocketmq2", "12345678");
        let mut req = RemotingCommand::request(10, ExtFields::new())
            .with_ext("topic", "T")
            .with_body(&b"hello"[..]);
        creds.sign(&mut req);
        assert_eq!(req.ext(ACCESS_KEY), Some("rocketmq2"));
        let given = req.ext(SIGNATURE).unwrap().to_string();
        assert!(verify(
            "12345678",
            [content(&req.ext_fields, &req.body, false).as_slice()],
            &given
        ));
        req.set_ext("topic", "U");
        assert!(!verify(
            "12345678",
            signed_parts(&req.ext_fields, &req.body, false),
            &given
        ));
    }
}
