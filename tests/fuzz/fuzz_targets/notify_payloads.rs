//! The requests the handler's notify server decodes (`kubevirt.notify.v1`), then the domain JSON
//! inside a domain event, read as Go's `api.Domain` (`kvrs_converter::gojson`). Input: one byte choosing the message type,
//! then the protobuf bytes. Asserts: no panic; a domain that `gojson` reads writes back to JSON
//! it reads as the same domain.
#![no_main]

use kvrs_converter::gojson::{from_go_json_slice, to_go_json_vec};
use kvrs_ipc::proto::notify::info::NotifyInfoRequest;
use kvrs_ipc::proto::notify::v1::{DomainEventRequest, K8sEventRequest};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fn check_domain(json: &[u8]) {
    let Ok(domain) = from_go_json_slice(json) else {
        return;
    };
    let written = to_go_json_vec(&domain);
    match from_go_json_slice(&written) {
        Ok(again) if again == domain => {}
        Ok(again) => panic!("api.Domain JSON round trip changed {domain:?} into {again:?}"),
        Err(e) => panic!("api.Domain JSON written by kvrs does not read back: {e}"),
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
        match kind % 3 {
            0 => {
                if let Ok(event) = DomainEventRequest::decode(bytes) {
                    check_domain(&event.domain_json);
                    let _ = serde_json::from_slice::<serde_json::Value>(&event.status_json);
                }
            }
            1 => {
                if let Ok(event) = K8sEventRequest::decode(bytes) {
                    let _ = serde_json::from_slice::<serde_json::Value>(&event.event_json);
                }
            }
            _ => {
                let _ = NotifyInfoRequest::decode(bytes);
            }
        }
    }
);

/// Every oracle domain (`NAME.domain.json`, Go's `api.Domain` JSON) as an `ADDED`, `MODIFIED`
/// or `DELETED` event, plus a k8s event.
fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, json) in kvrs_fuzz::seeds::oracle_files(".domain.json")
        .into_iter()
        .enumerate()
    {
        let event = DomainEventRequest {
            domain_json: json,
            status_json: br#"{"status":"Running"}"#.to_vec(),
            event_type: ["ADDED", "MODIFIED", "DELETED"][i % 3].into(),
        };
        let mut seed = vec![0];
        seed.extend(event.encode_to_vec());
        out.push(seed);
    }
    let k8s = K8sEventRequest {
        event_json:
            br#"{"type":"Normal","reason":"Started","message":"VirtualMachineInstance started."}"#
                .to_vec(),
    };
    let mut seed = vec![1];
    seed.extend(k8s.encode_to_vec());
    out.push(seed);
    out.push(vec![2]);
    out
}
