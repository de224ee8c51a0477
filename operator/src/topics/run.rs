//! Runs every MessageQueueTopic: each `syncIntervalSeconds` it reads the topic's route (read
//! and write queues per broker group), picks the target (declared, or following the
//! consumers), and applies the next safe step on every master of the cluster
//! (UPDATE_AND_CREATE_TOPIC), recording each applied configuration as an event: the topic's
//! configuration history. Draining waits on every consumer group of the topic.

use std::sync::Arc;
use std::time::Duration;

use conveyor_client::admin::TopicSpec;
use conveyor_client::Admin;
use conveyor_protocol::code::response_code;
use conveyor_protocol::route::perm as perm_bits;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::{watcher, Controller};
use kube::{Client, ResourceExt};

use super::plan::{autoscaled_target, next_step, Demand, Phase, QueueConfig, Rules, Step};
use super::resource::{MessageQueueTopic, MessageQueueTopicStatus};
use crate::autoscaler::resource::ConsumerAutoscaler;
use crate::autoscaler::status::CAPPED;
use crate::crd::PAUSE_ANNOTATION;
use crate::reconcile::context::FIELD_MANAGER;
use crate::reconcile::status::condition_of;

/// Why a sync could not run (retried; nothing changed).
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    /// An API call failed.
    #[error("API: {0}")]
    Kube(#[from] kube::Error),
    /// The object has no namespace.
    #[error("the topic resource has no namespace")]
    NoNamespace,
}

/// What every sync shares.
struct TopicContext {
    /// Client of every API call.
    client: Client,
    /// This replica's name in events.
    instance: String,
    /// Admin clients of the clusters.
    admins: crate::rocketmq::AdminPool,
}

/// Runs the topics of `namespace` (all when `None`) until the future is dropped.
pub async fn run(client: Client, namespace: Option<String>, instance: Option<String>) {
    let api: Api<MessageQueueTopic> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let ctx = Arc::new(TopicContext {
        client,
        instance: instance.unwrap_or_else(|| FIELD_MANAGER.into()),
        admins: Default::default(),
    });
    Controller::new(api, watcher::Config::default())
        .run(sync, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "topic sync error");
            }
        })
        .await;
}

fn error_policy(t: Arc<MessageQueueTopic>, error: &TopicError, _ctx: Arc<TopicContext>) -> Action {
    tracing::warn!(topic = %t.name_any(), %error, "topic sync failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// The topic's queues as the brokers have them, its permission, and the number of broker
/// groups that have it (`None`: it does not exist).
async fn observe(admin: &Admin, topic: &str) -> Result<Option<(QueueConfig, i32, u32)>, String> {
    let route = match admin.topic_route(topic).await {
        Ok(r) => r,
        Err(e) if e.code() == Some(response_code::TOPIC_NOT_EXIST) => return Ok(None),
        Err(e) => return Err(format!("route of {topic}: {e}")),
    };
    let datas = &route.queue_datas;
    if datas.is_empty() {
        return Ok(None);
    }
    let config = QueueConfig {
        read: datas.iter().map(|q| q.read_queue_nums).min().unwrap_or(0),
        write: datas.iter().map(|q| q.write_queue_nums).max().unwrap_or(0),
    };
    let perm = datas.iter().map(|q| q.perm).min().unwrap_or(0);
    Ok(Some((config, perm, datas.len() as u32)))
}

/// The groups that have not consumed the read queues at and above `target` yet.
async fn undrained(admin: &Admin, topic: &str, target: i32) -> Result<Vec<String>, String> {
    let mut waiting = Vec::new();
    for group in admin
        .topic_consumers(topic)
        .await
        .map_err(|e| format!("consumer groups of {topic}: {e}"))?
    {
        let progress = admin
            .consumer_progress(&group, topic)
            .await
            .map_err(|e| format!("progress of {group} on {topic}: {e}"))?;
        let left = progress.queues.iter().any(|q| {
            q.queue.queue_id >= target && q.consumer_offset.unwrap_or(0) < q.broker_offset
        });
        if left {
            waiting.push(group);
        }
    }
    Ok(waiting)
}

/// What the ConsumerAutoscalers of this topic (same namespace, same cluster) ask of it.
fn demand(topic: &MessageQueueTopic, name: &str, autoscalers: &[ConsumerAutoscaler]) -> Demand {
    let mut d = Demand::default();
    for cas in autoscalers {
        let same_cluster = cas.spec.cluster_ref == topic.spec.cluster_ref
            && cas.spec.name_server == topic.spec.name_server;
        if !same_cluster || !cas.spec.topics.iter().any(|t| t == name) {
            continue;
        }
        let Some(status) = &cas.status else { continue };
        if let Some(want) = status.desired_replicas {
            d.most_wanted = Some(d.most_wanted.unwrap_or(0).max(want.max(0) as u32));
        }
        let capped = status
            .conditions
            .iter()
            .find(|c| c.type_ == CAPPED && c.status == "True" && c.reason == "QueueLimit");
        if let Some(c) = capped {
            let since = c.last_transition_time.0.as_millisecond();
            d.capped_since_ms = Some(d.capped_since_ms.map_or(since, |s: i64| s.min(since)));
        }
    }
    d
}

/// One sync of one topic.
async fn sync(t: Arc<MessageQueueTopic>, ctx: Arc<TopicContext>) -> Result<Action, TopicError> {
    let ns = t.namespace().ok_or(TopicError::NoNamespace)?;
    let spec = &t.spec;
    let every = Action::requeue(Duration::from_secs(spec.sync_interval_seconds.max(1) as u64));
    let api: Api<MessageQueueTopic> = Api::namespaced(ctx.client.clone(), &ns);
    let old = t.status.clone().unwrap_or_default();
    let generation = t.metadata.generation;
    let now = Timestamp::now();
    let name = spec.topic_name.clone().unwrap_or_else(|| t.name_any());
    let mut status = MessageQueueTopicStatus {
        observed_generation: generation,
        topic_name: Some(name.clone()),
        ..old.clone()
    };
    let ready =
        |status: &mut MessageQueueTopicStatus, holds: bool, reason: &str, message: String| {
            let c = condition_of(
                &old.conditions,
                "Ready",
                holds,
                reason,
                message,
                generation,
                now,
            );
            status.conditions.retain(|x| x.type_ != "Ready");
            status.conditions.insert(0, c);
        };
    if t.annotations().get(PAUSE_ANNOTATION).map(String::as_str) == Some("true") {
        ready(
            &mut status,
            false,
            "Paused",
            format!("{PAUSE_ANNOTATION} is \"true\""),
        );
        crate::reconcile::apply::apply_status(&api, &t.name_any(), &status).await?;
        return Ok(every);
    }
    let cluster = crate::rocketmq::name_servers(
        &ctx.client,
        &ns,
        spec.cluster_ref.as_ref(),
        spec.name_server.as_deref(),
    )
    .await
    .and_then(|target| Ok((ctx.admins.get(&target)?, target.cluster)));
    let (admin, cluster) = match cluster {
        Ok(c) => c,
        Err(why) => {
            ready(&mut status, false, "ClusterUnreachable", why);
            crate::reconcile::apply::apply_status(&api, &t.name_any(), &status).await?;
            return Ok(every);
        }
    };
    let cluster_name = spec
        .cluster_name
        .clone()
        .or(cluster)
        .unwrap_or_else(|| "DefaultCluster".into());
    let observed = match observe(&admin, &name).await {
        Ok(o) => o,
        Err(why) => {
            ready(&mut status, false, "BrokersUnreachable", why);
            crate::reconcile::apply::apply_status(&api, &t.name_any(), &status).await?;
            return Ok(every);
        }
    };
    let current = observed.map(|(c, _, _)| c);
    status.read_queues = current.map(|c| c.read);
    status.write_queues = current.map(|c| c.write);

    // The target: declared, or where autoscaling took it (changed only when stable).
    let mut target = old.target_queues.unwrap_or(spec.queues);
    let autoscaling = spec.queue_autoscaling.as_ref().filter(|a| a.enabled);
    let mut autoscaling_refusal = None;
    match autoscaling {
        None => {
            target = spec.queues;
            status.shrink_eligible_since = None;
        }
        Some(_) if spec.ordered && !autoscaling.is_some_and(|a| a.allow_for_ordered) => {
            target = spec.queues;
            autoscaling_refusal = Some(
                "an ordered topic is not autoscaled unless queueAutoscaling.allowForOrdered: a changed queue count moves keys to other queues".to_string(),
            );
        }
        Some(a) => {
            let rules = Rules {
                min: a.min_queues,
                max: a.max_queues,
                step: a.step.max(1),
                grow_after_ms: i64::from(a.grow_after_seconds) * 1000,
                shrink_after_ms: i64::from(a.shrink_after_seconds) * 1000,
            };
            target = target.clamp(rules.min, rules.max);
            let stable = current.is_some_and(|c| c.read == target && c.write == target);
            if stable {
                let cas_api: Api<ConsumerAutoscaler> = Api::namespaced(ctx.client.clone(), &ns);
                let autoscalers = cas_api.list(&Default::default()).await?.items;
                let d = demand(&t, &name, &autoscalers);
                let mut since = old
                    .shrink_eligible_since
                    .as_ref()
                    .map(|s| s.0.as_millisecond());
                let groups = observed.map_or(1, |(_, _, g)| g);
                target =
                    autoscaled_target(&rules, target, groups, &d, &mut since, now.as_millisecond());
                status.shrink_eligible_since = since
                    .and_then(|ms| Timestamp::from_millisecond(ms).ok())
                    .map(Time);
            }
        }
    }
    status.target_queues = Some(target);
    let autoscaling_condition = condition_of(
        &old.conditions,
        "Autoscaling",
        autoscaling.is_some() && autoscaling_refusal.is_none(),
        if autoscaling_refusal.is_some() {
            "RefusedForOrderedTopic"
        } else if autoscaling.is_some() {
            "Enabled"
        } else {
            "Disabled"
        },
        autoscaling_refusal.unwrap_or_default(),
        generation,
        now,
    );
    status.conditions.retain(|c| c.type_ != "Autoscaling");
    status.conditions.push(autoscaling_condition);

    // The next step, waiting on the groups while draining.
    let mut waiting = Vec::new();
    let draining = current.is_some_and(|c| c.write == target && c.read > target);
    if draining {
        match undrained(&admin, &name, target).await {
            Ok(w) => waiting = w,
            Err(why) => {
                ready(&mut status, false, "BrokersUnreachable", why);
                crate::reconcile::apply::apply_status(&api, &t.name_any(), &status).await?;
                return Ok(every);
            }
        }
    }
    let perm_now = observed.map(|(_, p, _)| p);
    let step = next_step(current, target, waiting.is_empty());
    let (apply, phase) = match step {
        Step::Apply(c, phase) => (Some(c), phase),
        Step::WaitForDrain => (None, Phase::Draining),
        // Same queues, another permission (or none yet): re-apply as declared.
        Step::Done if perm_now != Some(spec.perm) => (current, Phase::Stable),
        Step::Done => (None, Phase::Stable),
    };
    status.phase = Some(phase.as_str().into());
    status.waiting_for = waiting.clone();
    if let Some(c) = apply {
        let topic_spec = TopicSpec {
            topic: name.clone(),
            read_queue_nums: c.read,
            write_queue_nums: c.write,
            perm: spec.perm & (perm_bits::READ | perm_bits::WRITE),
            order: spec.ordered,
            attributes: spec.ordered.then(|| "+message.type=FIFO".to_string()),
        };
        if let Err(e) = admin.create_topic(&cluster_name, &topic_spec).await {
            ready(
                &mut status,
                false,
                "ApplyFailed",
                format!("{name} on {cluster_name}: {e}"),
            );
            crate::reconcile::apply::apply_status(&api, &t.name_any(), &status).await?;
            return Ok(every);
        }
        let from = current.map_or("none".to_string(), |c| {
            format!("read {} write {}", c.read, c.write)
        });
        crate::events::record(
            &ctx.client,
            &ctx.instance,
            t.as_ref(),
            false,
            "QueuesChanged",
            phase.as_str(),
            format!(
                "{name}: {from} → read {} write {} (target {target}, {})",
                c.read,
                c.write,
                phase.as_str()
            ),
        )
        .await;
        status.read_queues = Some(c.read);
        status.write_queues = Some(c.write);
    }
    let done = matches!(step, Step::Done) && apply.is_none();
    let message = match (done, waiting.is_empty()) {
        (true, _) => format!("{target} read and write queues per broker group"),
        (false, false) => format!(
            "draining queues {target} and above: waiting for {}",
            waiting.join(", ")
        ),
        (false, true) => format!(
            "moving to {target} queues per broker group ({})",
            phase.as_str()
        ),
    };
    ready(
        &mut status,
        done,
        if done { "AsDeclared" } else { phase.as_str() },
        message,
    );
    crate::reconcile::apply::apply_status(&api, &t.name_any(), &status).await?;
    // Changing: look again soon (the route shows a change once the brokers re-register).
    Ok(if done {
        every
    } else {
        Action::requeue(
            Duration::from_secs(1)
                .min(Duration::from_secs(spec.sync_interval_seconds.max(1) as u64)),
        )
    })
}
