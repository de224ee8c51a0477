//! Users declared as resources (Strimzi's KafkaUser as the model): a `MessageQueueUser` names
//! a cluster and its permissions; the operator gives it a secret key in a Secret the
//! application mounts (`accessKey`, `secretKey`), and keeps the cluster's users file — the
//! `plain_acl.yml` its name servers and brokers re-read — equal to the cluster's users. A
//! deleted user is removed from the file (a finalizer holds the deletion until it is), and the
//! servers refuse it after their next reload.
//!
//! [`plan`] renders (pure); [`run`] reads and applies.

pub mod plan;
pub mod resource;
pub mod run;
