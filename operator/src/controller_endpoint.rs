//! The operator's controller Service leads to the leading replica only. Brokers reach the
//! replication controller through one Service, but only the leader listens: with a pod
//! selector, kube-proxy would send some of their connections to standbys (refused), and after
//! a leader change brokers could miss the new controller's detection time and be replaced for
//! nothing. So the Service has no selector, and the replica that starts leading writes the
//! Service's EndpointSlice with its own pod IP and controller port before it serves; the next
//! leader overwrites it the same way.

use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::builders;

/// Where the leading replica publishes itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerEndpoint {
    /// The namespace of the operator and its controller Service.
    pub namespace: String,
    /// The controller Service's name (it has no selector).
    pub service: String,
    /// This replica's pod IP.
    pub ip: IpAddr,
}

/// The controller Service's EndpointSlice leading to `ip:port` (this replica): named after the
/// Service and owned by it (deleted with it), its one port named as the Service's first port.
pub fn controller_endpoints(service: &Service, ip: IpAddr, port: u16) -> EndpointSlice {
    let name = service.name_any();
    let port_name = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports.first())
        .and_then(|p| p.name.clone())
        .unwrap_or_default();
    let owner = OwnerReference {
        api_version: Service::api_version(&()).into(),
        kind: Service::kind(&()).into(),
        name: name.clone(),
        uid: service.uid().unwrap_or_default(),
        ..Default::default()
    };
    builders::service_endpoints(
        ObjectMeta {
            name: Some(name.clone()),
            namespace: service.namespace(),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        &name,
        Some(ip),
        &port_name,
        port.into(),
    )
}

/// How often the slice is written again while this replica leads (someone may have changed it).
const REASSERT: Duration = Duration::from_secs(30);

/// How soon a failed write is tried again first; each further failure doubles it, up to
/// [`REASSERT`] (a refusal that lasts, such as a bad address, is not logged every second).
const RETRY: Duration = Duration::from_secs(1);

/// The field manager of the controller Service's EndpointSlice.
const MANAGER: &str = "conveyor-operator-leader";

/// Points the controller Service at this replica (listening on `port`) until `stop`: at once,
/// again after any failure, and every [`REASSERT`]. A missing Service (an operator not
/// installed by the chart) is reported and looked for again.
pub async fn publish(
    client: kube::Client,
    endpoint: ControllerEndpoint,
    port: u16,
    stop: CancellationToken,
) {
    let services: Api<Service> = Api::namespaced(client.clone(), &endpoint.namespace);
    let slices: Api<EndpointSlice> = Api::namespaced(client, &endpoint.namespace);
    let mut published = false;
    let mut retry = RETRY;
    loop {
        let written = match services.get(&endpoint.service).await {
            Ok(service) => {
                let slice = controller_endpoints(&service, endpoint.ip, port);
                slices
                    .patch(
                        &endpoint.service,
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(&slice),
                    )
                    .await
                    .map(|_| ())
            }
            Err(e) => Err(e),
        };
        let pause = match written {
            Ok(()) => {
                if !published {
                    tracing::info!(
                        service = endpoint.service,
                        ip = %endpoint.ip,
                        port,
                        "the controller Service leads to this replica"
                    );
                    published = true;
                }
                retry = RETRY;
                REASSERT
            }
            Err(e) => {
                tracing::warn!(
                    service = endpoint.service,
                    error = %e,
                    "cannot point the controller Service at this replica"
                );
                let pause = retry;
                retry = (retry * 2).min(REASSERT);
                pause
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};

    use super::*;

    fn service() -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("conveyor-operator-controller".into()),
                namespace: Some("conveyor-system".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    name: Some("controller".into()),
                    port: 9878,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_slice_leads_to_this_replica_only_and_goes_with_the_service() {
        let slice = controller_endpoints(&service(), "10.1.2.3".parse().unwrap(), 19878);
        assert_eq!(
            slice.metadata.name.as_deref(),
            Some("conveyor-operator-controller")
        );
        assert_eq!(slice.metadata.namespace.as_deref(), Some("conveyor-system"));
        let labels = slice.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels["kubernetes.io/service-name"],
            "conveyor-operator-controller"
        );
        assert_eq!(
            labels["endpointslice.kubernetes.io/managed-by"],
            builders::ENDPOINTS_MANAGER
        );
        let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Service", "u-1")
        );
        assert_eq!(slice.address_type, "IPv4");
        assert_eq!(slice.endpoints.len(), 1);
        assert_eq!(slice.endpoints[0].addresses, vec!["10.1.2.3".to_string()]);
        let port = &slice.ports.as_ref().unwrap()[0];
        // Matched to the Service's port by name; the port is where this replica listens.
        assert_eq!(port.name.as_deref(), Some("controller"));
        assert_eq!(port.port, Some(19878));
    }

    #[test]
    fn an_ipv6_pod_gets_an_ipv6_slice() {
        let slice = controller_endpoints(&service(), "fd00::7".parse().unwrap(), 9878);
        assert_eq!(slice.address_type, "IPv6");
    }
}
