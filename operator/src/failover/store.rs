//! The controller's state in the Kubernetes API: one ConfigMap per cluster
//! (`<cluster>-controller`, key `state.json`, owned by the cluster so that it goes with it),
//! written only by compare-and-set on its `resourceVersion`. A controller saves only over the
//! version it last loaded or saved; if anyone else (a second operator replica, a restarted
//! operator that raced this one) wrote in between, the API server answers 409 Conflict and
//! nothing is saved, so two controllers can never both hand out one epoch.

use std::collections::BTreeMap;
use std::sync::Mutex;

use conveyor::controller::decide::ControllerState;
use conveyor::controller::state_store::{StateStore, StateStoreError};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::Client;

/// The ConfigMap key holding the state.
pub const STATE_KEY: &str = "state.json";

/// The name of a cluster's controller-state ConfigMap.
pub fn config_map_name(cluster: &str) -> String {
    format!("{cluster}-controller")
}

/// A [`StateStore`] on one ConfigMap.
pub struct ConfigMapStateStore {
    /// ConfigMaps of the cluster's namespace.
    api: Api<ConfigMap>,
    /// The ConfigMap's name.
    name: String,
    /// Owner of a ConfigMap this store creates (the cluster).
    owner: Option<OwnerReference>,
    /// The `resourceVersion` this store last loaded or saved (`None`: the ConfigMap did not
    /// exist then); the next save is conditional on it.
    version: Mutex<Option<String>>,
}

impl ConfigMapStateStore {
    /// The store of ConfigMap `name` in `namespace`; a ConfigMap it creates is owned by `owner`.
    pub fn new(client: Client, namespace: &str, name: &str, owner: Option<OwnerReference>) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            owner,
            version: Mutex::new(None),
        }
    }

    fn version(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.version.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn load_async(&self) -> Result<ControllerState, StateStoreError> {
        let found = self.api.get_opt(&self.name).await.map_err(backend)?;
        let Some(cm) = found else {
            *self.version() = None;
            return Ok(ControllerState::default());
        };
        let state = match cm.data.as_ref().and_then(|d| d.get(STATE_KEY)) {
            Some(text) => serde_json::from_str(text).map_err(|e| {
                StateStoreError::Backend(format!(
                    "ConfigMap {} key {STATE_KEY} is not a controller state: {e}",
                    self.name
                ))
            })?,
            None => ControllerState::default(),
        };
        *self.version() = cm.metadata.resource_version;
        Ok(state)
    }

    async fn save_async(&self, state: &ControllerState) -> Result<(), StateStoreError> {
        let text = serde_json::to_string(state)
            .map_err(|e| StateStoreError::Backend(format!("encode the state: {e}")))?;
        let expected = self.version().clone();
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: expected.clone(),
                owner_references: self.owner.clone().map(|o| vec![o]),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_string(),
                    "conveyor-operator".to_string(),
                )])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(STATE_KEY.to_string(), text)])),
            ..Default::default()
        };
        let pp = PostParams::default();
        let written = match &expected {
            // Created only if nobody created it since this store found it missing.
            None => self.api.create(&pp, &cm).await,
            // Replaced only at the version this store last saw.
            Some(_) => self.api.replace(&self.name, &pp, &cm).await,
        };
        match written {
            Ok(cm) => {
                *self.version() = cm.metadata.resource_version;
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Err(StateStoreError::Conflict(format!(
                "ConfigMap {} changed since version {}",
                self.name,
                expected.as_deref().unwrap_or("<none>")
            ))),
            Err(e) => Err(backend(e)),
        }
    }
}

fn backend(e: kube::Error) -> StateStoreError {
    StateStoreError::Backend(e.to_string())
}

/// Runs `fut` to completion from the synchronous [`StateStore`] calls: the controller calls
/// them under its state lock, from tasks on the operator's multi-threaded runtime, so the
/// worker hands its other tasks over while it waits for the API server.
fn wait<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(fut))
}

impl StateStore for ConfigMapStateStore {
    fn load(&self) -> Result<ControllerState, StateStoreError> {
        wait(self.load_async())
    }

    fn save(&self, state: &ControllerState) -> Result<(), StateStoreError> {
        wait(self.save_async(state))
    }
}
