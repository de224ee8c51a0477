//! Leader election with a `coordination.k8s.io/v1` Lease, so several operator replicas are safe:
//! only the holder reconciles. Updates go through `replace` with the read `resourceVersion`, so
//! two candidates racing for an expired lease cannot both win (the loser gets 409 Conflict).
//! As client-go's leader election: another holder's lease expires a lease duration after this
//! replica last saw it change, by this replica's own monotonic clock (the holder's `renewTime`
//! is never compared with the local wall clock, which may differ), and the holder steps down
//! when it could not renew within the renew deadline, before anyone else may take over.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::time::Instant;

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's `holderIdentity`.
    pub identity: String,
    /// How long a lease stays valid without renewal.
    pub lease_duration: Duration,
    /// Time between renewals (and between attempts while not leading).
    pub retry_period: Duration,
}

/// Outcome of one acquire-or-renew attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the lease.
    Leading,
    /// Someone else holds a valid lease.
    Following(String),
}

/// Whether `lease` may be taken by `identity`, its record having stayed the same for
/// `unchanged_for` as this replica saw it: a lease without holder or of `identity` at once,
/// another holder's once its record has not changed for its whole duration.
pub fn can_take(lease: &LeaseSpec, identity: &str, unchanged_for: Duration) -> bool {
    let holder = lease.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == identity {
        return true;
    }
    let duration = Duration::from_secs(lease.lease_duration_seconds.unwrap_or(15).max(1) as u64);
    unchanged_for > duration
}

/// How long the lease's record has stayed the same, by this replica's clock.
#[derive(Debug, Default)]
pub struct LeaseObserver {
    /// The record last seen, and when it was first seen as it is.
    seen: Option<(LeaseSpec, Instant)>,
}

impl LeaseObserver {
    /// Records `spec` as seen at `now`; returns how long it has been the same.
    pub fn observe(&mut self, spec: &LeaseSpec, now: Instant) -> Duration {
        match &self.seen {
            Some((seen, since)) if seen == spec => now.saturating_duration_since(*since),
            _ => {
                self.seen = Some((spec.clone(), now));
                Duration::ZERO
            }
        }
    }
}

/// Elector for one identity.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// What this replica saw of the lease and since when.
    observer: Mutex<LeaseObserver>,
}

impl LeaderElector {
    /// An elector for `config.identity` on the Lease `config.namespace/config.name`.
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observer: Mutex::new(LeaseObserver::default()),
        }
    }

    /// How long a leader keeps trying to renew before it steps down: a retry period short of
    /// the lease duration (client-go's RenewDeadline), so it stops leading before another
    /// replica may take the lease.
    pub fn renew_deadline(&self) -> Duration {
        self.config
            .lease_duration
            .saturating_sub(self.config.retry_period)
            .max(Duration::from_secs(1))
    }

    /// The Lease settings.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// One attempt to acquire or renew the lease.
    pub async fn try_acquire_or_renew(&self) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let c = &self.config;
        let secs = c.lease_duration.as_secs().max(1) as i32;
        match self.api.get_opt(&c.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(c.name.clone()),
                        namespace: Some(c.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(c.identity.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(Attempt::Leading),
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        Ok(Attempt::Following("<racing candidate>".into()))
                    }
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let unchanged_for = self
                    .observer
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .observe(&spec, Instant::now());
                if !can_take(&spec, &c.identity, unchanged_for) {
                    return Ok(Attempt::Following(spec.holder_identity.unwrap_or_default()));
                }
                let ours = spec.holder_identity.as_deref() == Some(c.identity.as_str());
                let mut new = spec.clone();
                new.holder_identity = Some(c.identity.clone());
                new.lease_duration_seconds = Some(secs);
                new.renew_time = Some(MicroTime(now));
                if !ours {
                    new.acquire_time = Some(MicroTime(now));
                    new.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                lease.spec = Some(new);
                match self
                    .api
                    .replace(&c.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(Attempt::Leading),
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        Ok(Attempt::Following("<racing candidate>".into()))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Waits until this identity holds the lease.
    pub async fn acquire(&self) {
        self.acquire_reporting(|_| {}).await
    }

    /// [`acquire`](Self::acquire), handing every attempt's result to `report` (for readiness:
    /// following, leading or unreachable).
    pub async fn acquire_reporting(&self, mut report: impl FnMut(Result<&Attempt, &kube::Error>)) {
        loop {
            let attempt = self.try_acquire_or_renew().await;
            report(attempt.as_ref());
            match attempt {
                Ok(Attempt::Leading) => {
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, "acquired leadership");
                    return;
                }
                Ok(Attempt::Following(holder)) => {
                    tracing::debug!(%holder, "lease held by another replica");
                }
                Err(e) => tracing::warn!(error = %e, "leader election: cannot reach the lease"),
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews until the lease is lost (another holder, or no successful renewal within the
    /// renew deadline, however long the API takes to answer); returns then.
    pub async fn hold(&self) {
        let deadline = self.renew_deadline();
        let mut last_ok = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let left = deadline.saturating_sub(last_ok.elapsed());
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(Attempt::Leading)) => last_ok = Instant::now(),
                Ok(Ok(Attempt::Following(holder))) => {
                    tracing::warn!(%holder, "lost leadership");
                    return;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew the lease"),
                Err(_) => tracing::warn!("the lease renewal did not answer in time"),
            }
            // Stop before the lease could expire and another replica take over.
            if last_ok.elapsed() + self.config.retry_period >= deadline {
                tracing::warn!("lease not renewed within the renew deadline; stepping down");
                return;
            }
        }
    }

    /// Gives the lease up (on shutdown) so another replica can take over at once.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await {
            if let Some(spec) = lease.spec.as_mut() {
                if spec.holder_identity.as_deref() == Some(self.config.identity.as_str()) {
                    spec.holder_identity = None;
                    spec.renew_time = None;
                    let _ = self
                        .api
                        .replace(&self.config.name, &PostParams::default(), &lease)
                        .await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_secs_ago: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(String::from),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(renewed_secs_ago),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn another_holders_lease_is_taken_only_once_unchanged_for_its_duration() {
        let secs = Duration::from_secs;
        assert!(!can_take(&lease(Some("b"), 3), "a", secs(3)));
        assert!(!can_take(&lease(Some("b"), 3), "a", secs(15)));
        assert!(can_take(&lease(Some("b"), 3), "a", secs(16)));
        // The holder's renewTime says nothing by itself: its clock may be ahead or behind.
        assert!(!can_take(&lease(Some("b"), 3600), "a", secs(0)));
    }

    #[test]
    fn a_released_or_own_lease_can_be_taken_at_once() {
        let now = Duration::ZERO;
        assert!(can_take(&lease(None, 1), "a", now));
        assert!(can_take(&lease(Some(""), 1), "a", now));
        assert!(can_take(&lease(Some("a"), 1), "a", now));
    }

    #[test]
    fn the_observer_counts_from_the_last_change_it_saw() {
        let mut o = LeaseObserver::default();
        let t0 = Instant::now();
        let first = lease(Some("b"), 0);
        assert_eq!(o.observe(&first, t0), Duration::ZERO);
        assert_eq!(
            o.observe(&first, t0 + Duration::from_secs(10)),
            Duration::from_secs(10)
        );
        // Renewed: the count starts again.
        let mut renewed = first.clone();
        renewed.renew_time = Some(MicroTime(Timestamp::now()));
        assert_eq!(
            o.observe(&renewed, t0 + Duration::from_secs(11)),
            Duration::ZERO
        );
        assert_eq!(
            o.observe(&renewed, t0 + Duration::from_secs(27)),
            Duration::from_secs(16)
        );
    }
}
