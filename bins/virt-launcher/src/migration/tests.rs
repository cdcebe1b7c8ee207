//! The plain decisions of a migration against KubeVirt v1.9.0's choices.

use std::path::Path;

use super::*;

fn vmi(extra_status: serde_json::Value) -> VirtualMachineInstance {
    let mut status = serde_json::json!({
        "migrationState": {"migrationUid": "mig-1", "sourceState": {"migrationUID": "mig-src"}}
    });
    if let (Some(s), Some(e)) = (status.as_object_mut(), extra_status.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "vm", "namespace": "ns", "uid": "uid-1"},
        "spec": {
            "domain": {"devices": {}, "resources": {"requests": {"memory": "1536Mi"}}},
            "volumes": [
                {"name": "root", "containerDisk": {"image": "x"}},
                {"name": "ci", "cloudInitNoCloud": {"userData": "x"}},
                {"name": "pvc", "persistentVolumeClaim": {"claimName": "c"}},
                {"name": "moved", "persistentVolumeClaim": {"claimName": "d"}}
            ]
        },
        "status": status
    }))
    .unwrap()
}

fn disk(alias: &str, device: &str, kind: &str, target: &str, ro: bool) -> DiskFacts {
    DiskFacts {
        alias: alias.into(),
        device: device.into(),
        kind: kind.into(),
        target: target.into(),
        read_only: ro,
    }
}

#[test]
fn options_parse_from_handler_json_and_bad_fields_are_named() {
    let o = MigrationOptions::parse(
        br#"{"Bandwidth":"64Mi","ProgressTimeout":150,"CompletionTimeoutPerGiB":800,"MaxDowntimeMs":300,
            "UnsafeMigration":false,"AllowAutoConverge":true,"AllowPostCopy":false,
            "ParallelMigrationThreads":null,"AllowWorkloadDisruption":false,"StallDetectorOptions":null,"Compression":null}"#,
    )
    .unwrap();
    assert_eq!(o.bandwidth_mib().unwrap(), 64);
    assert_eq!(
        (o.progress_timeout, o.completion_timeout_per_gib),
        (150, 800)
    );
    assert!(o.allow_auto_converge);
    assert_eq!(
        MigrationOptions::parse(b"").unwrap(),
        MigrationOptions::default()
    );
    let err = MigrationOptions::parse(br#"{"ProgressTimeout":"soon"}"#).unwrap_err();
    assert!(matches!(err, MigrationError::Options(_)), "{err}");
    let bad = MigrationOptions {
        bandwidth: Some("-1Mi".into()),
        ..MigrationOptions::default()
    };
    assert_eq!(
        bad.bandwidth_mib().unwrap_err().to_string(),
        "migration options: Bandwidth \"-1Mi\" is not a non-negative quantity"
    );
    let small = MigrationOptions {
        bandwidth: Some("1Ki".into()),
        ..MigrationOptions::default()
    };
    assert_eq!(small.bandwidth_mib().unwrap(), 1);
}

#[test]
fn flags_follow_the_options() {
    let o = MigrationOptions::default();
    assert_eq!(
        migration_flags(false, false, &o),
        flag::LIVE | flag::PEER2PEER | flag::PERSIST_DEST
    );
    let all = MigrationOptions {
        unsafe_migration: true,
        allow_auto_converge: true,
        allow_post_copy: true,
        parallel_migration_threads: Some(4),
        compression: Some("zstd".into()),
        ..MigrationOptions::default()
    };
    let f = migration_flags(true, true, &all);
    for bit in [
        flag::NON_SHARED_INC,
        flag::UNSAFE,
        flag::AUTO_CONVERGE,
        flag::POSTCOPY,
        flag::PAUSED,
        flag::PARALLEL,
        flag::COMPRESSED,
    ] {
        assert_ne!(f & bit, 0, "{bit:#x}");
    }
    // An unknown compression method is no compression.
    let odd = MigrationOptions {
        compression: Some("lz4".into()),
        ..MigrationOptions::default()
    };
    assert_eq!(migration_flags(false, false, &odd) & flag::COMPRESSED, 0);
}

#[test]
fn sockets_and_uris_are_kubevirts() {
    let share = Path::new("/var/run/kubevirt");
    assert_eq!(
        destination_uri(share, "u1", true),
        "qemu+unix:///session?socket=/var/run/kubevirt/migrationproxy/u1-source.sock"
    );
    assert_eq!(
        destination_uri(share, "u1", false),
        "qemu+unix:///system?socket=/var/run/kubevirt/migrationproxy/u1-source.sock"
    );
    assert_eq!(
        source_socket(share, "u1", Some(DIRECT_MIGRATION_PORT)),
        Path::new("/var/run/kubevirt/migrationproxy/u1-49152-source.sock")
    );
}

#[test]
fn generated_and_local_disks_are_copied_shared_ones_not() {
    let v = vmi(serde_json::json!({"migratedVolumes": [{"volumeName": "moved"}]}));
    let disks = [
        disk("root", "disk", "file", "vda", false),
        disk("ci", "disk", "file", "vdb", true),
        disk("pvc", "disk", "file", "vdc", false),
        disk("moved", "disk", "block", "vdd", false),
        disk("cd", "cdrom", "file", "sda", true),
    ];
    assert_eq!(disks_to_copy(&v, &disks), vec!["vda", "vdb", "vdd"]);
    assert!(is_block_migration(&v));
}

#[test]
fn params_carry_uri_xml_name_bandwidth_and_disks() {
    let share = Path::new("/var/run/kubevirt");
    let input = ParamsInput {
        share_dir: share,
        vmi_uid: "u1",
        dest_name: "ns_vm".into(),
        xml: "<domain/>".into(),
        copy_disks: vec!["vda".into()],
    };
    let o = MigrationOptions {
        bandwidth: Some("32Mi".into()),
        parallel_migration_threads: Some(2),
        ..MigrationOptions::default()
    };
    let p = migration_params(&input, &o).unwrap();
    let get = |f: &str| -> Vec<WireValue> {
        p.iter()
            .filter(|x| x.field == f)
            .map(|x| x.value.clone())
            .collect()
    };
    assert_eq!(
        get("migrate_uri"),
        vec![WireValue::String(
            "unix:///var/run/kubevirt/migrationproxy/u1-49152-source.sock".into()
        )]
    );
    assert_eq!(
        get("disks_uri"),
        vec![WireValue::String(
            "unix:///var/run/kubevirt/migrationproxy/u1-49153-source.sock".into()
        )]
    );
    assert_eq!(get("bandwidth"), vec![WireValue::ULLong(32)]);
    assert_eq!(get("parallel.connections"), vec![WireValue::Int(2)]);
    assert_eq!(
        get("destination_name"),
        vec![WireValue::String("ns_vm".into())]
    );
    assert_eq!(get("persistent_xml"), get("destination_xml"));
    assert_eq!(get("migrate_disks"), vec![WireValue::String("vda".into())]);
    let none = ParamsInput {
        copy_disks: vec![],
        ..input
    };
    let p = migration_params(&none, &MigrationOptions::default()).unwrap();
    assert!(
        p.iter()
            .all(|x| x.field != "bandwidth" && x.field != "disks_uri")
    );
}

#[test]
fn names_uids_and_data_size() {
    let v = vmi(serde_json::json!({}));
    assert_eq!(migration_uid(&v).as_deref(), Some("mig-src"));
    assert_eq!(destination_name(&v), "ns_vm");
    // 1536Mi = 1.61 GB, rounded up.
    assert_eq!(data_size_gb(&v, 5_000_000_000), 2);
    let block = vmi(serde_json::json!({"migrationMethod": "BlockMigration"}));
    assert_eq!(data_size_gb(&block, 5_000_000_000), 7);
    let t = vmi(serde_json::json!({"migrationState": {"migrationUid": "m",
        "targetState": {"domainName": "vm2", "domainNamespace": "ns2", "virtualMachineInstanceUID": "uid-2"}}}));
    assert_eq!(destination_name(&t), "ns2_vm2");
    assert_eq!(migration_uid(&t).as_deref(), Some("m"));
    assert_eq!(
        rewrite_for_target("<uid>uid-1</uid><p>/x/uid-1/y</p>", &t),
        "<uid>uid-2</uid><p>/x/uid-2/y</p>"
    );
    assert_eq!(
        rewrite_for_target("<uid>uid-1</uid>", &v),
        "<uid>uid-1</uid>"
    );
}

#[test]
fn metadata_runs_once_and_words_failures_like_kubevirt() {
    let m = initialize(None, "m1", "t0".into()).unwrap().unwrap();
    assert_eq!(m.start_timestamp.as_deref(), Some("t0"));
    assert!(should_abort(&m));
    assert_eq!(initialize(Some(&m), "m1", "t1".into()).unwrap(), None);
    let mut done = m.clone();
    finish(
        &mut done,
        Some("operation aborted: migration out job: canceled by client"),
        "t2".into(),
    );
    assert!(done.failed);
    assert_eq!(
        done.failure_reason.as_deref(),
        Some("Live migration has been aborted")
    );
    assert!(!should_abort(&done));
    // A second result does not overwrite the first.
    finish(&mut done, None, "t3".into());
    assert_eq!(done.end_timestamp.as_deref(), Some("t2"));
    let err = initialize(Some(&done), "m1", "t4".into()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("migration job m1 already executed, finished at t2, failed: true")
    );
    // Another migration UID starts afresh.
    assert!(
        initialize(Some(&done), "m2", "t5".into())
            .unwrap()
            .is_some()
    );
    let mut aborting = m;
    aborting.abort_status = Some("Aborting".into());
    assert!(!should_abort(&aborting));
}
