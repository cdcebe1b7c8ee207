//! Kubernetes timestamps: second precision, `Z` suffix, as `metav1.Time` prints them.
//!
//! Two forms, for two kinds of caller: [`Timestamp`] values for code that already works with
//! `k8s-openapi`'s `jiff` time, and plain seconds since the epoch ([`format_rfc3339`],
//! [`parse_rfc3339`]) for the pure decisions, which take `now` as an integer so that a virtual
//! clock is just a number.

use k8s_openapi::jiff::Timestamp;

/// Formats `t` the way the API server stores a `metav1.Time` (whole seconds, UTC, `Z`).
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses an RFC 3339 timestamp; `None` when it is not one.
pub fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

/// The clock reading every kvrs decision runs at: whole seconds since the Unix epoch, the
/// precision Kubernetes stores timestamps in.
///
/// Decisions never read a clock; the shell reads one (or a simulator advances a virtual one)
/// and passes `Now` in. An integer is what makes a virtual clock trivial and a decision
/// reproducible from its inputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Now(i64);

impl Now {
    /// `now` from seconds since the epoch.
    pub const fn from_unix(seconds: i64) -> Self {
        Self(seconds)
    }

    /// Seconds since the epoch.
    pub const fn unix(self) -> i64 {
        self.0
    }

    /// Parses an RFC 3339 timestamp (fractions dropped, numeric offsets accepted).
    pub fn parse(s: &str) -> Option<Self> {
        parse_rfc3339(s).map(Self)
    }

    /// `YYYY-MM-DDTHH:MM:SSZ`.
    pub fn rfc3339(self) -> String {
        format_rfc3339(self.0)
    }

    /// The same instant as a `jiff` timestamp (for `metav1.Time` fields); instants outside
    /// jiff's range (years beyond ±9999) clamp to its bounds rather than fail.
    pub fn timestamp(self) -> Timestamp {
        Timestamp::from_second(self.0).unwrap_or(if self.0 < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        })
    }

    /// The whole seconds of a `jiff` timestamp.
    pub fn from_timestamp(t: Timestamp) -> Self {
        Self(t.as_second())
    }
}

/// Parses an RFC 3339 timestamp into seconds since the epoch (fractional seconds dropped).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        r if r.len() == 6 && (r.starts_with('+') || r.starts_with('-')) => {
            let oh: i64 = r.get(1..3)?.parse().ok()?;
            let om: i64 = r.get(4..6)?.parse().ok()?;
            let o = oh * 3600 + om * 60;
            if r.starts_with('+') { o } else { -o }
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset)
}

/// Formats seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86400);
    let secs = unix.rem_euclid(86400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (secs / 3600, (secs / 60) % 60, secs % 60);
    if !(0..=9999).contains(&y) {
        return format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z");
    }
    // Written digit by digit: status writes stamp several of these, and `format!` cost about
    // twenty times as much.
    let mut out = String::with_capacity(20);
    let mut push = |n: i64, width: u32, then: Option<char>| {
        for i in (0..width).rev() {
            let digit = u32::try_from((n / 10_i64.pow(i)) % 10).unwrap_or(0);
            out.push(char::from_digit(digit, 10).unwrap_or('0'));
        }
        if let Some(c) = then {
            out.push(c);
        }
    };
    push(y, 4, Some('-'));
    push(m, 2, Some('-'));
    push(d, 2, Some('T'));
    push(hh, 2, Some(':'));
    push(mm, 2, Some(':'));
    push(ss, 2, Some('Z'));
    out
}

// Howard Hinnant's civil calendar algorithms (public domain description, written anew).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        for s in [
            "2026-01-01T00:00:00Z",
            "1970-01-01T00:00:00Z",
            "2024-02-29T23:59:59Z",
        ] {
            assert_eq!(format_rfc3339(parse_rfc3339(s).unwrap()), s);
        }
        assert_eq!(parse_rfc3339("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:10.5Z"), Some(10));
        assert_eq!(parse_rfc3339("garbage"), None);
    }

    /// The digit-by-digit writer spells every instant of years 0000-9999 as `format!` does,
    /// and instants outside them still format.
    #[test]
    fn rfc3339_digits_match_format() {
        let reference = |unix: i64| {
            let (y, m, d) = civil_from_days(unix.div_euclid(86400));
            let secs = unix.rem_euclid(86400);
            format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
                secs / 3600,
                (secs / 60) % 60,
                secs % 60
            )
        };
        let first = -62_167_219_200; // 0000-01-01T00:00:00Z
        let last = 253_402_300_799; // 9999-12-31T23:59:59Z
        let mut unix = first;
        while unix <= last {
            assert_eq!(format_rfc3339(unix), reference(unix));
            unix += 86_399_993; // a prime stride, so every field takes many values
        }
        for unix in [first, last, -1, 0, 1, last + 1, first - 1] {
            assert_eq!(format_rfc3339(unix), reference(unix));
        }
        assert_eq!(format_rfc3339(first), "0000-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(last), "9999-12-31T23:59:59Z");
    }

    #[test]
    fn now_converts_both_ways() {
        let now = Now::parse("2026-01-01T00:00:00Z").unwrap();
        assert_eq!(now.unix(), 1_767_225_600);
        assert_eq!(format_time(now.timestamp()), now.rfc3339());
        assert_eq!(Now::from_timestamp(now.timestamp()), now);
        assert_eq!(Now::from_unix(i64::MAX).timestamp(), Timestamp::MAX);
    }
}
