//! The target pod and its limits: what KubeVirt v1.9.0's `handleTargetPodCreation` and
//! `createTargetPod` decide for a Pending migration, and the configuration they read.

use serde_json::json;

use super::fixtures::*;
use super::*;

// --- Pending: the target pod -----------------------------------------------------------------

#[test]
fn pending_creates_the_target_pod_kubevirt_decorates() {
    let d = Scene::new("Pending").decide();
    assert_eq!(writes(&d), ["create pods"]);
    let pod = d.plan.created("pods").unwrap();
    assert_eq!(pod["metadata"]["name"], "virt-launcher-vmi1-x7k2p");
    assert_eq!(
        pod["metadata"]["labels"]["kubevirt.io/migrationJobUID"],
        MIG_UID
    );
    assert_eq!(
        pod["metadata"]["annotations"]["kubevirt.io/migrationJobName"],
        "mig1"
    );
    assert_eq!(
        pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!([{"labelSelector": {"matchLabels": {"kubevirt.io/created-by": "vmi-uid"}},
                "topologyKey": "kubernetes.io/hostname"}])
    );
    assert_eq!(
        pod["spec"]["nodeSelector"],
        json!({"kubevirt.io/schedulable": "true", "cpu-vendor.node.kubevirt.io/GenuineIntel": "true"})
    );
    assert_eq!(
        d.plan.write_list()[0].expectation,
        Some(Expectation::Creations {
            key: "default/mig1".into(),
            count: 1
        })
    );
    assert_eq!(
        events(&d),
        ["Created migration target pod virt-launcher-vmi1-x7k2p"]
    );
}

#[test]
fn the_target_pod_gets_the_added_node_selector_under_the_rendered_one() {
    let mut s = Scene::new("Pending");
    s.migration["spec"]["addedNodeSelector"] =
        json!({"zone": "b", "kubevirt.io/schedulable": "no"});
    let d = s.decide();
    let sel = &d.plan.created("pods").unwrap()["spec"]["nodeSelector"];
    assert_eq!(sel["zone"], "b");
    assert_eq!(sel["kubevirt.io/schedulable"], "true");
}

#[test]
fn the_target_pod_shares_the_source_selinux_level() {
    let mut s = Scene::new("Pending");
    s.vmi()["status"]["selinuxContext"] = json!("system_u:system_r:container_t:s0:c1,c2");
    let d = s.decide();
    assert_eq!(
        d.plan.created("pods").unwrap()["spec"]["securityContext"]["seLinuxOptions"],
        json!({"level": "s0:c1,c2"})
    );
    // Without a context from virt-handler there is no target pod yet.
    let mut s = Scene::new("Pending");
    s.vmi()["status"]["selinuxContext"] = json!("");
    let d = s.decide();
    assert_eq!(
        d.plan.error_message(),
        Some("SELinux context not set on VMI status")
    );
}

#[test]
fn a_root_vmi_is_made_non_root_before_its_target_is_rendered() {
    let mut s = Scene::new("Pending");
    s.vmi()["status"]["runtimeUser"] = json!(0);
    s.vmi()["metadata"]["annotations"] = json!({});
    let d = s.decide();
    assert_eq!(writes(&d), ["patch virtualmachineinstances", "create pods"]);
    assert_eq!(
        patch_of(&d, "virtualmachineinstances"),
        &json!([
            {"op": "test", "path": "/metadata/uid", "value": "vmi-uid"},
            {"op": "replace", "path": "/status/runtimeUser", "value": 107},
            {"op": "add", "path": "/metadata/annotations/kubevirt.io~1nonroot", "value": "true"},
        ])
    );
}

#[test]
fn no_target_pod_while_the_cluster_limit_is_reached() {
    let mut s = Scene::new("Pending");
    for i in 0..5 {
        let vmi = format!("other{i}");
        s.others
            .push(vmim(&format!("m{i}"), &format!("u{i}"), &vmi, "Running"));
        s.vmis
            .push(vmi_json(&vmi, &format!("vu{i}"), &format!("node-{i}")));
    }
    let d = s.decide();
    assert!(writes(&d).is_empty());
    assert_eq!(
        d.plan.queue.after_seconds(),
        Some(5),
        "default priority waits 5s"
    );
    // One fewer, and it goes.
    s.others.pop();
    assert_eq!(writes(&s.decide()), ["create pods"]);
}

#[test]
fn the_cluster_limit_comes_from_the_kubevirt_cr() {
    let mut s = Scene::new("Pending");
    s.config = MigrationConfig::from_kubevirt(Some(&json!({
        "spec": {"configuration": {"migrations": {"parallelMigrationsPerCluster": 1}}}
    })));
    s.others.push(vmim("m0", "u0", "other0", "Running"));
    s.vmis.push(vmi_json("other0", "vu0", "node-z"));
    s.migration["spec"]["priority"] = json!("user-triggered");
    let d = s.decide();
    assert!(writes(&d).is_empty());
    assert_eq!(
        d.plan.queue.after_seconds(),
        Some(3),
        "user-triggered waits 3s"
    );
}

#[test]
fn no_target_pod_while_two_migrations_leave_the_node() {
    let mut s = Scene::new("Pending");
    for i in 0..2 {
        let vmi = format!("other{i}");
        s.others
            .push(vmim(&format!("m{i}"), &format!("u{i}"), &vmi, "Scheduling"));
        s.vmis.push(vmi_json(&vmi, &format!("vu{i}"), "node-a"));
    }
    let d = s.decide();
    assert!(writes(&d).is_empty());
    assert!(d.plan.queue.requeued());
    // A migration leaving another node does not count.
    s.vmis[2]["status"]["nodeName"] = json!("node-q");
    assert_eq!(writes(&s.decide()), ["create pods"]);
}

#[test]
fn no_target_pod_while_pod_creations_are_unobserved() {
    let mut s = Scene::new("Pending");
    s.pending_anywhere = 1;
    let d = s.decide();
    assert!(writes(&d).is_empty());
    assert_eq!(d.plan.queue.after_seconds(), Some(1));
}

#[test]
fn nothing_is_synced_while_this_keys_expectations_are_outstanding() {
    let mut s = Scene::new("Pending");
    s.expectations.creations = 1;
    assert!(writes(&s.decide()).is_empty());
}

// --- the target pod's CPU selectors and the configuration ------------------------------------

#[test]
fn a_host_model_target_needs_the_source_host_model_and_its_required_features() {
    let mut s = Scene::new("Pending");
    s.vmi()["spec"]["domain"]["cpu"] = json!({"model": "host-model"});
    s.nodes[0].metadata.labels.as_mut().unwrap().extend([
        (
            "host-model-cpu.node.kubevirt.io/Skylake".to_string(),
            "true".to_string(),
        ),
        (
            "host-model-required-features.node.kubevirt.io/vmx".to_string(),
            "true".to_string(),
        ),
    ]);
    let d = s.decide();
    let sel = &d.plan.created("pods").unwrap()["spec"]["nodeSelector"];
    assert_eq!(sel["cpu-model-migration.node.kubevirt.io/Skylake"], "true");
    assert_eq!(sel["cpu-feature.node.kubevirt.io/vmx"], "true");
    // A source node without a host model label: no target pod, KubeVirt's error.
    let mut s = Scene::new("Pending");
    s.vmi()["spec"]["domain"]["cpu"] = json!({"model": "host-model"});
    assert!(
        s.decide()
            .plan
            .error_message()
            .unwrap()
            .starts_with("unable to locate host cpu model")
    );
}

#[test]
fn a_source_node_missing_from_the_cache_blocks_the_target_pod() {
    let mut s = Scene::new("Pending");
    s.nodes.clear();
    let d = s.decide();
    assert!(d.plan.created("pods").is_none());
    assert_eq!(
        d.plan.error_message(),
        Some("node \"node-a\" associated with vmi \"vmi1\" does not exist")
    );
    assert_eq!(
        d.plan.error.as_ref().map(DecideError::label),
        Some("launcher_render")
    );
}

#[test]
fn the_migration_configuration_overlays_the_cr_on_kubevirts_defaults() {
    let c = MigrationConfig::default();
    assert_eq!(c.parallel_per_cluster(), 5);
    assert_eq!(c.parallel_outbound_per_node(), 2);
    assert!(c.match_selinux_level());
    assert_eq!(c.options["allowWorkloadDisruption"], false);
    let c =
        MigrationConfig::from_kubevirt(Some(&json!({"spec": {"configuration": {"migrations": {
        "parallelOutboundMigrationsPerNode": 4, "allowPostCopy": true,
        "matchSELinuxLevelOnMigration": false, "bandwidthPerMigration": null}}}})));
    assert_eq!(c.parallel_outbound_per_node(), 4);
    assert_eq!(
        c.options["allowWorkloadDisruption"], true,
        "follows allowPostCopy"
    );
    assert_eq!(c.options["bandwidthPerMigration"], "0", "null sets nothing");
    assert!(!c.match_selinux_level());
}

/// KubeVirt holds `bandwidthPerMigration` as a Go `resource.Quantity`, so the configuration it
/// hands to virt-handler carries the canonical text (tests/migration_oracle.rs found the
/// default written as "0", not "0Mi"): from the CR and from a MigrationPolicy alike.
#[test]
fn the_bandwidth_is_written_as_go_writes_the_quantity() {
    let c = MigrationConfig::from_migrations(Some(&json!({"bandwidthPerMigration": "1024Mi"})));
    assert_eq!(c.options["bandwidthPerMigration"], "1Gi");
    let c = MigrationConfig::from_migrations(Some(&json!({"bandwidthPerMigration": "64Mi"})));
    assert_eq!(c.options["bandwidthPerMigration"], "64Mi");
    let spec = json!({"bandwidthPerMigration": "2048Mi"});
    let out = super::policy::apply_policy(
        &MigrationConfig::default().options,
        spec.as_object().unwrap(),
    );
    assert_eq!(out["bandwidthPerMigration"], "2Gi");
    // Not a quantity: left for the CR's validation to refuse.
    let c = MigrationConfig::from_migrations(Some(&json!({"bandwidthPerMigration": "fast"})));
    assert_eq!(c.options["bandwidthPerMigration"], "fast");
}

#[test]
fn phases_only_move_forward() {
    use MigrationPhase::*;
    assert!(Pending.may_become(Scheduling) && Running.may_become(Failed));
    assert!(!Failed.may_become(Succeeded) && !Succeeded.may_become(Failed));
    assert!(!Scheduled.may_become(Pending));
    for p in [
        Pending,
        Scheduling,
        Scheduled,
        PreparingTarget,
        TargetReady,
        Running,
        Succeeded,
        Failed,
    ] {
        assert_eq!(MigrationPhase::parse(p.as_str()), p);
    }
}
