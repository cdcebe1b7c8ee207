//! The hook sidecars' messages against raw protobuf bytes written by hand from KubeVirt's field
//! numbers (`kubevirt.hooks.info`, `kubevirt.hooks.v1alpha1..3`): if a number drifted, a Go
//! sidecar would read garbage. The method paths are exercised against KubeVirt's own sidecar in
//! the launcher's tests (bins/virt-launcher/src/hooks/tests_kubevirt.rs).

use kvrs_ipc::proto::hooks::{info, v1alpha1, v1alpha2, v1alpha3};
use prost::Message;

/// A length-delimited field (payload < 128 bytes).
fn ld(number: u8, payload: &[u8]) -> Vec<u8> {
    let len = u8::try_from(payload.len()).expect("short payload");
    assert!(len < 128);
    let mut out = vec![(number << 3) | 2, len];
    out.extend_from_slice(payload);
    out
}

#[test]
fn info_result_uses_kubevirts_numbers() {
    // InfoResult { name = 1, hookPoints = 3 { name = 1, priority = 2 }, versions = 4 }
    let point = [ld(1, b"OnDefineDomain"), vec![2 << 3, 7]].concat();
    let bytes = [ld(1, b"shim"), ld(3, &point), ld(4, b"v1alpha3")].concat();
    let decoded = info::InfoResult::decode(bytes.as_slice()).unwrap();
    assert_eq!(
        decoded,
        info::InfoResult {
            name: "shim".into(),
            hook_points: vec![info::HookPoint {
                name: "OnDefineDomain".into(),
                priority: 7
            }],
            versions: vec!["v1alpha3".into()],
        }
    );
    assert_eq!(decoded.encode_to_vec(), bytes);
}

#[test]
fn on_define_domain_uses_kubevirts_numbers_in_every_version() {
    // OnDefineDomainParams { domainXML = 1, vmi = 2 }; OnDefineDomainResult { domainXML = 1 }
    let params = [ld(1, b"<domain/>"), ld(2, b"{}")].concat();
    let result = ld(1, b"<domain/>");
    let p1 = v1alpha1::OnDefineDomainParams::decode(params.as_slice()).unwrap();
    let p2 = v1alpha2::OnDefineDomainParams::decode(params.as_slice()).unwrap();
    let p3 = v1alpha3::OnDefineDomainParams::decode(params.as_slice()).unwrap();
    for (xml, vmi) in [
        (&p1.domain_xml, &p1.vmi),
        (&p2.domain_xml, &p2.vmi),
        (&p3.domain_xml, &p3.vmi),
    ] {
        assert_eq!(
            (xml.as_slice(), vmi.as_slice()),
            (&b"<domain/>"[..], &b"{}"[..])
        );
    }
    assert_eq!(p3.encode_to_vec(), params);
    let r = v1alpha3::OnDefineDomainResult::decode(result.as_slice()).unwrap();
    assert_eq!(r.domain_xml, b"<domain/>");
    assert_eq!(
        v1alpha1::OnDefineDomainResult {
            domain_xml: r.domain_xml
        }
        .encode_to_vec(),
        result
    );
}

#[test]
fn pre_cloud_init_iso_uses_kubevirts_numbers() {
    // PreCloudInitIsoParams { cloudInitNoCloudSource = 1, vmi = 2, cloudInitData = 3 }
    let params = [ld(1, b"nc"), ld(2, b"vmi"), ld(3, b"data")].concat();
    let p = v1alpha2::PreCloudInitIsoParams::decode(params.as_slice()).unwrap();
    assert_eq!(
        (
            p.cloud_init_no_cloud_source.as_slice(),
            p.vmi.as_slice(),
            p.cloud_init_data.as_slice()
        ),
        (&b"nc"[..], &b"vmi"[..], &b"data"[..])
    );
    assert_eq!(
        v1alpha3::PreCloudInitIsoParams {
            cloud_init_no_cloud_source: p.cloud_init_no_cloud_source,
            vmi: p.vmi,
            cloud_init_data: p.cloud_init_data,
        }
        .encode_to_vec(),
        params
    );
    // PreCloudInitIsoResult { cloudInitNoCloudSource = 1, cloudInitData = 3 }
    let result = [ld(1, b"nc"), ld(3, b"data")].concat();
    let r = v1alpha3::PreCloudInitIsoResult::decode(result.as_slice()).unwrap();
    assert_eq!(r.cloud_init_data, b"data");
    assert_eq!(r.cloud_init_no_cloud_source, b"nc");
    assert_eq!(r.encode_to_vec(), result);
}
