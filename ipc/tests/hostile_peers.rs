//! The cmd server survives peers that do not speak gRPC (issue 17: random bytes, broken
//! HTTP/2, a frame announcing gigabytes, a thousand connections at once, rapid stream resets):
//! after each, a well-behaved client still gets answers, and the server's memory does not follow
//! what a peer announces.

mod common;

use std::path::Path;
use std::time::Duration;

use common::RecordingLauncher;
use kvrs_ipc::layout::LAUNCHER_SOCKET;
use kvrs_ipc::{LauncherClient, ServeOptions, serve_launcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An HTTP/2 frame: 24-bit length, type, flags, 31-bit stream id, payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("small payload");
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A HEADERS frame opening `stream` as a gRPC call of `Ping` (HPACK literals, no indexing).
fn ping_headers(stream: u32) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/kubevirt.cmd.v1.Cmd/Ping"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.push(0x00); // literal without indexing, new name
        block.push(u8::try_from(name.len()).unwrap());
        block.extend_from_slice(name.as_bytes());
        block.push(u8::try_from(value.len()).unwrap());
        block.extend_from_slice(value.as_bytes());
    }
    frame(0x1, 0x4, stream, &block) // END_HEADERS
}

/// Sends `bytes`, reads whatever comes back for a moment, closes.
async fn poke(socket: &Path, bytes: &[u8]) {
    let Ok(mut s) = UnixStream::connect(socket).await else {
        return;
    };
    let _ = s.write_all(bytes).await;
    let mut buf = vec![0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await;
}

async fn answers(socket: &Path) {
    let client = tokio::time::timeout(Duration::from_secs(10), LauncherClient::connect(socket))
        .await
        .expect("connect in time")
        .expect("connect");
    tokio::time::timeout(Duration::from_secs(10), client.ping())
        .await
        .expect("ping in time")
        .expect("ping");
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_broken_http2_huge_frames_floods_and_resets_leave_the_server_answering() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(LAUNCHER_SOCKET);
    let _server = serve_launcher(&socket, RecordingLauncher::new(), ServeOptions::default())
        .await
        .expect("serve");
    answers(&socket).await;
    let rss_before = rss_kib();

    // Random bytes (a fixed xorshift stream), several sizes.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for len in [1usize, 7, 24, 100, 4096, 65_536] {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect();
        poke(&socket, &bytes).await;
    }
    answers(&socket).await;

    // A broken preface, then a valid preface followed by frames that make no sense.
    poke(&socket, b"PRI * HTTP/1.1\r\n\r\n").await;
    let mut broken = PREFACE.to_vec();
    broken.extend(frame(0x4, 0, 0, &[0xff; 5])); // SETTINGS with a ragged length
    broken.extend(frame(0x7, 0, 1, &[])); // GOAWAY on a stream
    broken.extend(frame(0xfe, 0xff, 0x7fff_ffff, &[1, 2, 3])); // unknown type
    poke(&socket, &broken).await;
    answers(&socket).await;

    // Frames announcing 16 MiB (the largest an HTTP/2 length says) and a gRPC message
    // announcing 4 GiB inside a DATA frame: refused, not allocated.
    let mut huge = PREFACE.to_vec();
    huge.extend(frame(0x4, 0, 0, &[]));
    huge.extend([0xff, 0xff, 0xff, 0x0, 0x0, 0, 0, 0, 1]); // DATA, length 2^24-1, no payload
    poke(&socket, &huge).await;
    let mut grpc = PREFACE.to_vec();
    grpc.extend(frame(0x4, 0, 0, &[]));
    grpc.extend(ping_headers(1));
    grpc.extend(frame(0x0, 0, 1, &[0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3]));
    poke(&socket, &grpc).await;
    answers(&socket).await;

    // A thousand connections at once, each left half-open.
    let mut conns = Vec::new();
    for _ in 0..1000 {
        if let Ok(c) = UnixStream::connect(&socket).await {
            conns.push(c);
        }
    }
    assert!(
        conns.len() >= 900,
        "only {} connections accepted",
        conns.len()
    );
    answers(&socket).await;
    drop(conns);

    // Rapid reset: open and cancel thousands of streams on one connection.
    let mut reset = PREFACE.to_vec();
    reset.extend(frame(0x4, 0, 0, &[]));
    for i in 0..5000u32 {
        let stream = 2 * i + 1;
        reset.extend(ping_headers(stream));
        reset.extend(frame(0x3, 0, stream, &8u32.to_be_bytes())); // RST_STREAM CANCEL
    }
    poke(&socket, &reset).await;
    answers(&socket).await;

    let grown = rss_kib().saturating_sub(rss_before);
    assert!(
        grown < 256 * 1024,
        "the server grew by {grown} KiB after the hostile peers"
    );
}
