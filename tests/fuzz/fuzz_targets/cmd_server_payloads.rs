//! The request messages the launcher's cmd server decodes (`kubevirt.cmd.v1` and
//! `kubevirt.cmd.info`), then the VMI JSON inside them as the server's `decode_vmi` reads it.
//! Input: one byte choosing the message type, then the protobuf bytes. Asserts: no panic; a
//! decoded message re-encodes to the same message; a VMI that parses writes back to JSON that
//! parses to the same document.
#![no_main]

use std::fmt::Debug;

use kvrs_api::VirtualMachineInstance;
use kvrs_ipc::proto::cmd::info::CmdInfoRequest;
use kvrs_ipc::proto::cmd::v1::{
    BackupRequest, EmptyRequest, ExecRequest, FreezeRequest, GuestPingRequest,
    InjectLaunchSecretRequest, MemoryDumpRequest, MigrationRequest, RedefineCheckpointRequest,
    VmStatsRequest, Vmi, VmiRequest,
};
use libfuzzer_sys::fuzz_target;
use prost::Message;

/// Decodes `bytes` as `M`; a decoded message must survive encode + decode unchanged.
fn decode<M: Message + Default + PartialEq + Debug>(bytes: &[u8]) -> Option<M> {
    let message = M::decode(bytes).ok()?;
    match M::decode(message.encode_to_vec().as_slice()) {
        Ok(again) if again == message => {}
        Ok(again) => panic!("protobuf round trip changed {message:?} into {again:?}"),
        Err(e) => panic!("re-encoded {message:?} does not decode: {e}"),
    }
    Some(message)
}

/// The server's `decode_vmi`, then: what parsed writes back to JSON that parses again into the
/// same document.
fn check_vmi(vmi: Option<Vmi>) {
    let json = vmi.map(|v| v.vmi_json).unwrap_or_default();
    let Ok(parsed) = serde_json::from_slice::<VirtualMachineInstance>(&json) else {
        return;
    };
    let written = match serde_json::to_vec(&parsed) {
        Ok(w) => w,
        Err(e) => panic!("a decoded VMI does not serialize: {e}"),
    };
    let again = match serde_json::from_slice::<VirtualMachineInstance>(&written) {
        Ok(a) => a,
        Err(e) => panic!("a VMI written by kvrs does not parse back: {e}"),
    };
    let (first, second) = (
        serde_json::to_value(&parsed).ok(),
        serde_json::to_value(&again).ok(),
    );
    if first != second {
        panic!("VMI JSON round trip is not idempotent: {first:?} != {second:?}");
    }
}

fuzz_target!(
    init: {
        kvrs_fuzz::seeds::write_if_asked(seeds);
    },
    |data: &[u8]| {
        let Some((&kind, bytes)) = data.split_first() else {
            return;
        };
        match kind % 12 {
            0 => {
                if let Some(r) = decode::<VmiRequest>(bytes) {
                    check_vmi(r.vmi);
                }
            }
            1 => {
                if let Some(r) = decode::<FreezeRequest>(bytes) {
                    check_vmi(r.vmi);
                }
            }
            2 => {
                if let Some(r) = decode::<MigrationRequest>(bytes) {
                    check_vmi(r.vmi);
                }
            }
            3 => {
                if let Some(r) = decode::<MemoryDumpRequest>(bytes) {
                    check_vmi(r.vmi);
                }
            }
            4 => {
                if let Some(r) = decode::<InjectLaunchSecretRequest>(bytes) {
                    check_vmi(r.vmi);
                }
            }
            5 => {
                if let Some(r) = decode::<BackupRequest>(bytes) {
                    check_vmi(r.vmi);
                }
            }
            6 => {
                if let Some(r) = decode::<RedefineCheckpointRequest>(bytes) {
                    check_vmi(r.vmi);
                }
            }
            7 => {
                decode::<ExecRequest>(bytes);
            }
            8 => {
                decode::<GuestPingRequest>(bytes);
            }
            9 => {
                decode::<VmStatsRequest>(bytes);
            }
            10 => {
                decode::<EmptyRequest>(bytes);
            }
            _ => {
                decode::<CmdInfoRequest>(bytes);
            }
        }
    }
);

/// Every oracle VMI as a `SyncVirtualMachine` request (with options) and as each other request
/// that carries a VMI, plus one of each VMI-less request.
fn seeds() -> Vec<Vec<u8>> {
    use kvrs_ipc::proto::cmd::v1::VirtualMachineOptions;
    let framed = |kind: u8, message: &dyn Fn() -> Vec<u8>| {
        let mut seed = vec![kind];
        seed.extend(message());
        seed
    };
    let mut out = Vec::new();
    for (i, json) in kvrs_fuzz::seeds::oracle_files(".vmi.json")
        .into_iter()
        .enumerate()
    {
        let vmi = Some(Vmi { vmi_json: json });
        let options = VirtualMachineOptions {
            mem_balloon_stats_period: 10,
            preallocated_volumes: vec!["disk0".into()],
            ..VirtualMachineOptions::default()
        };
        out.push(framed(0, &|| {
            VmiRequest {
                vmi: vmi.clone(),
                options: Some(options.clone()),
            }
            .encode_to_vec()
        }));
        // The other VMI-carrying requests, round-robin over the corpus.
        let other = match i % 6 {
            0 => FreezeRequest {
                vmi: vmi.clone(),
                unfreeze_timeout_seconds: 30,
            }
            .encode_to_vec(),
            1 => MigrationRequest {
                vmi: vmi.clone(),
                options: b"{}".to_vec(),
            }
            .encode_to_vec(),
            2 => MemoryDumpRequest {
                vmi: vmi.clone(),
                dump_path: "/dump".into(),
            }
            .encode_to_vec(),
            3 => InjectLaunchSecretRequest {
                vmi: vmi.clone(),
                options: b"{}".to_vec(),
            }
            .encode_to_vec(),
            4 => BackupRequest {
                vmi: vmi.clone(),
                options: b"{}".to_vec(),
            }
            .encode_to_vec(),
            _ => RedefineCheckpointRequest {
                vmi: vmi.clone(),
                checkpoint: b"{}".to_vec(),
            }
            .encode_to_vec(),
        };
        out.push(framed(1 + u8::try_from(i % 6).unwrap_or(0), &|| {
            other.clone()
        }));
    }
    out.push(framed(7, &|| {
        ExecRequest {
            domain_name: "default_vm".into(),
            command: "uname".into(),
            args: vec!["-a".into()],
            timeout_seconds: 5,
        }
        .encode_to_vec()
    }));
    out.push(framed(8, &|| {
        GuestPingRequest {
            domain_name: "default_vm".into(),
            timeout_seconds: 5,
        }
        .encode_to_vec()
    }));
    out.push(framed(9, &|| {
        VmStatsRequest {
            domain_stats: Some(Default::default()),
            ..Default::default()
        }
        .encode_to_vec()
    }));
    out.push(vec![10]);
    out.push(vec![11]);
    out
}
