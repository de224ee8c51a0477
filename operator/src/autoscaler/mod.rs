//! Consumer autoscaling: a `ConsumerAutoscaler` scales a consumer workload from the backlog
//! of its consumer group, read from Prometheus or straight from the brokers. The decision is
//! a pure function ([`recommend`]), the status too ([`status`]); [`metrics`] reads, [`run`]
//! applies.

pub mod conflicts;
pub mod credentials;
pub mod keda;
pub mod metrics;
pub mod recommend;
pub mod resource;
pub mod run;
pub mod status;
