//! What the users controller writes (pure): a user's credentials Secret and the cluster's
//! users file in RocketMQ's `plain_acl.yml` format.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::Serialize;

use crate::builders::owned_secret;

use super::resource::MessageQueueUserSpec;

pub use crate::builders::USERS_FILE_KEY;
/// The keys of a user's Secret.
pub const ACCESS_KEY: &str = "accessKey";
/// See [`ACCESS_KEY`].
pub const SECRET_KEY: &str = "secretKey";

/// One user as the users file lists it.
pub struct UserEntry<'a> {
    /// Its access key (the resource's name).
    pub access_key: &'a str,
    /// Its secret key (from its Secret).
    pub secret_key: &'a str,
    /// Its permissions.
    pub spec: &'a MessageQueueUserSpec,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct File<'a> {
    accounts: Vec<Account<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Account<'a> {
    access_key: &'a str,
    secret_key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    white_remote_address: Option<&'a str>,
    admin: bool,
    default_topic_perm: &'static str,
    default_group_perm: &'static str,
    topic_perms: Vec<String>,
    group_perms: Vec<String>,
}

/// The users file of `users` (sorted by access key, so the same users give the same bytes).
pub fn users_file(users: &[UserEntry<'_>]) -> String {
    let mut accounts: Vec<Account<'_>> = users
        .iter()
        .map(|u| Account {
            access_key: u.access_key,
            secret_key: u.secret_key,
            white_remote_address: u.spec.white_remote_address.as_deref(),
            admin: u.spec.admin,
            default_topic_perm: u.spec.default_topic_permission.as_acl(),
            default_group_perm: u.spec.default_group_permission.as_acl(),
            topic_perms: u
                .spec
                .topics
                .iter()
                .map(|g| format!("{}={}", g.name, g.permission.as_acl()))
                .collect(),
            group_perms: u
                .spec
                .groups
                .iter()
                .map(|g| format!("{}={}", g.name, g.permission.as_acl()))
                .collect(),
        })
        .collect();
    accounts.sort_by(|a, b| a.access_key.cmp(b.access_key));
    let body = serde_yaml::to_string(&File { accounts }).expect("a users file always serialises");
    format!("# Kept by conveyor-operator from the cluster's MessageQueueUsers; changes are overwritten.\n{body}")
}

/// The Secret an application mounts: `accessKey` and `secretKey`, owned by the user (deleted
/// with it).
pub fn user_secret(
    name: String,
    namespace: &str,
    cluster: &str,
    owner: OwnerReference,
    access_key: &str,
    secret_key: &str,
) -> Secret {
    owned_secret(
        name,
        namespace,
        cluster,
        "user",
        owner,
        [
            (ACCESS_KEY, access_key.to_string()),
            (SECRET_KEY, secret_key.to_string()),
        ],
    )
}

/// The cluster's users Secret holding `file`, owned by the cluster.
pub fn users_secret(
    name: String,
    namespace: &str,
    cluster: &str,
    owner: OwnerReference,
    file: String,
) -> Secret {
    owned_secret(
        name,
        namespace,
        cluster,
        "acl",
        owner,
        [(USERS_FILE_KEY, file)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_file_is_plain_acl_yml_that_the_broker_reads_back() {
        let spec: MessageQueueUserSpec = serde_json::from_value(serde_json::json!({
            "clusterRef": {"name": "orders"},
            "defaultGroupPermission": "Sub",
            "topics": [{"name": "Orders", "permission": "PubSub"}, {"name": "Audit", "permission": "Deny"}],
            "groups": [{"name": "billing", "permission": "Sub"}],
            "whiteRemoteAddress": "10.1.2.*"
        }))
        .unwrap();
        let admin: MessageQueueUserSpec = serde_json::from_value(serde_json::json!({
            "clusterRef": {"name": "orders"}, "admin": true
        }))
        .unwrap();
        let file = users_file(&[
            UserEntry {
                access_key: "orders-app",
                secret_key: "s3cret-one",
                spec: &spec,
            },
            UserEntry {
                access_key: "platform-admin",
                secret_key: "s3cret-two",
                spec: &admin,
            },
        ]);
        // The broker's own parser reads it as meant.
        let rules = conveyor::acl::Rules::parse(&file).unwrap();
        let app = &rules.accounts["orders-app"];
        use conveyor::acl::{Need, Perm};
        assert_eq!(app.lacks(&[Need::Topic("Orders".into(), Perm::PUB)]), None);
        assert!(app
            .lacks(&[Need::Topic("Audit".into(), Perm::SUB)])
            .is_some());
        assert!(app
            .lacks(&[Need::Topic("Other".into(), Perm::SUB)])
            .is_some());
        assert_eq!(app.lacks(&[Need::Group("any".into(), Perm::SUB)]), None);
        assert!(app.lacks(&[Need::Admin]).is_some());
        assert!(app.white_address.is_some());
        assert_eq!(rules.accounts["platform-admin"].lacks(&[Need::Admin]), None);
    }

    #[test]
    fn the_same_users_give_the_same_file() {
        let spec: MessageQueueUserSpec =
            serde_json::from_value(serde_json::json!({"clusterRef": {"name": "c"}})).unwrap();
        let a = UserEntry {
            access_key: "aaaaaaa",
            secret_key: "1234567",
            spec: &spec,
        };
        let b = UserEntry {
            access_key: "bbbbbbb",
            secret_key: "1234567",
            spec: &spec,
        };
        let c = UserEntry {
            access_key: "aaaaaaa",
            secret_key: "1234567",
            spec: &spec,
        };
        let d = UserEntry {
            access_key: "bbbbbbb",
            secret_key: "1234567",
            spec: &spec,
        };
        assert_eq!(users_file(&[a, b]), users_file(&[d, c]));
    }
}
