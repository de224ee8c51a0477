//! Leader election with a `coordination.k8s.io/v1` Lease, so several operator replicas are safe:
//! only the holder reconciles. Updates go through `replace` with the read `resourceVersion`, so
//! two candidates racing for an expired lease cannot both win (the loser gets 409 Conflict).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::Client;

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

/// Whether `lease` may be taken by `identity` at `now`.
pub fn can_take(lease: &LeaseSpec, identity: &str, now: Timestamp) -> bool {
    let holder = lease.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == identity {
        return true;
    }
    let duration = SignedDuration::from_secs(lease.lease_duration_seconds.unwrap_or(15) as i64);
    match lease.renew_time.as_ref().or(lease.acquire_time.as_ref()) {
        Some(MicroTime(renewed)) => *renewed + duration < now,
        None => true,
    }
}

/// Elector for one identity.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
}

impl LeaderElector {
    /// An elector for `config.identity` on the Lease `config.namespace/config.name`.
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
        }
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
                if !can_take(&spec, &c.identity, now) {
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

    /// Renews until the lease is lost (another holder, or no successful renewal for a whole
    /// lease duration); returns then.
    pub async fn hold(&self) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Leading) => last_ok = tokio::time::Instant::now(),
                Ok(Attempt::Following(holder)) => {
                    tracing::warn!(%holder, "lost leadership");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot renew the lease");
                    // Stop before the lease could expire and another replica take over.
                    if last_ok.elapsed() + self.config.retry_period >= self.config.lease_duration {
                        tracing::warn!("lease not renewed in time; stepping down");
                        return;
                    }
                }
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
                Timestamp::now() - SignedDuration::from_secs(renewed_secs_ago),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn a_valid_lease_of_another_holder_cannot_be_taken() {
        assert!(!can_take(&lease(Some("b"), 3), "a", Timestamp::now()));
    }

    #[test]
    fn an_expired_released_or_own_lease_can_be_taken() {
        assert!(can_take(&lease(Some("b"), 30), "a", Timestamp::now()));
        assert!(can_take(&lease(None, 1), "a", Timestamp::now()));
        assert!(can_take(&lease(Some(""), 1), "a", Timestamp::now()));
        assert!(can_take(&lease(Some("a"), 1), "a", Timestamp::now()));
    }
}
