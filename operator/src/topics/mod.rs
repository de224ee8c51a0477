//! Topics declared as resources: a `MessageQueueTopic` is created and kept on every broker
//! group of its cluster, and its queue count can follow its consumers. [`plan`] decides
//! (pure), [`run`] reads the brokers and applies.

pub mod plan;
pub mod resource;
pub mod run;
