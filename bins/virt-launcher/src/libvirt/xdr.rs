//! XDR (RFC 4506) encoding of the few types libvirt's remote protocol uses here: 32-bit ints,
//! 64-bit hypers, strings and fixed opaques padded to four bytes, optional values as a boolean
//! followed by the value.

use super::DomainRef;

/// Appends XDR values to a buffer.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn pad(&mut self, len: usize) {
        self.0.resize(self.0.len() + (4 - len % 4) % 4, 0);
    }
    pub fn string(&mut self, s: &str) -> &mut Self {
        // Longer strings cannot be sent: the call refuses messages over 32 MiB.
        self.u32(u32::try_from(s.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(s.as_bytes());
        self.pad(s.len());
        self
    }
    pub fn opt_string(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            Some(s) => self.u32(1).string(s),
            None => self.u32(0),
        }
    }
    /// `opaque<>`: a length, the bytes, padding.
    pub fn opaque(&mut self, b: &[u8]) -> &mut Self {
        self.u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(b);
        self.pad(b.len());
        self
    }
    /// `unsigned hyper`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// `remote_typed_param<>` as the caller sends it: libvirt checks each field's wire type
    /// against the one it expects, so the caller names the exact type ([`WireValue`]).
    pub fn typed_params(&mut self, params: &[WireParam]) -> &mut Self {
        self.u32(u32::try_from(params.len()).unwrap_or(u32::MAX));
        for p in params {
            self.string(&p.field);
            match &p.value {
                WireValue::Int(v) => self.i32(1).i32(*v),
                WireValue::ULLong(v) => self.i32(4).u64(*v),
                WireValue::String(v) => self.i32(7).string(v),
            };
        }
        self
    }
    /// `remote_nonnull_domain`: name, 16-byte UUID, id.
    pub fn domain(&mut self, d: &DomainRef) -> &mut Self {
        self.string(&d.name);
        self.0.extend_from_slice(&d.uuid);
        self.i32(d.id)
    }
}

/// Reads XDR values from a reply; every read checks bounds.
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// A reply shorter or stranger than the protocol allows.
#[derive(Debug, thiserror::Error)]
#[error("malformed libvirt reply at byte {0}")]
pub struct Malformed(pub usize);

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or(Malformed(self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn i32(&mut self) -> Result<i32, Malformed> {
        // XDR's int is the same 4 bytes read as two's complement.
        Ok(self.u32()?.cast_signed())
    }
    pub fn u64(&mut self) -> Result<u64, Malformed> {
        let hi = u64::from(self.u32()?);
        let lo = u64::from(self.u32()?);
        Ok(hi << 32 | lo)
    }
    pub fn string(&mut self) -> Result<String, Malformed> {
        let len = self.u32()? as usize;
        let at = self.pos;
        let bytes = self.take(len)?;
        self.take((4 - len % 4) % 4)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Malformed(at))
    }
    pub fn opt_string(&mut self) -> Result<Option<String>, Malformed> {
        Ok(if self.u32()? == 0 {
            None
        } else {
            Some(self.string()?)
        })
    }
    pub fn domain(&mut self) -> Result<DomainRef, Malformed> {
        let name = self.string()?;
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(self.take(16)?);
        let id = self.i32()?;
        Ok(DomainRef { name, uuid, id })
    }
    pub fn f64(&mut self) -> Result<f64, Malformed> {
        Ok(f64::from_bits(self.u64()?))
    }
    /// `remote_typed_param<>`: a count, then (field, type-tagged value) pairs. libvirt bounds
    /// the list (`REMOTE_DOMAIN_GUEST_INFO_PARAMS_MAX` is 2048); a longer count is malformed
    /// rather than an allocation.
    pub fn typed_params(&mut self) -> Result<Vec<TypedParam>, Malformed> {
        const MAX_PARAMS: u32 = 2048;
        let at = self.pos;
        let count = self.u32()?;
        if count > MAX_PARAMS {
            return Err(Malformed(at));
        }
        let mut out = Vec::new();
        for _ in 0..count {
            let field = self.string()?;
            let at = self.pos;
            let value = match self.i32()? {
                1 => TypedValue::Int(i64::from(self.i32()?)),
                2 => TypedValue::Uint(u64::from(self.u32()?)),
                3 => TypedValue::Int(self.u64()?.cast_signed()),
                4 => TypedValue::Uint(self.u64()?),
                5 => TypedValue::Double(self.f64()?),
                6 => TypedValue::Bool(self.i32()? != 0),
                7 => TypedValue::String(self.string()?),
                _ => return Err(Malformed(at)),
            };
            out.push(TypedParam { field, value });
        }
        Ok(out)
    }
}

/// One `virTypedParameter` (libvirt's name/value lists, e.g. `virDomainGetGuestInfo`'s).
#[derive(Debug, Clone, PartialEq)]
pub struct TypedParam {
    /// e.g. `os.name`, `if.0.addr.1.prefix`.
    pub field: String,
    /// The value; the wire's int widths are merged (the readers only need the number).
    pub value: TypedValue,
}

/// A typed parameter the launcher sends (`virTypedParameter` with its exact wire type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireParam {
    /// e.g. `migrate_uri`, `bandwidth`.
    pub field: String,
    /// The value with its wire type.
    pub value: WireValue,
}

/// The wire types the launcher sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireValue {
    /// `VIR_TYPED_PARAM_INT`.
    Int(i32),
    /// `VIR_TYPED_PARAM_ULLONG`.
    ULLong(u64),
    /// `VIR_TYPED_PARAM_STRING`.
    String(String),
}

/// A typed parameter's value.
#[derive(Debug, Clone, PartialEq)]
pub enum TypedValue {
    /// `VIR_TYPED_PARAM_INT` / `LLONG`.
    Int(i64),
    /// `VIR_TYPED_PARAM_UINT` / `ULLONG`.
    Uint(u64),
    /// `VIR_TYPED_PARAM_DOUBLE`.
    Double(f64),
    /// `VIR_TYPED_PARAM_BOOLEAN`.
    Bool(bool),
    /// `VIR_TYPED_PARAM_STRING`.
    String(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_pad_to_four_and_round_trip() {
        let mut e = Enc::default();
        e.string("abcde")
            .opt_string(None)
            .opt_string(Some("x"))
            .u32(7);
        assert_eq!(e.0.len(), 4 + 8 + 4 + 4 + 4 + 4 + 4);
        let mut d = Dec::new(&e.0);
        assert_eq!(d.string().unwrap(), "abcde");
        assert_eq!(d.opt_string().unwrap(), None);
        assert_eq!(d.opt_string().unwrap().as_deref(), Some("x"));
        assert_eq!(d.u32().unwrap(), 7);
        assert!(d.u32().is_err());
    }

    #[test]
    fn domains_and_hypers_round_trip() {
        let dom = DomainRef {
            name: "ns_vm".into(),
            uuid: [7; 16],
            id: -1,
        };
        let mut e = Enc::default();
        e.domain(&dom);
        e.0.extend_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        let mut d = Dec::new(&e.0);
        assert_eq!(d.domain().unwrap(), dom);
        assert_eq!(d.u64().unwrap(), 0x0102_0304_0506_0708);
    }

    #[test]
    fn typed_params_decode_every_type() {
        let mut e = Enc::default();
        e.u32(6);
        e.string("os.name").i32(7).string("Debian GNU/Linux");
        e.string("timezone.offset").i32(1).i32(-3600);
        e.string("if.0.addr.0.prefix").i32(2).u32(24);
        e.string("user.0.login-time").i32(4);
        e.0.extend_from_slice(&1_700_000_000_000u64.to_be_bytes());
        e.string("load.1m").i32(5);
        e.0.extend_from_slice(&0.5f64.to_bits().to_be_bytes());
        e.string("flag").i32(6).i32(1);
        let params = Dec::new(&e.0).typed_params().unwrap();
        let values: Vec<_> = params.iter().map(|p| p.value.clone()).collect();
        assert_eq!(
            values,
            vec![
                TypedValue::String("Debian GNU/Linux".into()),
                TypedValue::Int(-3600),
                TypedValue::Uint(24),
                TypedValue::Uint(1_700_000_000_000),
                TypedValue::Double(0.5),
                TypedValue::Bool(true),
            ]
        );
        assert_eq!(params[2].field, "if.0.addr.0.prefix");
    }

    #[test]
    fn typed_params_refuse_unknown_types_and_huge_counts() {
        let mut e = Enc::default();
        e.u32(1).string("x").i32(9).i32(0);
        assert!(Dec::new(&e.0).typed_params().is_err());
        let mut e = Enc::default();
        e.u32(u32::MAX);
        assert!(Dec::new(&e.0).typed_params().is_err());
    }

    #[test]
    fn sent_typed_params_decode_back() {
        let mut e = Enc::default();
        e.typed_params(&[
            WireParam {
                field: "parallel.connections".into(),
                value: WireValue::Int(4),
            },
            WireParam {
                field: "bandwidth".into(),
                value: WireValue::ULLong(64),
            },
            WireParam {
                field: "migrate_uri".into(),
                value: WireValue::String("unix:///x".into()),
            },
        ])
        .opaque(&[1, 2, 3]);
        let mut d = Dec::new(&e.0);
        let back = d.typed_params().unwrap();
        assert_eq!(back[0].value, TypedValue::Int(4));
        assert_eq!(back[1].value, TypedValue::Uint(64));
        assert_eq!(back[2].value, TypedValue::String("unix:///x".into()));
        assert_eq!(d.u32().unwrap(), 3);
        assert_eq!(d.u32().unwrap(), 0x0102_0300);
    }

    #[test]
    fn hostile_lengths_are_errors_not_panics() {
        let mut d = Dec::new(&[0xff, 0xff, 0xff, 0xff, 1]);
        assert!(d.string().is_err());
    }
}
