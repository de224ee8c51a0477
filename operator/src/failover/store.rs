//! The controller's state in the Kubernetes API: one ConfigMap per cluster
//! (`<cluster>-controller`, key `state.json`, owned by the cluster so that it goes with it),
//! written only by compare-and-set on its `resourceVersion`. A controller saves only over the
//! version it last loaded or saved; if anyone else (a second operator replica, a restarted
//! operator that raced this one) wrote in between, the API server answers 409 Conflict and
//! nothing is saved, so two controllers can never both hand out one epoch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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

/// How long one API call of a store may take before the controller gives up on it (nothing
/// is decided then: the change is refused like any failed save).
const API_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Where the stores' API calls run: a thread of its own with a single-threaded runtime and
/// an API client created there. The controller calls its store synchronously while it holds
/// its state lock, from tasks of the operator's runtime; were the calls made on that runtime,
/// every worker could be blocked on that lock while the call they wait for needs a worker
/// (the client's connection tasks run there). Seen on real pods: after a burst of brokers'
/// requests the operator stopped answering them for good.
#[derive(Clone)]
pub struct ApiRuntime {
    /// Spawns onto the thread's runtime.
    handle: tokio::runtime::Handle,
    /// The client whose connections live on that runtime.
    client: Client,
    /// Dropped with the last clone: the thread and its runtime end.
    _stop: Arc<std::sync::mpsc::SyncSender<()>>,
}

impl ApiRuntime {
    /// Starts the thread, with a client configured like [`Client::try_default`].
    pub fn start() -> Result<Self, StateStoreError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let (stop_tx, stop_rx) = std::sync::mpsc::sync_channel::<()>(0);
        std::thread::Builder::new()
            .name("controller-state".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("a runtime for the API calls: {e}")));
                        return;
                    }
                };
                let client = rt
                    .block_on(Client::try_default())
                    .map_err(|e| format!("an API client: {e}"));
                let _ = ready_tx.send(client.map(|c| (rt.handle().clone(), c)));
                // Serve spawned calls until every ApiRuntime clone is gone.
                rt.block_on(async {
                    let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
                });
            })
            .map_err(|e| StateStoreError::Backend(format!("a thread for the API calls: {e}")))?;
        let (handle, client) = ready_rx
            .recv()
            .map_err(|_| StateStoreError::Backend("the API thread ended at start".into()))?
            .map_err(StateStoreError::Backend)?;
        Ok(Self {
            handle,
            client,
            _stop: Arc::new(stop_tx),
        })
    }

    /// Runs `fut` on the thread and waits for it (at most [`API_TIMEOUT`]).
    fn run<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = Result<T, StateStoreError>> + Send + 'static,
    ) -> Result<T, StateStoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv_timeout(API_TIMEOUT).unwrap_or_else(|_| {
            Err(StateStoreError::Backend(format!(
                "the API server did not answer within {API_TIMEOUT:?}"
            )))
        })
    }
}

/// A [`StateStore`] on one ConfigMap.
pub struct ConfigMapStateStore {
    /// Where its API calls run.
    runtime: ApiRuntime,
    /// The ConfigMap and what the store knows of it.
    inner: Arc<Inner>,
}

/// The ConfigMap a store writes, shared with the calls in flight on the API thread.
struct Inner {
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
    /// The store of ConfigMap `name` in `namespace`, its calls made on `runtime`; a ConfigMap
    /// it creates is owned by `owner`.
    pub fn new(
        runtime: &ApiRuntime,
        namespace: &str,
        name: &str,
        owner: Option<OwnerReference>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                api: Api::namespaced(runtime.client.clone(), namespace),
                name: name.to_string(),
                owner,
                version: Mutex::new(None),
            }),
            runtime: runtime.clone(),
        }
    }
}

impl Inner {
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

impl StateStore for ConfigMapStateStore {
    fn load(&self) -> Result<ControllerState, StateStoreError> {
        let inner = self.inner.clone();
        self.runtime.run(async move { inner.load_async().await })
    }

    fn save(&self, state: &ControllerState) -> Result<(), StateStoreError> {
        let (inner, state) = (self.inner.clone(), state.clone());
        self.runtime
            .run(async move { inner.save_async(&state).await })
    }
}
