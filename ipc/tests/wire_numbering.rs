//! Raw protobuf bytes written by hand from KubeVirt's field numbers: decoding them, encoding our
//! messages to the same bytes, and sending them over a real socket under the exact gRPC method
//! paths a Go peer uses. If a field number or a method name drifted, these bytes would say so.

use std::sync::{Arc, Mutex};

use bytes::{Buf, BufMut};
use kvrs_ipc::proto::cmd::v1::{
    ClusterConfig, DiskInfo, Response, VirtualMachineOptions, Vmi, VmiRequest,
};
use kvrs_ipc::proto::notify::v1::{DomainEventRequest, Response as NotifyResponse};
use kvrs_ipc::{
    CmdResult, DomainEvent, NotifyService, ServeOptions, VmiCommand, serve_launcher, serve_notify,
};
use prost::Message;

/// A length-delimited field: key (number << 3 | 2), length, payload (all lengths < 128 here).
fn ld(number: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 128);
    let len = u8::try_from(payload.len()).expect("short payload");
    let mut out = vec![(number << 3) | 2, len];
    out.extend_from_slice(payload);
    out
}

/// A varint field with a value < 128: key (number << 3 | 0), value.
fn varint(number: u8, value: u8) -> Vec<u8> {
    vec![number << 3, value]
}

const VMI_JSON: &[u8] =
    br#"{"metadata":{"name":"wire","namespace":"default"},"spec":{"domain":{"devices":{}}}}"#;

/// VMIRequest { vmi: VMI { vmiJson = 1 } = 1, options: VirtualMachineOptions = 2 } with
/// MemBalloonStatsPeriod = 2, DisksInfo = 5 (map entry: key 1, value 2 -> DiskInfo { format 1,
/// actualSize 3 }), ExpandDisksEnabled = 6, clusterConfig = 7 { FreePageReportingDisabled = 2 },
/// pluginsJson = 10.
fn hand_encoded_vmi_request() -> Vec<u8> {
    let disk_info = [ld(1, b"qcow2"), varint(3, 100)].concat();
    let map_entry = [ld(1, b"disk0"), ld(2, &disk_info)].concat();
    let options = [
        varint(2, 10),
        ld(5, &map_entry),
        varint(6, 1),
        ld(7, &varint(2, 1)),
        ld(10, b"[]"),
    ]
    .concat();
    [ld(1, &ld(1, VMI_JSON)), ld(2, &options)].concat()
}

fn expected_vmi_request() -> VmiRequest {
    VmiRequest {
        vmi: Some(Vmi {
            vmi_json: VMI_JSON.to_vec(),
        }),
        options: Some(VirtualMachineOptions {
            mem_balloon_stats_period: 10,
            disks_info: [(
                "disk0".to_string(),
                DiskInfo {
                    format: "qcow2".into(),
                    actual_size: 100,
                    ..Default::default()
                },
            )]
            .into_iter()
            .collect(),
            expand_disks_enabled: true,
            cluster_config: Some(ClusterConfig {
                free_page_reporting_disabled: true,
                ..Default::default()
            }),
            plugins_json: b"[]".to_vec(),
            ..Default::default()
        }),
    }
}

/// DomainEventRequest { domainJSON = 1, statusJSON = 2, eventType = 3 }.
fn hand_encoded_domain_event() -> Vec<u8> {
    [
        ld(1, br#"{"kind":"Domain"}"#),
        ld(2, br#"{"code":500}"#),
        ld(3, b"MODIFIED"),
    ]
    .concat()
}

#[test]
fn vmi_request_numbering() {
    let bytes = hand_encoded_vmi_request();
    assert_eq!(
        VmiRequest::decode(&bytes[..]).unwrap(),
        expected_vmi_request()
    );
    assert_eq!(expected_vmi_request().encode_to_vec(), bytes);
}

#[test]
fn domain_event_request_numbering() {
    let bytes = hand_encoded_domain_event();
    let decoded = DomainEventRequest::decode(&bytes[..]).unwrap();
    assert_eq!(decoded.domain_json, br#"{"kind":"Domain"}"#);
    assert_eq!(decoded.status_json, br#"{"code":500}"#);
    assert_eq!(decoded.event_type, "MODIFIED");
    assert_eq!(decoded.encode_to_vec(), bytes);
}

#[test]
fn response_numbering_in_both_packages() {
    // Response { success = 1 (bool), message = 2 (string) }
    let bytes = [varint(1, 1), ld(2, b"done")].concat();
    let cmd = Response::decode(&bytes[..]).unwrap();
    assert!(cmd.success);
    assert_eq!(cmd.message, "done");
    let notify = NotifyResponse::decode(&bytes[..]).unwrap();
    assert!(notify.success);
    assert_eq!(notify.message, "done");
    assert_eq!(cmd.encode_to_vec(), bytes);
    // proto3: a false/empty response is the empty message.
    assert!(Response::default().encode_to_vec().is_empty());
}

/// A tonic codec that sends and receives raw bytes, so the test controls every byte on the wire.
#[derive(Default, Clone)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let bytes = src.copy_to_bytes(src.remaining()).to_vec();
        Ok(Some(bytes))
    }
}

async fn raw_call(socket: &std::path::Path, method: &'static str, body: Vec<u8>) -> Vec<u8> {
    let channel = kvrs_ipc::transport::dial(socket, std::time::Duration::from_secs(2))
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
    grpc.unary(tonic::Request::new(body), path, RawCodec)
        .await
        .unwrap()
        .into_inner()
}

#[derive(Default)]
struct Capture {
    sync: Mutex<Option<VmiCommand>>,
    event: Mutex<Option<DomainEvent>>,
}

#[tonic::async_trait]
impl kvrs_ipc::LauncherService for Capture {
    async fn sync_vmi(&self, cmd: VmiCommand) -> CmdResult {
        *self.sync.lock().unwrap() = Some(cmd);
        Ok(())
    }
}

#[tonic::async_trait]
impl NotifyService for Capture {
    async fn handle_domain_event(&self, event: DomainEvent) -> CmdResult {
        *self.event.lock().unwrap() = Some(event);
        Ok(())
    }
}

#[tokio::test]
async fn hand_encoded_requests_over_the_socket_under_kubevirts_method_paths() {
    let dir = tempfile::tempdir().unwrap();
    let capture = Arc::new(Capture::default());

    let launcher = dir.path().join("launcher-sock");
    let _l = serve_launcher(&launcher, capture.clone(), ServeOptions::default())
        .await
        .unwrap();
    let answer = raw_call(
        &launcher,
        "/kubevirt.cmd.v1.Cmd/SyncVirtualMachine",
        hand_encoded_vmi_request(),
    )
    .await;
    assert_eq!(
        answer,
        varint(1, 1),
        "Response {{ success: true }} is exactly 08 01"
    );
    let seen = capture.sync.lock().unwrap().take().unwrap();
    assert_eq!(seen.vmi.metadata.name.as_deref(), Some("wire"));
    assert_eq!(Some(seen.options), expected_vmi_request().options);

    // CmdInfo.Info: empty request, CmdInfoResponse { supportedCmdVersions = 1 (packed) } = [1].
    let info = raw_call(&launcher, "/kubevirt.cmd.info.CmdInfo/Info", Vec::new()).await;
    assert_eq!(info, ld(1, &[1]));

    let notify = dir.path().join("domain-notify.sock");
    let _n = serve_notify(&notify, capture.clone(), ServeOptions::default())
        .await
        .unwrap();
    let answer = raw_call(
        &notify,
        "/kubevirt.notify.v1.Notify/HandleDomainEvent",
        hand_encoded_domain_event(),
    )
    .await;
    assert_eq!(answer, varint(1, 1));
    let event = capture.event.lock().unwrap().take().unwrap();
    assert_eq!(event.event_type, "MODIFIED");
    assert_eq!(event.status_json, br#"{"code":500}"#);
    let info = raw_call(&notify, "/kubevirt.notify.info.NotifyInfo/Info", Vec::new()).await;
    assert_eq!(info, ld(1, &[1]));
}

/// KubeVirt v1.9.0's 36 Cmd method names, in its service order.
const CMD_METHODS: [&str; 36] = [
    "SyncVirtualMachine",
    "PauseVirtualMachine",
    "UnpauseVirtualMachine",
    "FreezeVirtualMachine",
    "UnfreezeVirtualMachine",
    "ResetVirtualMachine",
    "SoftRebootVirtualMachine",
    "ShutdownVirtualMachine",
    "KillVirtualMachine",
    "DeleteVirtualMachine",
    "MigrateVirtualMachine",
    "SyncMigrationTarget",
    "CancelVirtualMachineMigration",
    "SignalTargetPodCleanup",
    "FinalizeVirtualMachineMigration",
    "HotplugHostDevices",
    "GetDomain",
    "GetDomainStats",
    "GetGuestInfo",
    "GetUsers",
    "GetFilesystems",
    "Ping",
    "Exec",
    "GuestPing",
    "VirtualMachineMemoryDump",
    "GetQemuVersion",
    "SyncVirtualMachineCPUs",
    "SyncVirtualMachineMemory",
    "GetSEVInfo",
    "GetLaunchMeasurement",
    "InjectLaunchSecret",
    "GetDomainDirtyRateStats",
    "GetScreenshot",
    "BackupVirtualMachine",
    "RedefineCheckpoint",
    "GetVMStats",
];

#[tokio::test]
async fn every_kubevirt_method_path_reaches_the_service() {
    // An empty body under each path: a path the router does not know would be answered
    // `Unimplemented` with an empty message; ours reach the adapter, which either answers
    // (Ping; or success=false for a missing VMI) or says which RPC this launcher lacks.
    struct Nothing;
    impl kvrs_ipc::LauncherService for Nothing {}
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("launcher-sock");
    let _l = serve_launcher(&socket, Arc::new(Nothing), ServeOptions::default())
        .await
        .unwrap();
    let channel = kvrs_ipc::transport::dial(&socket, std::time::Duration::from_secs(2))
        .await
        .unwrap();

    let mut answered = Vec::new();
    for method in CMD_METHODS {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.unwrap();
        let path: &'static str =
            Box::leak(format!("/kubevirt.cmd.v1.Cmd/{method}").into_boxed_str());
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
        match grpc
            .unary(tonic::Request::new(Vec::new()), path, RawCodec)
            .await
        {
            Ok(_) => answered.push(method),
            Err(status) => {
                assert_eq!(
                    status.code(),
                    tonic::Code::Unimplemented,
                    "{method}: {status:?}"
                );
                assert!(
                    status
                        .message()
                        .ends_with("is not implemented by this launcher"),
                    "{method} did not reach the service: {status:?}"
                );
            }
        }
    }
    // Ping answers; the VMI-carrying requests answer success=false (no VMI in an empty body).
    assert!(answered.contains(&"Ping"));
    assert_eq!(answered.len(), 1 + 24, "{answered:?}");

    // And a name KubeVirt does not have is refused by the router itself.
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path =
        tonic::codegen::http::uri::PathAndQuery::from_static("/kubevirt.cmd.v1.Cmd/NoSuchMethod");
    let status = grpc
        .unary(tonic::Request::new(Vec::new()), path, RawCodec)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unimplemented);
    assert!(status.message().is_empty(), "{status:?}");
}
