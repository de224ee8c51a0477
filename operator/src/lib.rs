//! Conveyor's Kubernetes operator: the `MessageQueueCluster` CRD, pure desired-state builders, the
//! reconciler, Lease-based leader election, telemetry (metrics and probes), and the consumer
//! autoscaler.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod autoscaler;
pub mod builders;
pub mod certificates;
pub mod cluster_secret;
pub mod controller;
pub mod controller_endpoint;
pub mod crd;
pub mod events;
pub mod failover;
pub mod leader;
pub mod reconcile;
pub mod rocketmq;
pub mod telemetry;
pub mod topics;
pub mod users;
