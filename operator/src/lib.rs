//! Conveyor's Kubernetes operator: the `MessageQueueCluster` CRD, pure desired-state builders, the
//! reconciler and Lease-based leader election.

pub mod builders;
pub mod controller;
pub mod crd;
pub mod leader;
pub mod reconcile;
