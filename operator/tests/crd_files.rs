//! The committed CRD files must equal what the Rust types generate.

use std::path::PathBuf;

#[test]
fn committed_crd_matches_the_types() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crds/messagequeueclusters.conveyor.dev.yaml");
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let generated = conveyor_operator::crd::crd_yaml();
    assert!(
        committed == generated,
        "{} is stale: run `cargo run -p conveyor-operator -- crd > crds/messagequeueclusters.conveyor.dev.yaml` (and copy it to charts/conveyor-operator/crds/)",
        path.display()
    );
    assert!(
        generated.len() < 256 * 1024,
        "CRD is {} bytes",
        generated.len()
    );
    let chart_copy = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/conveyor-operator/crds/messagequeueclusters.conveyor.dev.yaml");
    let chart = std::fs::read_to_string(&chart_copy)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", chart_copy.display()));
    assert!(chart == generated, "{} is stale", chart_copy.display());
}

#[test]
fn crd_identity() {
    use kube::CustomResourceExt;
    let crd = conveyor_operator::crd::MessageQueueCluster::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("messagequeueclusters.conveyor.dev")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["mqc".to_string()]));
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let cols: Vec<_> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(cols, ["Ready", "Groups", "Replicas", "Flush", "Age"]);
    let yaml = conveyor_operator::crd::crd_yaml();
    assert!(
        yaml.contains("self.broker.replicationMode != 'Sync' || self.broker.replicasPerGroup >= 2")
    );
}
