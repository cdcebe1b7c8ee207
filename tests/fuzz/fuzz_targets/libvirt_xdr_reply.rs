//! The launcher's libvirt remote-protocol decoder (`bins/virt-launcher/src/libvirt/xdr.rs`,
//! included unchanged by path): the input chooses a sequence of `Dec` reads (u32, i32, u64,
//! string, opt_string, domain; a restart at byte 0) and supplies the reply bytes they read.
//! The launcher's own sequences (RPC header, `remote_error`, `DomainInfo`, state, lifecycle
//! event, define/lookup replies) are such sequences. Asserts: no panic, whatever the bytes; a
//! failed read leaves the decoder usable; every value read, encoded again with the launcher's
//! `Enc`, reads back the same.
//!
//! Input: byte 0 = number of reads N, bytes 1..=N = the reads (each byte modulo 7), the rest =
//! the reply.
#![no_main]

#[allow(dead_code, missing_docs)]
#[path = "../../../bins/virt-launcher/src/libvirt/xdr.rs"]
mod xdr;

use libfuzzer_sys::fuzz_target;
use xdr::{Dec, Enc};

/// The launcher's `libvirt::DomainRef`, which `xdr.rs` names as `super::DomainRef`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainRef {
    /// `<namespace>_<name>`.
    pub name: String,
    /// Raw UUID.
    pub uuid: [u8; 16],
    /// Runtime id.
    pub id: i32,
}

/// A value one read produced.
#[derive(Debug, PartialEq)]
enum Value {
    U32(u32),
    I32(i32),
    U64(u64),
    Str(String),
    OptStr(Option<String>),
    Domain(DomainRef),
}

/// Runs `op` on `dec`; `None` for a restart or a failed read.
fn read(dec: &mut Dec<'_>, op: u8) -> Option<Value> {
    Some(match op {
        0 => Value::U32(dec.u32().ok()?),
        1 => Value::I32(dec.i32().ok()?),
        2 => Value::U64(dec.u64().ok()?),
        3 => Value::Str(dec.string().ok()?),
        4 => Value::OptStr(dec.opt_string().ok()?),
        5 => Value::Domain(dec.domain().ok()?),
        _ => return None,
    })
}

fn encode(enc: &mut Enc, value: &Value) {
    match value {
        Value::U32(v) => {
            enc.u32(*v);
        }
        Value::I32(v) => {
            enc.i32(*v);
        }
        Value::U64(v) => {
            enc.u32(u32::try_from(v >> 32).unwrap_or(0))
                .u32(u32::try_from(v & 0xffff_ffff).unwrap_or(0));
        }
        Value::Str(s) => {
            enc.string(s);
        }
        Value::OptStr(s) => {
            enc.opt_string(s.as_deref());
        }
        Value::Domain(d) => {
            enc.domain(d);
        }
    }
}

/// The op of each read the launcher makes, for the value it produced (to read it back).
fn op_of(value: &Value) -> u8 {
    match value {
        Value::U32(_) => 0,
        Value::I32(_) => 1,
        Value::U64(_) => 2,
        Value::Str(_) => 3,
        Value::OptStr(_) => 4,
        Value::Domain(_) => 5,
    }
}

fuzz_target!(
    init: {
        kvrs_fuzz::seeds::write_if_asked(seeds);
    },
    |data: &[u8]| {
        let Some((&n, rest)) = data.split_first() else {
            return;
        };
        let n = usize::from(n).min(rest.len());
        let (ops, reply) = rest.split_at(n);
        let mut dec = Dec::new(reply);
        let mut values = Vec::new();
        for &op in ops {
            let op = op % 7;
            if op == 6 {
                dec = Dec::new(reply);
                continue;
            }
            // A failed read is an error the caller sees; reading on must still be safe.
            if let Some(v) = read(&mut dec, op) {
                values.push(v);
            }
        }
        let mut enc = Enc::default();
        for v in &values {
            encode(&mut enc, v);
        }
        let mut again = Dec::new(&enc.0);
        for v in &values {
            match read(&mut again, op_of(v)) {
                Some(ref w) if w == v => {}
                other => panic!("XDR round trip: {v:?} encoded by Enc reads back as {other:?}"),
            }
        }
    }
);

/// The launcher's reads over replies as libvirt sends them: the RPC header, each call's reply,
/// a lifecycle event, a `remote_error`; the domain XML reply carries each oracle domain XML.
fn seeds() -> Vec<Vec<u8>> {
    let dom = DomainRef {
        name: "kv-oracle_vm".into(),
        uuid: [7; 16],
        id: 1,
    };
    let seed = |ops: &[u8], enc: &Enc| {
        let mut s = vec![u8::try_from(ops.len()).unwrap_or(u8::MAX)];
        s.extend_from_slice(ops);
        s.extend_from_slice(&enc.0);
        s
    };
    let mut out = Vec::new();
    // RPC header (program, version, procedure, type, serial, status) + a GetVersion reply.
    let mut e = Enc::default();
    e.u32(0x2000_8086)
        .u32(1)
        .u32(4)
        .u32(1)
        .u32(2)
        .u32(0)
        .u32(0)
        .u32(9_002_000);
    out.push(seed(&[0, 0, 0, 0, 0, 0, 2], &e));
    // DefineXML / LookupByName reply.
    let mut e = Enc::default();
    e.domain(&dom);
    out.push(seed(&[5], &e));
    // GetState, GetInfo.
    let mut e = Enc::default();
    e.i32(1).i32(1);
    out.push(seed(&[1, 1], &e));
    let mut e = Enc::default();
    e.u32(1)
        .u32(0)
        .u32(1 << 20)
        .u32(0)
        .u32(1 << 20)
        .u32(2)
        .u32(0)
        .u32(123_456);
    out.push(seed(&[0, 2, 2, 0, 2], &e));
    // Lifecycle event message: header, then domain, event, detail.
    let mut e = Enc::default();
    e.u32(0x2000_8086).u32(1).u32(107).u32(2).u32(0).u32(0);
    e.domain(&dom).i32(2).i32(0);
    out.push(seed(&[0, 0, 0, 0, 0, 0, 5, 1, 1], &e));
    // remote_error: code, domain, message, level.
    let mut e = Enc::default();
    e.i32(42)
        .i32(10)
        .opt_string(Some("Domain not found"))
        .i32(2);
    out.push(seed(&[1, 1, 4, 1], &e));
    // GetXMLDesc / GetCapabilities replies: the oracle's domain XMLs as strings.
    for xml in kvrs_fuzz::seeds::oracle_files(".domain.xml")
        .into_iter()
        .take(10)
    {
        let mut e = Enc::default();
        e.string(&String::from_utf8_lossy(&xml));
        out.push(seed(&[3, 6, 4, 0], &e));
    }
    out
}
