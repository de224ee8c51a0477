//! Access control (RocketMQ's ACL): who may make which request. With ACL on, each request to
//! the name server, the broker and the controller is authenticated by its signature (the 4.x
//! scheme `AclClientRPCHook` and the Go client's credentials make: [`conveyor_remoting::acl`])
//! and authorized against the users file, before anything is read or changed; a refusal is
//! RocketMQ's NO_PERMISSION with a remark saying what was missing.
//!
//! Two kinds of subject sign requests: the users of the file (`plain_acl.yml`, re-read when it
//! changes: a deleted user loses access at the next reload) and the cluster itself — brokers
//! registering with name servers, heartbeating to the controller, relaying writes — which
//! sign with the shared cluster secret under [`CLUSTER_ACCESS_KEY`]. Only the cluster may
//! make cluster requests: an admin user cannot register a broker.
//!
//! - [`rules`]: the users file and the permission decision.
//! - [`needs`]: what each request needs.
//! - [`address`]: remote-address whitelist patterns.
//! - [`guard`]: the check in front of a server.

pub mod address;
pub mod guard;
pub mod needs;
pub mod rules;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;
use conveyor_remoting::acl::{self as signing, Credentials};
use tokio_util::sync::CancellationToken;

pub use rules::{Need, Perm, Rules, RulesError};

/// The access key the cluster's own processes sign with, with the cluster secret.
pub const CLUSTER_ACCESS_KEY: &str = "conveyor-cluster";

/// Request versions up to 4.9.3 (ordinal 399) added `_UNIQUE_KEY_QUERY` after signing.
const LAST_UNSIGNED_UNIQUE_KEY_VERSION: i32 = 399;

/// ACL settings (`[acl]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclConfig {
    /// `plain_acl.yml`: the users and their permissions.
    pub users_file: PathBuf,
    /// The file holding the cluster secret (its first line).
    pub cluster_secret_file: PathBuf,
    /// How often the users file is looked at for changes.
    pub reload_interval: Duration,
}

/// Why ACL cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    /// A file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The users file is wrong.
    #[error("{path}: {source}")]
    Rules {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: RulesError,
    },
    /// The cluster secret is too short to be a secret.
    #[error("{0}: the cluster secret must be at least 16 characters")]
    WeakSecret(PathBuf),
}

/// Who made a request, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A user of the file, by access key.
    User(String),
    /// The cluster's own processes.
    Cluster,
    /// An address on the global whitelist (nothing checked).
    Whitelisted,
}

/// The access rules in force and where they come from.
pub struct Acl {
    /// Settings.
    config: AclConfig,
    /// The rules as last read (replaced whole on reload).
    rules: RwLock<Arc<Rules>>,
    /// When the users file was last read as changed.
    loaded_stamp: RwLock<Option<SystemTime>>,
    /// The cluster secret.
    cluster_secret: String,
}

impl std::fmt::Debug for Acl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acl")
            .field("users_file", &self.config.users_file)
            .finish_non_exhaustive()
    }
}

fn read(path: &PathBuf) -> Result<String, AclError> {
    std::fs::read_to_string(path).map_err(|source| AclError::Read {
        path: path.clone(),
        source,
    })
}

fn modified(path: &PathBuf) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The cluster secret in `path` (its first line, trimmed).
pub fn read_cluster_secret(path: &PathBuf) -> Result<String, AclError> {
    let secret = read(path)?.lines().next().unwrap_or("").trim().to_string();
    if secret.len() < 16 {
        return Err(AclError::WeakSecret(path.clone()));
    }
    Ok(secret)
}

/// The credentials the cluster's processes sign with, from the secret in `path`.
pub fn cluster_credentials(path: &PathBuf) -> Result<Credentials, AclError> {
    Ok(Credentials::new(
        CLUSTER_ACCESS_KEY,
        read_cluster_secret(path)?,
    ))
}

/// Whether `req`'s `Signature` is the one its fields and body make under `secret`, as the
/// 4.x clients sign (`_UNIQUE_KEY_QUERY` left out for the versions that added it after
/// signing). Also what the operator's controller checks a cluster's requests with.
pub fn check_signature(secret: &str, req: &RemotingCommand) -> Result<(), String> {
    let skip_unique = req.version <= LAST_UNSIGNED_UNIQUE_KEY_VERSION;
    let parts = signing::signed_parts(&req.ext_fields, &req.body, skip_unique);
    match req.ext(signing::SIGNATURE) {
        Some(given) if signing::verify(secret, parts, given) => Ok(()),
        _ => Err(format!(
            "check signature failed for AccessKey {}",
            req.ext(signing::ACCESS_KEY).unwrap_or_default()
        )),
    }
}

impl Acl {
    /// Reads the users file and the cluster secret; either one wrong is an error.
    pub fn load(config: AclConfig) -> Result<Self, AclError> {
        let stamp = modified(&config.users_file);
        let rules = Rules::parse(&read(&config.users_file)?).map_err(|source| AclError::Rules {
            path: config.users_file.clone(),
            source,
        })?;
        let cluster_secret = read_cluster_secret(&config.cluster_secret_file)?;
        Ok(Self {
            config,
            rules: RwLock::new(Arc::new(rules)),
            loaded_stamp: RwLock::new(stamp),
            cluster_secret,
        })
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Re-reads the users file if it changed. A file that no longer parses is logged and
    /// the previous rules stay (a half-written edit must not open or close everything).
    pub fn reload(&self) {
        let stamp = modified(&self.config.users_file);
        if stamp == *self.loaded_stamp.read().unwrap_or_else(|e| e.into_inner()) {
            return;
        }
        *self.loaded_stamp.write().unwrap_or_else(|e| e.into_inner()) = stamp;
        let parsed = read(&self.config.users_file).and_then(|text| {
            Rules::parse(&text).map_err(|source| AclError::Rules {
                path: self.config.users_file.clone(),
                source,
            })
        });
        match parsed {
            Ok(rules) => {
                tracing::info!(
                    file = %self.config.users_file.display(),
                    accounts = rules.accounts.len(),
                    "ACL users reloaded"
                );
                *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
            }
            Err(e) => tracing::warn!(error = %e, "ACL users not reloaded; the previous ones stay"),
        }
    }

    /// Re-reads the users file whenever it changes, until `shutdown`.
    pub async fn run_reload(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.config.reload_interval);
        loop {
            tokio::select! {
                _ = tick.tick() => self.reload(),
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Who `access_key` is to a request from `peer` under `rules`, and the secret its
    /// signature must be made with (`None`: none needed — a whitelisted address). The one
    /// rule of identification, for remoting and gRPC alike.
    fn identify<'r>(
        &'r self,
        rules: &'r Rules,
        peer: IpAddr,
        access_key: &str,
    ) -> Result<(Subject, Option<&'r str>), String> {
        if access_key == CLUSTER_ACCESS_KEY {
            return Ok((Subject::Cluster, Some(self.cluster_secret.as_str())));
        }
        let Some(account) = rules.accounts.get(access_key) else {
            return Err(format!("no user with AccessKey {access_key}"));
        };
        let subject = Subject::User(access_key.to_string());
        if account
            .white_address
            .as_ref()
            .is_some_and(|w| w.matches(peer))
        {
            return Ok((subject, None));
        }
        Ok((subject, Some(account.secret_key.as_str())))
    }

    /// Who signed `req`, coming from `peer`, if the signature holds.
    fn authenticate(
        &self,
        rules: &Rules,
        peer: IpAddr,
        req: &RemotingCommand,
    ) -> Result<Subject, String> {
        if rules.globally_white(peer) {
            return Ok(Subject::Whitelisted);
        }
        let Some(access_key) = req.ext(signing::ACCESS_KEY) else {
            return Err(
                "the request is not signed (no AccessKey) and ACL is on: give the client an \
                 access key and secret key (AclClientRPCHook, WithCredentials)"
                    .into(),
            );
        };
        let (subject, secret) = self.identify(rules, peer, access_key)?;
        match secret {
            Some(secret) => check_signature(secret, req).map(|_| subject),
            None => Ok(subject),
        }
    }

    /// Authenticates `req` and checks it against what `needs` says it needs (worked out only
    /// once the signature holds: an unsigned flood costs no body parsing): `Ok` to go on, or
    /// the NO_PERMISSION answer.
    pub fn check(
        &self,
        peer: IpAddr,
        req: &RemotingCommand,
        needs: impl FnOnce() -> Vec<Need>,
    ) -> Result<Subject, RemotingCommand> {
        let rules = self.rules();
        let checked = self
            .authenticate(&rules, peer, req)
            .and_then(|subject| authorize(&rules, &subject, req.code, &needs()).map(|_| subject));
        checked.map_err(|remark| {
            tracing::debug!(%peer, code = req.code, remark, "request refused by ACL");
            crate::remoting::error_response(req, resp::NO_PERMISSION, remark)
        })
    }

    /// Whether `subject` may make request `code`, which needs `needs`, under the rules in
    /// force; `Err` says what it lacks.
    pub fn authorize(&self, subject: &Subject, code: i32, needs: &[Need]) -> Result<(), String> {
        authorize(&self.rules(), subject, code, needs)
    }

    /// Who made a gRPC call (the 5.x SDKs' `authorization` header: `MQv2-HMAC-SHA1
    /// Credential=<AK>[/…], SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1 of the
    /// x-mq-date-time value>`), coming from `peer`.
    pub fn authenticate_grpc(
        &self,
        peer: IpAddr,
        authorization: Option<&str>,
        date_time: Option<&str>,
    ) -> Result<Subject, String> {
        let rules = self.rules();
        if rules.globally_white(peer) {
            return Ok(Subject::Whitelisted);
        }
        let Some(header) = authorization.filter(|h| !h.trim().is_empty()) else {
            return Err(
                "the call carries no credentials (authorization header) and ACL is on: \
                        give the client a credentials provider"
                    .into(),
            );
        };
        let (_, pairs) = header
            .trim()
            .split_once(' ')
            .ok_or("the authorization header is malformed")?;
        let (mut access_key, mut signature) = (None, None);
        for pair in pairs.split(',') {
            match pair.trim().split_once('=') {
                Some(("Credential", v)) => access_key = v.split('/').next(),
                Some(("Signature", v)) => signature = Some(v),
                _ => {}
            }
        }
        let access_key = access_key.ok_or("the authorization header names no Credential")?;
        let date_time = date_time.ok_or("the call has no x-mq-date-time header")?;
        let (subject, secret) = self.identify(&rules, peer, access_key)?;
        let Some(secret) = secret else {
            return Ok(subject);
        };
        match signature.and_then(hex_decode) {
            Some(tag) if signing::verify_tag(secret, date_time.as_bytes(), &tag) => Ok(subject),
            _ => Err(format!("check signature failed for AccessKey {access_key}")),
        }
    }
}

/// Whether `subject` may make request `code`, which needs `needs`, under `rules`.
fn authorize(rules: &Rules, subject: &Subject, code: i32, needs: &[Need]) -> Result<(), String> {
    let Subject::User(ak) = subject else {
        return Ok(()); // the cluster and whitelisted addresses
    };
    let Some(account) = rules.accounts.get(ak) else {
        return Err(format!("no user with AccessKey {ak}"));
    };
    match account.lacks(needs) {
        Some(need) => Err(format!(
            "AccessKey {ak} has no permission for request code {code}: it needs {need}"
        )),
        None => Ok(()),
    }
}

/// Bytes of a hexadecimal string (either case).
fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use conveyor_protocol::code::request_code as rc;
    use conveyor_protocol::command::ExtFields;

    fn acl(dir: &tempfile::TempDir, users: &str) -> Acl {
        let users_file = dir.path().join("plain_acl.yml");
        let cluster_secret_file = dir.path().join("cluster-secret");
        std::fs::write(&users_file, users).unwrap();
        std::fs::write(&cluster_secret_file, "0123456789abcdef-secret\n").unwrap();
        Acl::load(AclConfig {
            users_file,
            cluster_secret_file,
            reload_interval: Duration::from_secs(1),
        })
        .unwrap()
    }

    const USERS: &str = "accounts:\n  - accessKey: producer1\n    secretKey: secret-p1\n    defaultTopicPerm: DENY\n    topicPerms: [Orders=PUB]\n";

    fn send(topic: &str) -> RemotingCommand {
        RemotingCommand::request(rc::SEND_MESSAGE_V2, ExtFields::new())
            .with_ext("b", topic)
            .with_body(&b"x"[..])
    }

    fn local() -> IpAddr {
        "127.0.0.1".parse().unwrap()
    }

    #[test]
    fn signed_permitted_requests_pass_and_the_others_are_refused_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let acl = acl(&dir, USERS);
        let creds = Credentials::new("producer1", "secret-p1");
        let needs = |r: &RemotingCommand| needs::broker(r, |_| None);

        let mut ok = send("Orders");
        creds.sign(&mut ok);
        assert_eq!(
            acl.check(local(), &ok, || needs(&ok)),
            Ok(Subject::User("producer1".into()))
        );

        let unsigned = send("Orders");
        let refusal = acl
            .check(local(), &unsigned, || needs(&unsigned))
            .unwrap_err();
        assert_eq!(refusal.code, resp::NO_PERMISSION);
        assert!(refusal.remark.unwrap().contains("not signed"));

        let mut wrong = send("Orders");
        Credentials::new("producer1", "not-the-secret").sign(&mut wrong);
        let remark = acl
            .check(local(), &wrong, || needs(&wrong))
            .unwrap_err()
            .remark
            .unwrap();
        assert!(remark.contains("check signature failed"), "{remark}");

        let mut other = send("Payments");
        creds.sign(&mut other);
        let remark = acl
            .check(local(), &other, || needs(&other))
            .unwrap_err()
            .remark
            .unwrap();
        assert!(remark.contains("PUB on topic Payments"), "{remark}");

        let mut cluster = RemotingCommand::request(rc::REGISTER_BROKER, ExtFields::new());
        creds.sign(&mut cluster);
        assert!(acl
            .check(local(), &cluster, || vec![Need::Cluster])
            .is_err());
        let mut cluster = RemotingCommand::request(rc::REGISTER_BROKER, ExtFields::new());
        cluster_credentials(&dir.path().join("cluster-secret"))
            .unwrap()
            .sign(&mut cluster);
        assert_eq!(
            acl.check(local(), &cluster, || vec![Need::Cluster]),
            Ok(Subject::Cluster)
        );
    }

    #[test]
    fn grpc_credentials_are_the_5x_sdks_header_over_the_date_time() {
        let dir = tempfile::tempdir().unwrap();
        let acl = acl(
            &dir,
            "accounts:\n  - {accessKey: grpc-user, secretKey: \"12345678\"}\n",
        );
        // HMAC-SHA1 of 20240101T000000Z under 12345678, as the Java SDK writes it (upper
        // case) and the Go SDK (lower case, Credential=<AK>//Rocketmq).
        let hex = "C6FC09021280E20533C17364F135C0E3217D83E9";
        let java = format!(
            "MQv2-HMAC-SHA1 Credential=grpc-user, SignedHeaders=x-mq-date-time, Signature={hex}"
        );
        let go = format!(
            "MQv2-HMAC-SHA1 Credential=grpc-user//Rocketmq, SignedHeaders=x-mq-date-time, Signature={}",
            hex.to_lowercase()
        );
        let at = Some("20240101T000000Z");
        let user = Ok(Subject::User("grpc-user".into()));
        assert_eq!(acl.authenticate_grpc(local(), Some(&java), at), user);
        assert_eq!(acl.authenticate_grpc(local(), Some(&go), at), user);
        let err = acl
            .authenticate_grpc(local(), Some(&java), Some("20240101T000001Z"))
            .unwrap_err();
        assert!(err.contains("check signature failed"), "{err}");
        assert!(acl.authenticate_grpc(local(), None, at).is_err());
        assert!(acl.authenticate_grpc(local(), Some("garbage"), at).is_err());
    }

    #[test]
    fn a_reload_takes_users_away_and_a_broken_file_keeps_the_previous_rules() {
        let dir = tempfile::tempdir().unwrap();
        let acl = acl(&dir, USERS);
        let path = dir.path().join("plain_acl.yml");
        std::fs::write(&path, "accounts: [").unwrap();
        bump(&path);
        acl.reload();
        assert!(acl.rules().accounts.contains_key("producer1"));
        std::fs::write(&path, "accounts: []\n").unwrap();
        bump(&path);
        acl.reload();
        assert!(acl.rules().accounts.is_empty());
    }

    /// Moves the file's mtime forward (two writes within one clock tick look unchanged).
    fn bump(path: &std::path::Path) {
        let f = std::fs::File::options().write(true).open(path).unwrap();
        let later = modified(&path.to_path_buf()).unwrap() + Duration::from_secs(2);
        f.set_modified(later).unwrap();
    }
}
