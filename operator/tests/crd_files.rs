//! The committed CRD files must equal what the Rust types generate.

use std::path::PathBuf;

#[test]
fn committed_crds_match_the_types() {
    for (plural, generated) in conveyor_operator::crd::crd_files() {
        let file = format!("{plural}.conveyor.dev.yaml");
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        for dir in ["crds", "charts/conveyor-operator/crds"] {
            let path = root.join(dir).join(&file);
            let committed = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            assert!(
                committed == generated,
                "{} is stale: run `cargo run -p conveyor-operator -- crd {plural} > crds/{file}` and copy it to charts/conveyor-operator/crds/",
                path.display()
            );
        }
        assert!(
            generated.len() < 256 * 1024,
            "{plural}: CRD is {} bytes",
            generated.len()
        );
    }
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

#[test]
fn autoscaler_crd_identity() {
    use kube::CustomResourceExt;
    let crd = conveyor_operator::autoscaler::resource::ConsumerAutoscaler::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("consumerautoscalers.conveyor.dev")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["cas".to_string()]));
    let v = &crd.spec.versions[0];
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let yaml = serde_yaml::to_string(&crd).unwrap();
    assert!(yaml.contains("has(self.clusterRef) != has(self.nameServer)"));
    assert!(yaml.contains("self.maxReplicas >= self.minReplicas"));
}
