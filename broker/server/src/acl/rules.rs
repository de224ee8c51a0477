//! The users and their permissions, read from a file in RocketMQ's `plain_acl.yml` format
//! (ACL 1.0), and the one decision: may this subject do what this request needs?
//!
//! ```yaml
//! globalWhiteRemoteAddresses: ["10.10.103.*"]
//! accounts:
//!   - accessKey: app-orders
//!     secretKey: s3cret-key
//!     whiteRemoteAddress: ""
//!     admin: false
//!     defaultTopicPerm: DENY
//!     defaultGroupPerm: SUB
//!     topicPerms: ["Orders=PUB|SUB"]
//!     groupPerms: ["order-workers=SUB"]
//! ```
//!
//! Semantics are RocketMQ's: a missing default is DENY; `DENY` wins over anything; an admin
//! may do everything a user may, and admin requests; an address on the global whitelist is
//! let through unsigned, and one on an account's own whitelist acts as that account unsigned.

use std::collections::HashMap;
use std::net::IpAddr;

use serde::Deserialize;

use super::address::AddressPattern;

/// Permission bits (`Permission.java`: DENY=1, PUB=4, SUB=8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Perm(u8);

impl Perm {
    /// Refuses everything, whatever else is set.
    pub const DENY: Perm = Perm(1);
    /// Produce to a topic (for a group: send its retries).
    pub const PUB: Perm = Perm(4);
    /// Consume from a topic, or as a group.
    pub const SUB: Perm = Perm(8);

    /// Both: as owned, either permission; as needed, either one suffices.
    pub const fn or(self, other: Perm) -> Perm {
        Perm(self.0 | other.0)
    }

    /// True when owning `self` allows `needed` (any of its bits).
    pub fn allows(self, needed: Perm) -> bool {
        self.0 & Perm::DENY.0 == 0 && self.0 & needed.0 != 0
    }

    /// The name RocketMQ writes (`PUB`, `SUB`, `PUB|SUB`, `DENY`).
    pub fn name(self) -> &'static str {
        match (self.0 & 1 != 0, self.0 & 4 != 0, self.0 & 8 != 0) {
            (true, _, _) | (false, false, false) => "DENY",
            (_, true, true) => "PUB|SUB",
            (_, true, false) => "PUB",
            (_, false, true) => "SUB",
        }
    }
}

impl std::str::FromStr for Perm {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "PUB" => Ok(Perm::PUB),
            "SUB" => Ok(Perm::SUB),
            "PUB|SUB" | "SUB|PUB" => Ok(Perm::PUB.or(Perm::SUB)),
            "DENY" => Ok(Perm::DENY),
            other => Err(format!(
                "{other:?} is not a permission (PUB, SUB, PUB|SUB or DENY)"
            )),
        }
    }
}

/// What a request needs of its subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// `perm` on topic `0`.
    Topic(String, Perm),
    /// `perm` as consumer group `0` (RocketMQ keys groups by their retry topic).
    Group(String, Perm),
    /// An admin request: changes the broker's configuration or reads others' data.
    Admin,
    /// A request only the cluster's own processes make (broker registration, the controller,
    /// replication): signed with the cluster secret.
    Cluster,
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Need::Topic(t, p) => write!(f, "{} on topic {t}", p.name()),
            Need::Group(g, p) => write!(f, "{} as group {g}", p.name()),
            Need::Admin => f.write_str("admin permission"),
            Need::Cluster => f.write_str("the cluster secret"),
        }
    }
}

/// One account of the file.
#[derive(Debug, Clone)]
pub struct Account {
    /// The key its signatures are made with.
    pub secret_key: String,
    /// Acts as this account, unsigned, from these addresses.
    pub white_address: Option<AddressPattern>,
    /// May make admin requests and has every topic and group permission.
    pub admin: bool,
    /// For topics not in `topics`.
    pub default_topic: Perm,
    /// For groups not in `groups`.
    pub default_group: Perm,
    /// Per topic.
    pub topics: HashMap<String, Perm>,
    /// Per consumer group.
    pub groups: HashMap<String, Perm>,
}

/// The users file, parsed.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// Addresses let through without a signature.
    pub global_white: Vec<AddressPattern>,
    /// Accounts by access key.
    pub accounts: HashMap<String, Account>,
}

/// Why a users file is refused (the previous rules stay).
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// Not YAML of the expected shape.
    #[error("the users file is not plain_acl.yml: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A value is wrong.
    #[error("the users file: {0}")]
    Invalid(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    #[serde(default)]
    global_white_remote_addresses: Vec<String>,
    #[serde(default)]
    accounts: Vec<FileAccount>,
    /// RocketMQ writes it; nothing reads it.
    #[serde(default, rename = "dataVersion")]
    _data_version: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileAccount {
    access_key: String,
    secret_key: String,
    #[serde(default)]
    white_remote_address: Option<String>,
    #[serde(default)]
    admin: bool,
    #[serde(default)]
    default_topic_perm: Option<String>,
    #[serde(default)]
    default_group_perm: Option<String>,
    #[serde(default)]
    topic_perms: Vec<String>,
    #[serde(default)]
    group_perms: Vec<String>,
}

/// The name of a consumer group's retry topic, RocketMQ's key for group permissions.
pub const RETRY_PREFIX: &str = "%RETRY%";
/// The trace topic every signed user may produce to (RocketMQ lets it through).
pub const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";

impl Rules {
    /// Parses `plain_acl.yml`; access and secret keys must be longer than 6 characters, as
    /// RocketMQ requires, and each access key appear once.
    pub fn parse(text: &str) -> Result<Self, RulesError> {
        let file: File = serde_yaml::from_str(text)?;
        let pattern = |p: &str| p.parse::<AddressPattern>().map_err(RulesError::Invalid);
        let mut rules = Rules {
            global_white: file
                .global_white_remote_addresses
                .iter()
                .map(|p| pattern(p))
                .collect::<Result<_, _>>()?,
            accounts: HashMap::new(),
        };
        for a in file.accounts {
            if a.access_key.len() <= 6 || a.secret_key.len() <= 6 {
                return Err(RulesError::Invalid(format!(
                    "accessKey {:?}: the access key and the secret key must be longer than 6 \
                     characters",
                    a.access_key
                )));
            }
            let perm = |p: Option<&str>| -> Result<Perm, RulesError> {
                p.map_or(Ok(Perm::DENY), |p| p.parse().map_err(RulesError::Invalid))
            };
            let entries = |list: &[String]| -> Result<HashMap<String, Perm>, RulesError> {
                list.iter()
                    .map(|e| {
                        let (name, p) = e.split_once('=').ok_or_else(|| {
                            RulesError::Invalid(format!("{e:?} is not NAME=PERMISSION"))
                        })?;
                        Ok((name.trim().to_string(), perm(Some(p))?))
                    })
                    .collect()
            };
            let account = Account {
                white_address: match a.white_remote_address.as_deref().map(str::trim) {
                    None | Some("") => None,
                    Some(p) => Some(pattern(p)?),
                },
                admin: a.admin,
                default_topic: perm(a.default_topic_perm.as_deref())?,
                default_group: perm(a.default_group_perm.as_deref())?,
                topics: entries(&a.topic_perms)?,
                groups: entries(&a.group_perms)?,
                secret_key: a.secret_key,
            };
            if rules
                .accounts
                .insert(a.access_key.clone(), account)
                .is_some()
            {
                return Err(RulesError::Invalid(format!(
                    "accessKey {:?} appears twice",
                    a.access_key
                )));
            }
        }
        Ok(rules)
    }

    /// True when `ip` is on the global whitelist.
    pub fn globally_white(&self, ip: IpAddr) -> bool {
        self.global_white.iter().any(|p| p.matches(ip))
    }
}

impl Account {
    /// The first of `needs` this account lacks, if any. Only the cluster identity may make
    /// cluster requests; admins may do everything else.
    pub fn lacks<'a>(&self, needs: &'a [Need]) -> Option<&'a Need> {
        needs.iter().find(|need| match need {
            Need::Cluster => true,
            _ if self.admin => false,
            Need::Admin => true,
            Need::Topic(t, p) if t == TRACE_TOPIC && *p == Perm::PUB => false,
            Need::Topic(t, p) => !self.topics.get(t).unwrap_or(&self.default_topic).allows(*p),
            Need::Group(g, p) => !self.groups.get(g).unwrap_or(&self.default_group).allows(*p),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
  - accessKey: rocketmq2
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.1.*
    admin: true
"#;

    #[test]
    fn rocketmqs_sample_file_parses_with_its_meaning() {
        let rules = Rules::parse(FILE).unwrap();
        assert!(rules.globally_white("10.10.103.7".parse().unwrap()));
        assert!(!rules.globally_white("10.10.104.7".parse().unwrap()));
        let user = &rules.accounts["RocketMQ"];
        let topic = |t: &str, p| Need::Topic(t.into(), p);
        let group = |g: &str, p| Need::Group(g.into(), p);
        assert_eq!(user.lacks(&[topic("topicB", Perm::PUB)]), None);
        assert_eq!(user.lacks(&[topic("topicC", Perm::SUB)]), None);
        assert!(user.lacks(&[topic("topicC", Perm::PUB)]).is_some());
        assert!(user.lacks(&[topic("topicA", Perm::SUB)]).is_some());
        assert!(
            user.lacks(&[topic("other", Perm::SUB)]).is_some(),
            "default DENY"
        );
        assert_eq!(
            user.lacks(&[group("other", Perm::SUB)]),
            None,
            "default SUB"
        );
        assert!(user.lacks(&[group("groupA", Perm::SUB)]).is_some());
        assert!(user.lacks(&[Need::Admin]).is_some());
        assert_eq!(user.lacks(&[topic(TRACE_TOPIC, Perm::PUB)]), None);
        let admin = &rules.accounts["rocketmq2"];
        assert_eq!(
            admin.lacks(&[Need::Admin, topic("topicA", Perm::PUB)]),
            None
        );
        assert_eq!(admin.lacks(&[Need::Cluster]), Some(&Need::Cluster));
        assert!(admin
            .white_address
            .as_ref()
            .unwrap()
            .matches("192.168.1.9".parse().unwrap()));
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let short = "accounts:\n  - accessKey: abc\n    secretKey: \"12345678\"\n";
        assert!(Rules::parse(short)
            .unwrap_err()
            .to_string()
            .contains("longer than 6"));
        let twice = "accounts:\n  - {accessKey: abcdefg, secretKey: abcdefgh}\n  - {accessKey: abcdefg, secretKey: abcdefgh}\n";
        assert!(Rules::parse(twice)
            .unwrap_err()
            .to_string()
            .contains("twice"));
        let perm =
            "accounts:\n  - {accessKey: abcdefg, secretKey: abcdefgh, defaultTopicPerm: ALL}\n";
        assert!(Rules::parse(perm)
            .unwrap_err()
            .to_string()
            .contains("not a permission"));
        assert!(Rules::parse("accounts: 3").is_err());
    }
}
