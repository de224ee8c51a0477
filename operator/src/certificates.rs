//! The certificates the operator makes for a cluster with `spec.security.tls.generateCertificates`
//! (and no `secretName`): a CA of its own, kept in the Secret `<cluster>-ca`, and a server
//! certificate signed by it for every name-server and broker DNS name, kept with the trust
//! bundle in the Secret `<cluster>-tls` that the pods mount. The same trust bundle, alone, is in
//! the public Secret `<cluster>-ca-cert` that applications mount.
//!
//! The server certificate is valid 90 days and made again 30 days before it ends, as soon as
//! the cluster's DNS names change (a group added), or when another CA signs: the kubelet
//! updates the mounted files and the servers re-read them, so no restart is needed.
//!
//! The CA is valid a year and rotated in two phases, as Strimzi does, so that nobody stops
//! trusting the servers on the way:
//! 1. 60 days before it ends (at once when `<cluster>-ca` is annotated
//!    `conveyor.dev/force-renew: "true"`), a new CA is made and published as `next`: every trust
//!    bundle holds both, the old one still signs. Clients and peers get the new CA before
//!    anything is signed by it.
//! 2. 30 days before the old CA ends ([`SWITCH_DELAY_SECS`] after a forced renewal), the new CA
//!    signs: the server certificate is made again under it, and the old CA stays in the bundles
//!    as `previous` until it ends, for whoever still holds a certificate it signed.
//!
//! Every decision is the pure [`ca_step`] over what the `<cluster>-ca` Secret records
//! ([`read_ca_state`]: the PEMs and annotations with each CA's end), so no certificate is ever
//! parsed; [`ensure`] only reads, generates and writes.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Map, Value};

use crate::builders::{hash, names, namespace, owned_secret, owner_reference};
use crate::crd::MessageQueueCluster;
use crate::reconcile::apply::apply;
use crate::reconcile::context::{Error, FIELD_MANAGER};

/// Annotation of the server certificate's Secret: when it ends (Unix seconds).
pub const NOT_AFTER_ANNOTATION: &str = "conveyor.dev/not-after";
/// Annotation of the server certificate's Secret: the hash of the DNS names it was made for.
pub const NAMES_ANNOTATION: &str = "conveyor.dev/dns-names";
/// Annotation of the server certificate's Secret: the hash of the CA certificate that signed
/// it, so that a CA switch makes it again.
pub const SIGNED_BY_ANNOTATION: &str = "conveyor.dev/signed-by";

/// Annotation of the CA Secret: when the CA that signs now ends (Unix seconds, or `unknown`).
pub const CA_NOT_AFTER_ANNOTATION: &str = "conveyor.dev/ca-not-after";
/// Annotation of the CA Secret: when the published next CA ends (Unix seconds).
pub const NEXT_NOT_AFTER_ANNOTATION: &str = "conveyor.dev/next-ca-not-after";
/// Annotation of the CA Secret: when the next CA was published (Unix seconds).
pub const NEXT_PUBLISHED_ANNOTATION: &str = "conveyor.dev/next-ca-published-at";
/// Annotation of the CA Secret: when the next CA starts signing (Unix seconds).
pub const SWITCH_AT_ANNOTATION: &str = "conveyor.dev/ca-switch-at";
/// Annotation of the CA Secret: when the retired previous CA ends (Unix seconds, or `unknown`).
pub const PREVIOUS_NOT_AFTER_ANNOTATION: &str = "conveyor.dev/previous-ca-not-after";
/// Annotation a user puts on the CA Secret (value `true`) to rotate the CA now (Strimzi's
/// `strimzi.io/force-renew`); the operator removes it once the rotation has started.
pub const FORCE_RENEW_ANNOTATION: &str = "conveyor.dev/force-renew";

/// The CA Secret's annotations the operator keeps (each write sets or removes all of them).
const CA_ANNOTATIONS: [&str; 6] = [
    CA_NOT_AFTER_ANNOTATION,
    NEXT_NOT_AFTER_ANNOTATION,
    NEXT_PUBLISHED_ANNOTATION,
    SWITCH_AT_ANNOTATION,
    PREVIOUS_NOT_AFTER_ANNOTATION,
    FORCE_RENEW_ANNOTATION,
];
/// The CA Secret's data keys: the signing CA, the published next one, the retired one.
const CA_KEYS: [&str; 5] = ["ca.crt", "ca.key", "next.crt", "next.key", "previous.crt"];
/// An end the operator cannot tell (a CA it did not make, see [`read_ca_state`]).
const UNKNOWN: &str = "unknown";
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "conveyor-operator");

const DAY: i64 = 86_400;
/// How long a server certificate is valid.
pub const SERVER_VALIDITY_DAYS: i64 = 90;
/// How long before its end a server certificate is replaced.
pub const RENEW_BEFORE_DAYS: i64 = 30;
/// How long a CA is valid: a year, so that rotation is routine rather than a once-a-decade
/// event nobody remembers how to do.
pub const CA_VALIDITY_DAYS: i64 = 365;
/// How long before its end the CA's successor is published (phase 1).
pub const CA_RENEW_BEFORE_DAYS: i64 = 60;
/// How long before its end the CA stops signing in favour of its successor (phase 2).
pub const CA_SWITCH_BEFORE_DAYS: i64 = 30;
/// How long the CAs of operators before rotation were valid: a CA Secret they made and that
/// records no end is taken to end this long after the Secret was created.
pub const LEGACY_CA_VALIDITY_DAYS: i64 = 3650;
/// The least time between publishing a CA and signing with it (a forced renewal's switch, or
/// a rotation the operator started late): long enough for the kubelet to refresh every mounted
/// copy of the bundle (its sync period is a minute) so that peers, and clients that re-read the
/// bundle, already trust the new CA when the servers present certificates it signed.
pub const SWITCH_DELAY_SECS: i64 = 120;

/// One CA as the CA Secret keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ca {
    /// Its certificate, PEM.
    pub cert: String,
    /// Its private key, PEM; `None` once retired (trusted, never signing again).
    pub key: Option<String>,
    /// When it ends (Unix seconds); `None`: unknown, see [`read_ca_state`].
    pub not_after: Option<i64>,
}

/// The CA published for trust that does not sign yet (phase 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextCa {
    /// The CA.
    pub ca: Ca,
    /// When it was published (Unix seconds).
    pub published_at: i64,
    /// When it starts signing (Unix seconds).
    pub switch_at: i64,
}

/// The cluster CA's rotation, as the `<cluster>-ca` Secret records it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CaState {
    /// The CA that signs now (`None`: no CA yet).
    pub current: Option<Ca>,
    /// The successor, published but not signing yet.
    pub next: Option<NextCa>,
    /// The CA that signed before the current one, trusted until it ends.
    pub previous: Option<Ca>,
    /// A user asked for a rotation now ([`FORCE_RENEW_ANNOTATION`]).
    pub force_renew: bool,
    /// Whether the Secret records the current CA's end (false: an operator before rotation
    /// made it).
    pub recorded: bool,
}

/// What the CA rotation does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaAction {
    /// Nothing is due.
    Keep,
    /// There is no CA: make one.
    MakeFirst,
    /// Phase 1: make the successor and publish it for trust; it signs from `switch_at`.
    PublishNext {
        /// When the successor starts signing (Unix seconds).
        switch_at: i64,
    },
    /// A forced renewal while a successor is published: it signs from `switch_at` instead.
    HastenSwitch {
        /// When the successor starts signing (Unix seconds).
        switch_at: i64,
    },
    /// Phase 2: the successor signs; the current CA is retired and stays trusted.
    SwitchToNext,
    /// The retired CA has ended: out of the bundle.
    DropPrevious,
    /// Write down what an operator before rotation left unrecorded (the CA's end).
    Record,
}

impl CaAction {
    fn describe(self) -> &'static str {
        match self {
            CaAction::Keep => "nothing to do",
            CaAction::MakeFirst => "made the cluster's CA",
            CaAction::PublishNext { .. } => "published a new CA for trust (phase 1)",
            CaAction::HastenSwitch { .. } => "forced renewal: the new CA signs sooner",
            CaAction::SwitchToNext => "the new CA signs now; the old one stays trusted (phase 2)",
            CaAction::DropPrevious => "the retired CA ended: out of the trust bundle",
            CaAction::Record => "recorded the CA's end",
        }
    }
}

/// What the CA rotation does next at `now` (Unix seconds), given what the CA Secret records.
pub fn ca_step(state: &CaState, now: i64) -> CaAction {
    let Some(current) = &state.current else {
        return CaAction::MakeFirst;
    };
    if ended(state.previous.as_ref(), now) {
        return CaAction::DropPrevious;
    }
    match &state.next {
        // The successor already published is the renewal asked for; only sooner.
        Some(next) if state.force_renew => {
            return CaAction::HastenSwitch {
                switch_at: next.switch_at.min(now + SWITCH_DELAY_SECS),
            };
        }
        Some(next) if now >= next.switch_at => return CaAction::SwitchToNext,
        Some(_) => {}
        None if state.force_renew => {
            return CaAction::PublishNext {
                switch_at: now + SWITCH_DELAY_SECS,
            };
        }
        None => {
            // An unknown end never starts a rotation by itself (see `read_ca_state`).
            if let Some(end) = current.not_after {
                if now >= end - CA_RENEW_BEFORE_DAYS * DAY {
                    // Late (the operator was away): still give the bundle time to spread.
                    return CaAction::PublishNext {
                        switch_at: (end - CA_SWITCH_BEFORE_DAYS * DAY).max(now + SWITCH_DELAY_SECS),
                    };
                }
            }
        }
    }
    if !state.recorded {
        return CaAction::Record;
    }
    CaAction::Keep
}

fn ended(ca: Option<&Ca>, now: i64) -> bool {
    ca.and_then(|c| c.not_after).is_some_and(|end| end <= now)
}

/// `state` once `action` is done at `now`; `make` makes a new CA (only called for
/// [`CaAction::MakeFirst`] and [`CaAction::PublishNext`]).
pub fn advance<E>(
    mut state: CaState,
    action: CaAction,
    now: i64,
    make: &mut impl FnMut() -> Result<Ca, E>,
) -> Result<CaState, E> {
    match action {
        CaAction::Keep | CaAction::Record => {}
        CaAction::MakeFirst => {
            state = CaState {
                current: Some(make()?),
                ..CaState::default()
            };
        }
        CaAction::PublishNext { switch_at } => {
            state.next = Some(NextCa {
                ca: make()?,
                published_at: now,
                switch_at,
            });
            state.force_renew = false;
        }
        CaAction::HastenSwitch { switch_at } => {
            if let Some(next) = &mut state.next {
                next.switch_at = switch_at;
            }
            state.force_renew = false;
        }
        CaAction::SwitchToNext => {
            if let Some(next) = state.next.take() {
                // Only one retired CA is kept: an older one signed nothing that is still in
                // use, since the server certificate was made again at the last switch.
                state.previous = state.current.take().map(|c| Ca { key: None, ..c });
                state.current = Some(next.ca);
            }
        }
        CaAction::DropPrevious => state.previous = None,
    }
    // Whatever was done is written with every annotation.
    state.recorded = true;
    Ok(state)
}

/// Runs [`ca_step`] and [`advance`] until nothing is due at `now`: the resulting state and
/// the actions done (none: the Secret needs no write).
pub fn settle<E>(
    mut state: CaState,
    now: i64,
    mut make: impl FnMut() -> Result<Ca, E>,
) -> Result<(CaState, Vec<CaAction>), E> {
    let mut done = Vec::new();
    // Each action moves towards Keep and a few at most fall due together (after a long outage:
    // drop the retired CA, switch, publish the next); the bound only guards against a bug.
    for _ in 0..8 {
        let action = ca_step(&state, now);
        if action == CaAction::Keep {
            break;
        }
        state = advance(state, action, now, &mut make)?;
        done.push(action);
    }
    Ok((state, done))
}

/// Every CA clients must trust at `now`, PEM concatenated: the signing CA, its published
/// successor and the retired one until it ends. Never a key.
pub fn trust_bundle(state: &CaState, now: i64) -> String {
    let previous = state.previous.as_ref().filter(|p| !ended(Some(p), now));
    let mut out = String::new();
    for ca in [
        state.current.as_ref(),
        state.next.as_ref().map(|n| &n.ca),
        previous,
    ]
    .into_iter()
    .flatten()
    {
        out.push_str(ca.cert.trim_end());
        out.push('\n');
    }
    out
}

/// When the next certificate step falls due after `now`, as a delay (the reconciler requeues
/// by then: Secrets are not watched, and a switch must not wait for the idle requeue). `None`:
/// nothing is scheduled (every end unknown).
pub fn next_due(state: &CaState, server_not_after: Option<i64>, now: i64) -> Option<Duration> {
    let current = state.current.as_ref();
    [
        state.next.as_ref().map(|n| n.switch_at),
        state.previous.as_ref().and_then(|p| p.not_after),
        match state.next {
            None => current
                .and_then(|c| c.not_after)
                .map(|end| end - CA_RENEW_BEFORE_DAYS * DAY),
            Some(_) => None,
        },
        server_not_after.map(|end| end - RENEW_BEFORE_DAYS * DAY),
    ]
    .into_iter()
    .flatten()
    .min()
    // A second past it, so that the step is due when the reconcile runs.
    .map(|at| Duration::from_secs((at - now).max(0) as u64 + 1))
}

fn annotation<'a>(s: &'a Secret, key: &str) -> Option<&'a str> {
    s.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn time_annotation(s: &Secret, key: &str) -> Option<i64> {
    annotation(s, key)?.parse().ok()
}

fn value(s: &Secret, key: &str) -> Option<String> {
    String::from_utf8(s.data.as_ref()?.get(key)?.0.clone())
        .ok()
        .filter(|v| !v.is_empty())
}

/// The rotation the CA Secret records (`None`: no Secret yet).
///
/// A Secret without [`CA_NOT_AFTER_ANNOTATION`] comes from an operator before rotation: if
/// it made the Secret (its `managed-by` label), it made the CA at the same moment for
/// [`LEGACY_CA_VALIDITY_DAYS`], so the CA ends that long after the Secret's creation and
/// rotation starts 60 days before, not on upgrade. A Secret someone else made holds a CA of
/// unknown end: recorded as `unknown` and never rotated by itself (a forced renewal still
/// works, and moves the cluster onto the operator's yearly CAs).
pub fn read_ca_state(secret: Option<&Secret>) -> CaState {
    let Some(s) = secret else {
        return CaState::default();
    };
    let recorded = annotation(s, CA_NOT_AFTER_ANNOTATION).is_some();
    let legacy_end = || {
        let made_here = s.labels().get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1);
        let created = s.metadata.creation_timestamp.as_ref()?.0.as_second();
        made_here.then_some(created + LEGACY_CA_VALIDITY_DAYS * DAY)
    };
    let current = value(s, "ca.crt")
        .zip(value(s, "ca.key"))
        .map(|(cert, key)| Ca {
            cert,
            key: Some(key),
            not_after: if recorded {
                time_annotation(s, CA_NOT_AFTER_ANNOTATION)
            } else {
                legacy_end()
            },
        });
    let next = (|| {
        Some(NextCa {
            ca: Ca {
                cert: value(s, "next.crt")?,
                key: Some(value(s, "next.key")?),
                not_after: time_annotation(s, NEXT_NOT_AFTER_ANNOTATION),
            },
            published_at: time_annotation(s, NEXT_PUBLISHED_ANNOTATION)?,
            switch_at: time_annotation(s, SWITCH_AT_ANNOTATION)?,
        })
    })();
    let previous = value(s, "previous.crt").map(|cert| Ca {
        cert,
        key: None,
        not_after: time_annotation(s, PREVIOUS_NOT_AFTER_ANNOTATION),
    });
    CaState {
        current,
        next,
        previous,
        force_renew: annotation(s, FORCE_RENEW_ANNOTATION) == Some("true"),
        recorded,
    }
}

fn end_value(end: Option<i64>) -> String {
    end.map_or_else(|| UNKNOWN.to_string(), |e| e.to_string())
}

fn owned(mqc: &MessageQueueCluster, name: String, data: Vec<(&str, String)>) -> Secret {
    owned_secret(
        name,
        &namespace(mqc),
        &mqc.name_any(),
        "tls",
        owner_reference(mqc),
        data,
    )
}

/// The CA Secret recording `state`: the PEMs under [`CA_KEYS`], each CA's end and the switch
/// in annotations.
pub fn ca_secret(mqc: &MessageQueueCluster, state: &CaState) -> Secret {
    let mut data = Vec::new();
    let mut notes = Vec::new();
    if let Some(c) = &state.current {
        data.push(("ca.crt", c.cert.clone()));
        data.extend(c.key.clone().map(|k| ("ca.key", k)));
        notes.push((CA_NOT_AFTER_ANNOTATION, end_value(c.not_after)));
    }
    if let Some(n) = &state.next {
        data.push(("next.crt", n.ca.cert.clone()));
        data.extend(n.ca.key.clone().map(|k| ("next.key", k)));
        notes.push((NEXT_NOT_AFTER_ANNOTATION, end_value(n.ca.not_after)));
        notes.push((NEXT_PUBLISHED_ANNOTATION, n.published_at.to_string()));
        notes.push((SWITCH_AT_ANNOTATION, n.switch_at.to_string()));
    }
    if let Some(p) = &state.previous {
        data.push(("previous.crt", p.cert.clone()));
        notes.push((PREVIOUS_NOT_AFTER_ANNOTATION, end_value(p.not_after)));
    }
    if state.force_renew {
        notes.push((FORCE_RENEW_ANNOTATION, "true".into()));
    }
    let mut s = owned(mqc, names::ca(&mqc.name_any()), data);
    s.metadata.annotations = Some(notes.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    s
}

/// A JSON merge patch turning the stored CA Secret into `desired` ([`ca_secret`]): the
/// operator's data keys and annotations set or removed (`null`), anything else left alone, and
/// the stored `resourceVersion`, so that the patch fails (409, retried) if the Secret changed
/// since it was read; a `force-renew` put on meanwhile is then not lost.
pub fn ca_patch(stored: &Secret, desired: &Secret) -> Value {
    let mut data = Map::new();
    for key in CA_KEYS {
        let v = desired.data.as_ref().and_then(|d| d.get(key));
        let had = stored.data.as_ref().is_some_and(|d| d.contains_key(key));
        if let Some(v) = v {
            data.insert(key.into(), serde_json::to_value(v).unwrap_or(Value::Null));
        } else if had {
            data.insert(key.into(), Value::Null);
        }
    }
    let mut notes = Map::new();
    for key in CA_ANNOTATIONS {
        match desired.annotations().get(key) {
            Some(v) => {
                notes.insert(key.into(), Value::String(v.clone()));
            }
            None if stored.annotations().contains_key(key) => {
                notes.insert(key.into(), Value::Null);
            }
            None => {}
        }
    }
    json!({
        "metadata": {
            "resourceVersion": stored.metadata.resource_version,
            "annotations": notes,
        },
        "data": data,
    })
}

/// The public Secret `<cluster>-ca-cert` applications mount to trust the cluster: the trust
/// bundle as `ca.crt`, and nothing else.
pub fn ca_cert_secret(mqc: &MessageQueueCluster, bundle: &str) -> Secret {
    owned(
        mqc,
        names::ca_cert(&mqc.name_any()),
        vec![("ca.crt", bundle.to_string())],
    )
}

/// The server certificate's Secret `<cluster>-tls` the pods mount.
pub struct ServerSecret {
    /// The certificate, PEM.
    pub cert: String,
    /// Its private key, PEM.
    pub key: String,
    /// The trust bundle of the moment.
    pub bundle: String,
    /// When the certificate ends (Unix seconds).
    pub not_after: i64,
    /// The hash of the DNS names it was made for.
    pub names_hash: String,
    /// The hash of the CA certificate that signed it.
    pub signed_by: String,
}

/// The Secret `<cluster>-tls`: `tls.crt`, `tls.key`, the trust bundle as `ca.crt`, and what
/// the certificate was made for in annotations.
pub fn tls_secret(mqc: &MessageQueueCluster, s: ServerSecret) -> Secret {
    let mut out = owned(
        mqc,
        names::tls(&mqc.name_any()),
        vec![
            ("tls.crt", s.cert),
            ("tls.key", s.key),
            ("ca.crt", s.bundle),
        ],
    );
    out.metadata.annotations = Some(
        [
            (NOT_AFTER_ANNOTATION.to_string(), s.not_after.to_string()),
            (NAMES_ANNOTATION.to_string(), s.names_hash),
            (SIGNED_BY_ANNOTATION.to_string(), s.signed_by),
        ]
        .into(),
    );
    out
}

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

/// Whether a server certificate ending at `not_after` (Unix seconds; `None`: unknown or
/// missing) made for names hashing to `made_for` and signed by the CA hashing to `signed_by`
/// must be made again at `now` for `names_hash` under the CA hashing to `ca_hash`.
pub fn needs_new(
    not_after: Option<i64>,
    made_for: Option<&str>,
    names_hash: &str,
    signed_by: Option<&str>,
    ca_hash: &str,
    now: i64,
) -> bool {
    renewal(not_after, made_for, names_hash, signed_by, ca_hash, now).is_some()
}

/// Why the server certificate must be made again ([`needs_new`]), for the log.
fn renewal(
    not_after: Option<i64>,
    made_for: Option<&str>,
    names_hash: &str,
    signed_by: Option<&str>,
    ca_hash: &str,
    now: i64,
) -> Option<&'static str> {
    match not_after {
        None => Some("none yet"),
        Some(end) if end - now < RENEW_BEFORE_DAYS * DAY => Some("near its end"),
        Some(_) if made_for != Some(names_hash) => Some("the DNS names changed"),
        Some(_) if signed_by != Some(ca_hash) => Some("another CA signs"),
        Some(_) => None,
    }
}

fn tls_error(e: rcgen::Error) -> Error {
    Error::Certificate(e.to_string())
}

fn validity(params: &mut rcgen::CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

/// A new CA, valid [`CA_VALIDITY_DAYS`].
fn new_ca(mqc: &MessageQueueCluster) -> Result<Ca, rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    validity(&mut params, CA_VALIDITY_DAYS);
    // Each CA its own name (its start): during a rotation two of them are trusted, and
    // verifiers that pick an issuer by name alone (OpenSSL) must not pick the wrong one.
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!(
            "conveyor {}/{} CA {}",
            namespace(mqc),
            mqc.name_any(),
            params.not_before.unix_timestamp()
        ),
    );
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(Ca {
        cert: cert.pem(),
        key: Some(key.serialize_pem()),
        not_after: Some(params.not_after.unix_timestamp()),
    })
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
    // Names the signing CA's key, so that a verifier trusting several CAs finds the right one.
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, SERVER_VALIDITY_DAYS);
    let not_after = params.not_after.unix_timestamp();
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

/// Brings the cluster's certificates up to date: the CA rotation one step on ([`settle`]), the
/// server certificate made again when it is missing, near its end, made for other names or
/// signed by another CA, and the trust bundle into `<cluster>-tls` and `<cluster>-ca-cert`.
/// Returns when the next step falls due ([`next_due`]), for the reconciler's requeue.
pub async fn ensure(client: &Client, mqc: &MessageQueueCluster) -> Result<Option<Duration>, Error> {
    let tls = &mqc.spec.security.tls;
    if !tls.generate_certificates || tls.secret_name.is_some() {
        return Ok(None);
    }
    let ns = namespace(mqc);
    let cluster = mqc.name_any();
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let now = time::OffsetDateTime::now_utc().unix_timestamp();

    let stored = api.get_opt(&names::ca(&cluster)).await?;
    let (state, done) = settle(read_ca_state(stored.as_ref()), now, || {
        new_ca(mqc).map_err(tls_error)
    })?;
    if !done.is_empty() {
        let desired = ca_secret(mqc, &state);
        match &stored {
            // A Secret made meanwhile by someone else fails the create (409): retried.
            None => {
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                };
                api.create(&params, &desired).await?;
            }
            Some(s) => {
                let params = PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                };
                let patch = Patch::Merge(ca_patch(s, &desired));
                api.patch(&names::ca(&cluster), &params, &patch).await?;
            }
        }
        for action in &done {
            tracing::info!(cluster, ?action, "TLS: {}", action.describe());
        }
    }
    let signer = state
        .current
        .as_ref()
        .ok_or_else(|| Error::Certificate("the cluster's CA is missing".into()))?;
    let signer_key = signer
        .key
        .as_deref()
        .ok_or_else(|| Error::Certificate("the cluster's CA has no key".into()))?;
    let bundle = trust_bundle(&state, now);

    let dns = dns_names(mqc);
    let names_hash = hash(&dns.iter().map(String::as_str).collect::<Vec<_>>());
    let ca_hash = hash(&[signer.cert.as_str()]);
    let current = api.get_opt(&names::tls(&cluster)).await?;
    let note = |k: &str| current.as_ref().and_then(|s| annotation(s, k));
    let held = current
        .as_ref()
        .and_then(|s| value(s, "tls.crt").zip(value(s, "tls.key")));
    // A Secret without its certificate counts as no certificate.
    let not_after = held
        .as_ref()
        .and(note(NOT_AFTER_ANNOTATION))
        .and_then(|v| v.parse().ok());
    let made_for = note(NAMES_ANNOTATION);
    let signed_by = note(SIGNED_BY_ANNOTATION);
    let why = renewal(not_after, made_for, &names_hash, signed_by, &ca_hash, now);
    let server = if let Some(why) = why {
        let (cert, key, end) = new_server(dns, &signer.cert, signer_key).map_err(tls_error)?;
        tracing::info!(
            cluster,
            not_after = end,
            why,
            "TLS: made a server certificate signed by the cluster's CA"
        );
        Some(ServerSecret {
            cert,
            key,
            bundle: bundle.clone(),
            not_after: end,
            names_hash,
            signed_by: ca_hash,
        })
    } else if current.as_ref().and_then(|s| value(s, "ca.crt")).as_deref() != Some(&bundle) {
        // The same certificate with the bundle of now (a CA published or retired).
        held.zip(not_after).map(|((cert, key), end)| ServerSecret {
            cert,
            key,
            bundle: bundle.clone(),
            not_after: end,
            names_hash,
            signed_by: ca_hash,
        })
    } else {
        None
    };
    let server_not_after = server.as_ref().map(|s| s.not_after).or(not_after);
    if let Some(s) = server {
        apply(client, &ns, &tls_secret(mqc, s)).await?;
    }
    // Server-side apply of an unchanged Secret changes nothing.
    apply(client, &ns, &ca_cert_secret(mqc, &bundle)).await?;
    Ok(next_due(&state, server_not_after, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn ca(name: &str, not_after: Option<i64>) -> Ca {
        Ca {
            cert: format!("-----BEGIN CERTIFICATE-----\n{name}\n-----END CERTIFICATE-----\n"),
            key: Some(format!(
                "-----BEGIN PRIVATE KEY-----\n{name}\n-----END PRIVATE KEY-----\n"
            )),
            not_after,
        }
    }

    /// `state` after its switch to the next CA at [`NOW`] (no CA is made by a switch).
    fn switched_at_now(state: CaState) -> CaState {
        advance(
            state,
            CaAction::SwitchToNext,
            NOW,
            &mut || -> Result<Ca, ()> { unreachable!() },
        )
        .unwrap()
    }

    fn settled(current: Ca) -> CaState {
        CaState {
            current: Some(current),
            recorded: true,
            ..CaState::default()
        }
    }

    #[test]
    fn a_server_certificate_is_made_again_near_its_end_for_new_names_or_under_another_ca() {
        let now = NOW;
        // (its end, the names it was made for, the CA that signed it) → made again, with the
        // names now "h" and the signing CA now "ca"? No signer recorded: made by an operator
        // before CA rotation, made again once under the same CA.
        let cases = [
            (None, None, Some("ca"), true),
            (Some(now + 60 * DAY), Some("h"), Some("ca"), false),
            (Some(now + 29 * DAY), Some("h"), Some("ca"), true),
            (Some(now + 60 * DAY), Some("old"), Some("ca"), true),
            (Some(now + 60 * DAY), Some("h"), Some("old-ca"), true),
            (Some(now + 60 * DAY), Some("h"), None, true),
        ];
        for (not_after, names, signed_by, expected) in cases {
            assert_eq!(
                needs_new(not_after, names, "h", signed_by, "ca", now),
                expected,
                "{not_after:?} {names:?} {signed_by:?}"
            );
        }
    }

    #[test]
    fn no_ca_makes_the_first_and_a_young_ca_is_kept() {
        assert_eq!(ca_step(&CaState::default(), NOW), CaAction::MakeFirst);
        let young = settled(ca("a", Some(NOW + CA_VALIDITY_DAYS * DAY)));
        assert_eq!(ca_step(&young, NOW), CaAction::Keep);
        let day_before_phase_1 = settled(ca("a", Some(NOW + 61 * DAY)));
        assert_eq!(ca_step(&day_before_phase_1, NOW), CaAction::Keep);
    }

    #[test]
    fn phase_1_publishes_the_next_ca_60_days_before_the_end_to_switch_30_days_before() {
        let end = NOW + 59 * DAY;
        let state = settled(ca("a", Some(end)));
        assert_eq!(
            ca_step(&state, NOW),
            CaAction::PublishNext {
                switch_at: end - 30 * DAY
            }
        );
        // Started late (the operator was away): the bundle still gets time to spread.
        let late = settled(ca("a", Some(NOW + 10 * DAY)));
        assert_eq!(
            ca_step(&late, NOW),
            CaAction::PublishNext {
                switch_at: NOW + SWITCH_DELAY_SECS
            }
        );
    }

    #[test]
    fn phase_2_switches_when_due_and_the_retired_ca_goes_when_it_ends() {
        let end = NOW + 30 * DAY;
        let mut state = settled(ca("a", Some(end)));
        state.next = Some(NextCa {
            ca: ca("b", Some(NOW + 335 * DAY)),
            published_at: NOW - 30 * DAY,
            switch_at: NOW,
        });
        assert_eq!(ca_step(&state, NOW - 1), CaAction::Keep);
        assert_eq!(ca_step(&state, NOW), CaAction::SwitchToNext);
        let switched = switched_at_now(state);
        assert_eq!(switched.current.as_ref().unwrap().cert, ca("b", None).cert);
        let previous = switched.previous.as_ref().unwrap();
        assert_eq!(previous.cert, ca("a", None).cert);
        assert_eq!(previous.key, None, "a retired CA keeps no key");
        assert!(switched.next.is_none());
        assert_eq!(ca_step(&switched, end - 1), CaAction::Keep);
        assert_eq!(ca_step(&switched, end), CaAction::DropPrevious);
    }

    #[test]
    fn a_forced_renewal_publishes_now_and_switches_after_the_delay() {
        let mut state = settled(ca("a", Some(NOW + 200 * DAY)));
        state.force_renew = true;
        let action = ca_step(&state, NOW);
        assert_eq!(
            action,
            CaAction::PublishNext {
                switch_at: NOW + SWITCH_DELAY_SECS
            }
        );
        let state = advance(state, action, NOW, &mut || Ok::<_, ()>(ca("b", None))).unwrap();
        assert!(!state.force_renew, "the annotation goes");
        assert_eq!(state.next.as_ref().unwrap().published_at, NOW);
        assert_eq!(ca_step(&state, NOW + SWITCH_DELAY_SECS - 1), CaAction::Keep);
        assert_eq!(
            ca_step(&state, NOW + SWITCH_DELAY_SECS),
            CaAction::SwitchToNext
        );
        // A forced renewal while a successor waits brings its switch forward, never back.
        let mut waiting = state.clone();
        waiting.next.as_mut().unwrap().switch_at = NOW + 20 * DAY;
        waiting.force_renew = true;
        assert_eq!(
            ca_step(&waiting, NOW + 10),
            CaAction::HastenSwitch {
                switch_at: NOW + 10 + SWITCH_DELAY_SECS
            }
        );
        let mut soon = state;
        soon.force_renew = true;
        assert_eq!(
            ca_step(&soon, NOW + 10),
            CaAction::HastenSwitch {
                switch_at: NOW + SWITCH_DELAY_SECS
            }
        );
    }

    #[test]
    fn a_ca_of_unknown_end_is_never_rotated_by_itself_but_can_be_forced() {
        let mut state = settled(ca("theirs", None));
        assert_eq!(ca_step(&state, NOW + 100 * 365 * DAY), CaAction::Keep);
        state.force_renew = true;
        assert!(matches!(ca_step(&state, NOW), CaAction::PublishNext { .. }));
    }

    #[test]
    fn a_year_of_rotation_keeps_every_ca_in_the_bundle_until_it_ends() {
        let mut made = 0;
        let mut make = |now: i64| {
            made += 1;
            Ok::<_, ()>(ca(&format!("ca{made}"), Some(now + CA_VALIDITY_DAYS * DAY)))
        };
        let (mut state, done) = settle(CaState::default(), NOW, || make(NOW)).unwrap();
        assert_eq!(done, vec![CaAction::MakeFirst]);
        let first = state.current.clone().unwrap();
        let mut switches = Vec::new();
        // Two years, a day at a time: the CA always has trust published before it signs.
        for day in 1..=730 {
            let now = NOW + day * DAY;
            let before = state.clone();
            let (after, done) = settle(state, now, || make(now)).unwrap();
            for action in &done {
                if *action == CaAction::SwitchToNext {
                    let signer = after.current.as_ref().unwrap();
                    let published = before.next.as_ref().unwrap();
                    assert_eq!(&published.ca, signer, "only a published CA signs");
                    assert!(now - published.published_at >= 30 * DAY - DAY);
                    switches.push(day);
                }
            }
            let bundle = trust_bundle(&after, now);
            assert!(bundle.contains(&after.current.as_ref().unwrap().cert));
            assert!(!bundle.contains("PRIVATE KEY"));
            if let Some(p) = &after.previous {
                assert!(p.not_after.unwrap() > now);
                assert!(
                    bundle.contains(&p.cert),
                    "a retired CA trusted until it ends"
                );
            }
            state = after;
        }
        // The first CA ends on day 365, its successor (published on day 305) on day 670.
        assert_eq!(switches, vec![335, 640], "30 days before each CA's end");
        assert_ne!(state.current.unwrap(), first);
    }

    #[test]
    fn an_older_operators_ca_is_taken_to_end_ten_years_after_it_was_made() {
        let mqc = crate::builders::tests::cluster(1, 1);
        let made = 1_700_000_000;
        let mut s = owned(
            &mqc,
            names::ca("orders"),
            vec![("ca.crt", "C".into()), ("ca.key", "K".into())],
        );
        s.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(made).unwrap(),
        ));
        let state = read_ca_state(Some(&s));
        assert!(!state.recorded);
        assert_eq!(
            state.current.as_ref().unwrap().not_after,
            Some(made + 3650 * DAY)
        );
        // Upgraded a year in: recorded, not rotated.
        assert_eq!(ca_step(&state, made + 365 * DAY), CaAction::Record);
        let (after, done) = settle(state.clone(), made + 365 * DAY, || -> Result<Ca, ()> {
            unreachable!("no new CA on upgrade")
        })
        .unwrap();
        assert_eq!(done, vec![CaAction::Record]);
        let written = ca_secret(&mqc, &after);
        assert_eq!(
            written.annotations()[CA_NOT_AFTER_ANNOTATION],
            (made + 3650 * DAY).to_string()
        );
        // Upgraded near its end: rotated as any CA would be.
        assert!(matches!(
            ca_step(&state, made + 3600 * DAY),
            CaAction::PublishNext { .. }
        ));
        // A CA Secret someone else made: unknown end, recorded as such, never rotated alone.
        s.metadata.labels = None;
        let theirs = read_ca_state(Some(&s));
        assert_eq!(theirs.current.as_ref().unwrap().not_after, None);
        let (after, _) = settle(theirs, NOW, || -> Result<Ca, ()> { unreachable!() }).unwrap();
        let written = ca_secret(&mqc, &after);
        assert_eq!(written.annotations()[CA_NOT_AFTER_ANNOTATION], "unknown");
        assert_eq!(read_ca_state(Some(&written)), after);
    }

    #[test]
    fn the_ca_secret_records_the_whole_rotation_and_reads_back_the_same() {
        let mqc = crate::builders::tests::cluster(1, 1);
        let state = CaState {
            current: Some(ca("a", Some(NOW + 40 * DAY))),
            next: Some(NextCa {
                ca: ca("b", Some(NOW + 365 * DAY)),
                published_at: NOW - 20 * DAY,
                switch_at: NOW + 10 * DAY,
            }),
            previous: Some(Ca {
                key: None,
                ..ca("z", Some(NOW + DAY))
            }),
            force_renew: false,
            recorded: true,
        };
        let s = ca_secret(&mqc, &state);
        assert_eq!(s.metadata.name.as_deref(), Some("orders-ca"));
        let keys: Vec<_> = s.data.as_ref().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            ["ca.crt", "ca.key", "next.crt", "next.key", "previous.crt"]
        );
        assert_eq!(read_ca_state(Some(&s)), state);
        // The bundle: signing, next and retired CAs, in that order; the retired one until it ends.
        let bundle = trust_bundle(&state, NOW);
        assert_eq!(
            bundle,
            [ca("a", None).cert, ca("b", None).cert, ca("z", None).cert].concat()
        );
        assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 3);
        assert_eq!(
            trust_bundle(&state, NOW + DAY)
                .matches("BEGIN CERTIFICATE")
                .count(),
            2
        );
    }

    #[test]
    fn the_patch_removes_what_the_rotation_dropped_and_the_force_renew_annotation() {
        let mqc = crate::builders::tests::cluster(1, 1);
        let mut before = CaState {
            current: Some(ca("a", Some(NOW + 100 * DAY))),
            previous: Some(Ca {
                key: None,
                ..ca("z", Some(NOW))
            }),
            recorded: true,
            ..CaState::default()
        };
        before.force_renew = true;
        let mut stored = ca_secret(&mqc, &before);
        stored.metadata.resource_version = Some("42".into());
        stored
            .annotations_mut()
            .insert("someone/else".into(), "kept".into());
        let (after, done) = settle(read_ca_state(Some(&stored)), NOW, || {
            Ok::<_, ()>(ca("b", Some(NOW + 365 * DAY)))
        })
        .unwrap();
        assert_eq!(
            done,
            vec![
                CaAction::DropPrevious,
                CaAction::PublishNext {
                    switch_at: NOW + SWITCH_DELAY_SECS
                }
            ]
        );
        let patch = ca_patch(&stored, &ca_secret(&mqc, &after));
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let notes = &patch["metadata"]["annotations"];
        assert_eq!(notes[FORCE_RENEW_ANNOTATION], Value::Null);
        assert!(notes
            .as_object()
            .unwrap()
            .contains_key(FORCE_RENEW_ANNOTATION));
        assert_eq!(notes[PREVIOUS_NOT_AFTER_ANNOTATION], Value::Null);
        assert_eq!(
            notes[SWITCH_AT_ANNOTATION],
            (NOW + SWITCH_DELAY_SECS).to_string()
        );
        assert!(notes.get("someone/else").is_none(), "left alone");
        let data = patch["data"].as_object().unwrap();
        assert_eq!(data["previous.crt"], Value::Null);
        assert!(data["next.crt"].is_string() && data["next.key"].is_string());
        assert!(!data.contains_key("unrelated"));
    }

    #[test]
    fn the_public_ca_cert_secret_holds_the_bundle_and_never_a_key() {
        let mqc = crate::builders::tests::cluster(1, 1);
        let state = CaState {
            current: Some(ca("a", Some(NOW + 40 * DAY))),
            next: Some(NextCa {
                ca: ca("b", Some(NOW + 365 * DAY)),
                published_at: NOW,
                switch_at: NOW + 10 * DAY,
            }),
            recorded: true,
            ..CaState::default()
        };
        let s = ca_cert_secret(&mqc, &trust_bundle(&state, NOW));
        assert_eq!(s.metadata.name.as_deref(), Some("orders-ca-cert"));
        let data = s.data.unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["ca.crt"]);
        let bundle = String::from_utf8(data["ca.crt"].0.clone()).unwrap();
        assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(!bundle.contains("PRIVATE KEY"));
        assert_eq!(
            s.metadata.owner_references.unwrap()[0].name,
            "orders",
            "goes with the cluster"
        );
    }

    #[test]
    fn the_requeue_comes_by_the_next_due_step() {
        let mut state = settled(ca("a", Some(NOW + 100 * DAY)));
        // Nothing pending: the CA's phase 1 or the server certificate's renewal.
        assert_eq!(
            next_due(&state, Some(NOW + 90 * DAY), NOW),
            Some(Duration::from_secs((40 * DAY + 1) as u64))
        );
        assert_eq!(
            next_due(&state, Some(NOW + 35 * DAY), NOW),
            Some(Duration::from_secs((5 * DAY + 1) as u64))
        );
        state.next = Some(NextCa {
            ca: ca("b", None),
            published_at: NOW,
            switch_at: NOW + SWITCH_DELAY_SECS,
        });
        assert_eq!(
            next_due(&state, Some(NOW + 90 * DAY), NOW),
            Some(Duration::from_secs(SWITCH_DELAY_SECS as u64 + 1))
        );
        assert_eq!(
            next_due(&settled(ca("theirs", None)), None, NOW),
            None,
            "nothing scheduled"
        );
    }

    fn verifies(roots_pem: &str, cert: &str, name: &str) -> bool {
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(roots_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            provider,
        )
        .build()
        .unwrap();
        let leaf = CertificateDer::from_pem_slice(cert.as_bytes()).unwrap();
        let name = ServerName::try_from(name.to_string()).unwrap();
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
            .is_ok()
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
        let ca = new_ca(&mqc).unwrap();
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        assert!((ca.not_after.unwrap() - now - CA_VALIDITY_DAYS * DAY).abs() < 60);
        let (cert, key, not_after) =
            new_server(names, &ca.cert, ca.key.as_deref().unwrap()).unwrap();
        assert!((not_after - now - SERVER_VALIDITY_DAYS * DAY).abs() < 60);
        // rustls verifies the chain: the server certificate for a broker's name, under the CA.
        let broker = "orders-broker-1-0.orders-broker-1.mq.svc";
        assert!(verifies(&ca.cert, &cert, broker));
        assert!(key.contains("PRIVATE KEY"));
    }

    #[test]
    fn during_a_rotation_the_bundle_verifies_certificates_of_either_ca() {
        let mqc = crate::builders::tests::cluster(1, 1);
        let names = dns_names(&mqc);
        let broker = "orders-broker-0-0.orders-broker-0.mq.svc";
        let old = new_ca(&mqc).unwrap();
        let new = new_ca(&mqc).unwrap();
        assert_ne!(old.cert, new.cert);
        let state = CaState {
            current: Some(old.clone()),
            next: Some(NextCa {
                ca: new.clone(),
                published_at: NOW,
                switch_at: NOW,
            }),
            recorded: true,
            ..CaState::default()
        };
        let sign = |ca: &Ca| new_server(names.clone(), &ca.cert, ca.key.as_deref().unwrap());
        let (under_old, _, _) = sign(&old).unwrap();
        let (under_new, _, _) = sign(&new).unwrap();
        let bundle = trust_bundle(&state, NOW);
        assert!(verifies(&bundle, &under_old, broker));
        assert!(verifies(&bundle, &under_new, broker));
        assert!(!verifies(&old.cert, &under_new, broker));
        // After the switch the retired CA still vouches for what it signed.
        let switched = switched_at_now(state);
        let bundle = trust_bundle(&switched, NOW);
        assert!(verifies(&bundle, &under_old, broker));
        assert!(verifies(&bundle, &under_new, broker));
    }
}
