//! Records events one by one, each with its own note: a scale of a ConsumerAutoscaler, a
//! queue change of a MessageQueueTopic. kube's `Recorder` folds events of the same reason on
//! the same object into a series that keeps the first note, which would lose the counts of
//! every later change; these events are the history users and tests read.

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta};
use kube::{Client, Resource, ResourceExt};

use crate::reconcile::context::FIELD_MANAGER;

/// One event about `object` (a namespaced resource), reported by `instance`; a failure to
/// record it is logged, never fatal.
pub async fn record<K>(
    client: &Client,
    instance: &str,
    object: &K,
    warning: bool,
    reason: &str,
    action: &str,
    note: String,
) where
    K: Resource<DynamicType = ()>,
{
    let now = Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", object.name_any(), now.as_nanosecond())),
            namespace: object.namespace(),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        reason: Some(reason.into()),
        action: Some(action.into()),
        note: Some(note),
        regarding: Some(object.object_ref(&())),
        reporting_controller: Some(FIELD_MANAGER.into()),
        reporting_instance: Some(instance.into()),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &object.namespace().unwrap_or_default());
    if let Err(e) = api.create(&Default::default(), &event).await {
        tracing::warn!(error = %e, reason, "cannot record an event");
    }
}
