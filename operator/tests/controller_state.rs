//! The replication controller's state in a real kube-apiserver (issue 11): saves are
//! compare-and-set on the ConfigMap's resourceVersion, so a controller that missed another's
//! save can never save over it (and so never hands out an epoch a second time); it reloads
//! instead, and a controller opened later (a restarted operator) resumes from the saved state.
//!
//! Needs an API server: `tests/k8s/e2e.sh` runs it with its KUBECONFIG
//! (`cargo test -p conveyor-operator --test controller_state -- --ignored`).

use conveyor::controller::decide::Member;
use conveyor::controller::service::ServiceError;
use conveyor::controller::state_store::StateStoreError;
use conveyor::controller::{Controller, ControllerConfig};
use conveyor_operator::failover::store::{ApiRuntime, ConfigMapStateStore, STATE_KEY};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams};

fn member(id: i64) -> Member {
    Member {
        addr: format!("198.18.0.{}:10911", 10 + id),
        ha_addr: format!("198.18.0.{}:10912", 10 + id),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kube-apiserver; tests/k8s/e2e.sh runs it"]
async fn two_controllers_on_one_state_never_save_over_each_other() {
    let client = kube::Client::try_default().await.expect("KUBECONFIG");
    let name = format!("cas-test-{}", std::process::id());
    let runtime = tokio::task::spawn_blocking(ApiRuntime::start)
        .await
        .unwrap()
        .expect("an API runtime");
    let open = || {
        let store = ConfigMapStateStore::new(&runtime, "default", &name, None);
        Controller::open(ControllerConfig::default(), Box::new(store)).expect("load")
    };
    let a = open();
    let b = open();

    // A decides first: broker 0 of group g registers and becomes master of epoch 1.
    let info = a.register("c", "g", 0, member(0), 0, None).unwrap();
    assert_eq!((info.master, info.master_epoch), (Some(0), 1));

    // B loaded before A saved: its save is refused, it answers nothing and takes A's state.
    let refused = b.register("c", "g", 1, member(1), 0, None).unwrap_err();
    assert!(
        matches!(refused, ServiceError::Save(StateStoreError::Conflict(_))),
        "{refused}"
    );
    assert_eq!(b.state(), a.state());
    // Now B is current, and its registration goes through (still epoch 1, master 0).
    let info = b.register("c", "g", 1, member(1), 0, None).unwrap();
    assert_eq!((info.master, info.master_epoch), (Some(0), 1));

    // A is the stale one now: refused, reloaded.
    let refused = a.register("c", "g", 2, member(2), 0, None).unwrap_err();
    assert!(
        matches!(refused, ServiceError::Save(StateStoreError::Conflict(_))),
        "{refused}"
    );
    assert_eq!(a.state(), b.state());

    // What the API server holds is B's decision; a controller opened now (a restarted
    // operator) starts from it.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = api.get(&name).await.unwrap();
    let saved = &cm.data.as_ref().unwrap()[STATE_KEY];
    assert!(saved.contains("\"masterEpoch\":1"), "{saved}");
    let c = open();
    assert_eq!(c.state(), b.state());
    let group = &c.state().groups["g"];
    assert_eq!(group.members.keys().copied().collect::<Vec<_>>(), [0, 1]);
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}
