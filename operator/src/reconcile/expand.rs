//! Volume expansion: a larger `spec.broker.storage.size` grows the claims of the existing
//! groups in place, where their StorageClass allows it (`allowVolumeExpansion`), as Strimzi
//! does. A StatefulSet's claim templates cannot change, so the operator patches each claim's
//! request, then deletes the StatefulSet with `propagationPolicy: Orphan` (its pods and
//! claims stay, and so do the brokers) and the next reconcile creates it again with the new
//! template, which adopts the running pods without restarting them (the pod template is
//! unchanged). The CSI driver's resizer grows the volume and the filesystem. A smaller size
//! or another class is refused: volumes cannot shrink, and a class change needs a data
//! migration.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PropagationPolicy};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::context::{Error, FIELD_MANAGER};
use crate::builders::names;

/// What a storage spec asks of an existing group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageChange {
    /// Nothing: same size, same class.
    Same,
    /// A larger size of the same class: expand the claims.
    Grow,
    /// Refused, and why.
    Refused(String),
}

/// Compares the size and class of a group's claim template (`have_*`) with the spec's. An
/// absent class in the spec means "whatever the cluster default gave", so it never counts as
/// a change.
pub fn storage_change(
    have_size: Option<&str>,
    have_class: Option<&str>,
    want_size: &str,
    want_class: Option<&str>,
) -> StorageChange {
    if want_class.is_some() && want_class != have_class {
        return StorageChange::Refused(format!(
            "the storage class cannot change (have {}, spec asks {}): that needs a data migration",
            have_class.unwrap_or("<default>"),
            want_class.unwrap_or("<default>")
        ));
    }
    let have = have_size.unwrap_or_default();
    if have == want_size {
        return StorageChange::Same;
    }
    match (bytes(have), bytes(want_size)) {
        (Some(h), Some(w)) if w > h => StorageChange::Grow,
        (Some(h), Some(w)) if w == h => StorageChange::Same,
        (Some(_), Some(_)) => StorageChange::Refused(format!(
            "volumes cannot shrink (have {have}, spec asks {want_size})"
        )),
        _ => StorageChange::Refused(format!("cannot compare the sizes {have} and {want_size}")),
    }
}

/// Bytes of a Kubernetes quantity (`10Gi`, `500M`, `1.5Ti`, `1e9`), rounded down; `None`
/// when it is not one.
pub fn bytes(quantity: &str) -> Option<u128> {
    let q = quantity.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let n: f64 = number.parse().ok()?;
    (n.is_finite() && n >= 0.0).then_some((n * multiplier) as u128)
}

/// What expanding a group's claims did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expanded {
    /// Claims patched (their names) and the StatefulSet deleted, its pods and claims kept:
    /// the next reconcile creates it with the new template.
    Requested(Vec<String>),
    /// Refused: a claim's class does not allow expansion (or it has none: static volumes).
    Refused(String),
}

/// Expands the claims of group StatefulSet `sts` to `size`: checks every claim's
/// StorageClass first (one that cannot grow refuses the whole group, so no claim is left
/// larger than its peers), patches their requests, then deletes the StatefulSet orphaning
/// its pods.
pub async fn expand(
    client: &Client,
    ns: &str,
    sts: &StatefulSet,
    size: &str,
) -> Result<Expanded, Error> {
    let claims_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let classes: Api<StorageClass> = Api::all(client.clone());
    let name = sts.name_any();
    let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let mut claims = Vec::new();
    for ordinal in 0..replicas {
        let claim_name = format!("data-{}", names::pod(&name, ordinal));
        let Some(claim) = claims_api.get_opt(&claim_name).await? else {
            continue; // the pod was never created: its claim comes from the new template
        };
        let class = claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .filter(|c| !c.is_empty());
        let Some(class) = class else {
            return Ok(Expanded::Refused(format!(
                "{claim_name} has no StorageClass (a static volume): it cannot be expanded"
            )));
        };
        let allowed = classes
            .get_opt(&class)
            .await?
            .and_then(|c| c.allow_volume_expansion)
            .unwrap_or(false);
        if !allowed {
            return Ok(Expanded::Refused(format!(
                "StorageClass {class} of {claim_name} does not allow volume expansion \
                 (allowVolumeExpansion)"
            )));
        }
        let requested = claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .and_then(|q| bytes(&q.0));
        if requested < bytes(size) {
            claims.push(claim_name);
        }
    }
    let patch = json!({"spec": {"resources": {"requests": {"storage": size}}}});
    for claim in &claims {
        tracing::info!(claim, size, "volume expansion: growing the claim");
        claims_api
            .patch(
                claim,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                },
                &Patch::Merge(&patch),
            )
            .await?;
    }
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    tracing::info!(
        statefulset = name,
        size,
        "volume expansion: recreating the StatefulSet with the new claim template (pods kept)"
    );
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        preconditions: sts
            .metadata
            .uid
            .clone()
            .map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
        ..Default::default()
    };
    match statefulsets.delete(&name, &params).await {
        Ok(_) => {}
        // Gone or replaced meanwhile: the next reconcile sees what is there.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Expanded::Requested(claims))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_bytes() {
        assert_eq!(bytes("10Gi"), Some(10 << 30));
        assert_eq!(bytes("1.5Ki"), Some(1536));
        assert_eq!(bytes("500M"), Some(500_000_000));
        assert_eq!(bytes("1e3"), Some(1000));
        assert_eq!(bytes("1024"), Some(1024));
        assert_eq!(bytes("ten gigs"), None);
        assert_eq!(bytes("10Qi"), None);
    }

    #[test]
    fn larger_grows_smaller_and_another_class_are_refused() {
        let change = |have, want| storage_change(Some(have), Some("fast"), want, None);
        assert_eq!(change("10Gi", "10Gi"), StorageChange::Same);
        assert_eq!(change("10Gi", "20Gi"), StorageChange::Grow);
        // The same amount written another way is no change.
        assert_eq!(change("1Gi", "1024Mi"), StorageChange::Same);
        assert!(
            matches!(change("20Gi", "10Gi"), StorageChange::Refused(m) if m.contains("cannot shrink"))
        );
        assert!(matches!(
            storage_change(Some("10Gi"), Some("fast"), "20Gi", Some("slow")),
            StorageChange::Refused(m) if m.contains("class cannot change")
        ));
        // The spec's class absent: the default the claims got is kept.
        assert_eq!(
            storage_change(Some("10Gi"), Some("fast"), "20Gi", None),
            StorageChange::Grow
        );
    }
}
