//! The few fields of an X.509 certificate the rotation reads back from its Secret — validity,
//! issuer, subject and the subject's common name — from the DER, without a certificate parser
//! crate. Only what RFC 5280 fixes at the top of `TBSCertificate` is walked; anything malformed
//! is an error (the certificates are then replaced), never a panic.

/// What the rotation needs to know about a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// `notBefore`, seconds since the epoch.
    pub not_before: i64,
    /// `notAfter`, seconds since the epoch.
    pub not_after: i64,
    /// The issuer `Name`, as encoded.
    pub issuer: Vec<u8>,
    /// The subject `Name`, as encoded.
    pub subject: Vec<u8>,
    /// The subject's first common name (UTF8String or PrintableString).
    pub common_name: Option<String>,
}

/// Why a DER certificate could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed certificate: {0}")]
pub struct DerError(&'static str);

/// One TLV: its tag, its content, and the whole encoding.
struct Tlv<'a> {
    tag: u8,
    content: &'a [u8],
    raw: &'a [u8],
}

/// Reads the TLV at the start of `input`; returns it and what follows.
fn tlv(input: &[u8]) -> Result<(Tlv<'_>, &[u8]), DerError> {
    let (&tag, rest) = input.split_first().ok_or(DerError("truncated tag"))?;
    let (&first, rest) = rest.split_first().ok_or(DerError("truncated length"))?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(DerError("bad length"));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(DerError("content past the end"));
    }
    let header = input.len() - rest.len();
    Ok((
        Tlv {
            tag,
            content: &rest[..len],
            raw: &input[..header + len],
        },
        &rest[len..],
    ))
}

fn expect<'a>(
    input: &'a [u8],
    tag: u8,
    what: &'static str,
) -> Result<(Tlv<'a>, &'a [u8]), DerError> {
    let (t, rest) = tlv(input)?;
    if t.tag != tag {
        return Err(DerError(what));
    }
    Ok((t, rest))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
/// 2.5.4.3 (commonName).
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];

/// Reads `der` (one certificate).
pub fn read_certificate(der: &[u8]) -> Result<CertInfo, DerError> {
    let (cert, _) = expect(der, SEQUENCE, "not a SEQUENCE")?;
    let (tbs, _) = expect(cert.content, SEQUENCE, "no TBSCertificate")?;
    let mut rest = tbs.content;
    let (first, after) = tlv(rest)?;
    if first.tag == 0xa0 {
        rest = after; // [0] version
    }
    let (_serial, rest) = expect(rest, 0x02, "no serial number")?;
    let (_algorithm, rest) = expect(rest, SEQUENCE, "no signature algorithm")?;
    let (issuer, rest) = expect(rest, SEQUENCE, "no issuer")?;
    let (validity, rest) = expect(rest, SEQUENCE, "no validity")?;
    let (subject, _) = expect(rest, SEQUENCE, "no subject")?;
    let (not_before, after) = tlv(validity.content)?;
    let (not_after, _) = tlv(after)?;
    Ok(CertInfo {
        not_before: time_of(&not_before)?,
        not_after: time_of(&not_after)?,
        issuer: issuer.raw.to_vec(),
        subject: subject.raw.to_vec(),
        common_name: common_name(subject.content)?,
    })
}

/// The first CN of a `Name`'s RDN sequence.
fn common_name(mut rdns: &[u8]) -> Result<Option<String>, DerError> {
    while !rdns.is_empty() {
        let (set, rest) = expect(rdns, SET, "an RDN is not a SET")?;
        rdns = rest;
        let mut attrs = set.content;
        while !attrs.is_empty() {
            let (attr, rest) = expect(attrs, SEQUENCE, "an attribute is not a SEQUENCE")?;
            attrs = rest;
            let (oid, value) = expect(attr.content, 0x06, "no attribute type")?;
            if oid.content == CN_OID {
                let (value, _) = tlv(value)?;
                return Ok(String::from_utf8(value.content.to_vec()).ok());
            }
        }
    }
    Ok(None)
}

fn digits(s: &[u8]) -> Result<i64, DerError> {
    s.iter().try_fold(0i64, |acc, b| {
        if b.is_ascii_digit() {
            Ok(acc * 10 + i64::from(b - b'0'))
        } else {
            Err(DerError("a time is not digits"))
        }
    })
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn time_of(t: &Tlv<'_>) -> Result<i64, DerError> {
    let s = t.content;
    let (year, rest) = match (t.tag, s.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(&s[..2])?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &s[2..])
        }
        (GENERALIZED_TIME, 15) => (digits(&s[..4])?, &s[4..]),
        _ => return Err(DerError("unsupported time")),
    };
    if rest[10] != b'Z' {
        return Err(DerError("a time is not in UTC"));
    }
    let field = |i: usize| digits(&rest[i..i + 2]);
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return Err(DerError("a time is out of range"));
    }
    Ok(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second.min(60))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The DER blocks of `label` (`CERTIFICATE`, `PRIVATE KEY`) in a PEM text, in order.
pub fn pem_blocks(pem: &str, label: &str) -> Vec<Vec<u8>> {
    use base64::Engine;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(&begin) {
        let body = &rest[start + begin.len()..];
        let Some(stop) = body.find(&end) else { break };
        let b64: String = body[..stop].split_whitespace().collect();
        if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64) {
            out.push(der);
        }
        rest = &body[stop + end.len()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days_match_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
    }

    #[test]
    fn reads_both_time_forms() {
        let utc = Tlv {
            tag: UTC_TIME,
            content: b"240229120000Z",
            raw: &[],
        };
        assert_eq!(time_of(&utc).unwrap(), 19_782 * 86_400 + 12 * 3600);
        let generalized = Tlv {
            tag: GENERALIZED_TIME,
            content: b"20500101000000Z",
            raw: &[],
        };
        assert_eq!(
            time_of(&generalized).unwrap(),
            days_from_civil(2050, 1, 1) * 86_400
        );
        let local = Tlv {
            tag: UTC_TIME,
            content: b"2402291200001",
            raw: &[],
        };
        assert!(time_of(&local).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for input in [
            &[][..],
            &[0x30],
            &[0x30, 0x85, 1, 2, 3, 4, 5],
            &[0x30, 0x05, 0x30, 0x03, 0x02],
            &[0x30, 0x82, 0xff, 0xff],
        ] {
            assert!(read_certificate(input).is_err(), "{input:?}");
        }
    }

    #[test]
    fn pem_blocks_are_found_in_order() {
        let pem = "junk\n-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n\
                   -----BEGIN CERTIFICATE-----\nBAU=\n-----END CERTIFICATE-----\n";
        assert_eq!(
            pem_blocks(pem, "CERTIFICATE"),
            vec![vec![1, 2, 3], vec![4, 5]]
        );
        assert!(pem_blocks(pem, "PRIVATE KEY").is_empty());
    }
}
