//! Query parameters, parsed as kube-apiserver's parameter codec parses them (Go's `strconv`):
//! a malformed or out-of-range number, or a boolean Go does not read, is a 400 with Go's
//! message; a duration from input never overflows (see [`saturating_deadline`]).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::ApiError;

/// The parameters of one request.
#[derive(Debug, Default)]
pub struct Query(HashMap<String, String>);

/// Go's `strconv.ParseInt(s, 10, 64)` error text.
fn parse_int_error(s: &str, out_of_range: bool) -> String {
    let why = if out_of_range {
        "value out of range"
    } else {
        "invalid syntax"
    };
    format!(
        "strconv.ParseInt: parsing {}: {why}",
        kvrs_store::names::go_quote(s)
    )
}

/// Go's `strconv.ParseInt(s, 10, 64)`: an optional sign, decimal digits only.
pub fn parse_i64(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(parse_int_error(s, false));
    }
    s.parse::<i64>().map_err(|_| parse_int_error(s, true))
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!(
            "strconv.ParseBool: parsing {}: invalid syntax",
            kvrs_store::names::go_quote(s)
        )),
    }
}

impl Query {
    /// Parses a URL query string (`a=b&c=d`; the last of a repeated key wins).
    pub fn parse(query: &str) -> Self {
        Self(
            form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
        )
    }

    /// A raw parameter.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    /// An integer parameter (`limit`, `timeoutSeconds`, `gracePeriodSeconds`).
    pub fn int(&self, k: &str) -> Result<Option<i64>, ApiError> {
        self.get(k)
            .map(|v| parse_i64(v).map_err(ApiError::BadRequest))
            .transpose()
    }

    /// A boolean parameter (`watch`, `allowWatchBookmarks`, ...); absent is false.
    pub fn flag(&self, k: &str) -> Result<bool, ApiError> {
        match self.get(k) {
            None | Some("") => Ok(false),
            Some(v) => parse_bool(v).map_err(ApiError::BadRequest),
        }
    }

    /// `resourceVersion`: empty, or an unsigned decimal (kube-apiserver's etcd versions).
    pub fn resource_version(&self) -> Result<Option<u64>, ApiError> {
        match self.get("resourceVersion") {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<u64>().map(Some).map_err(|_| {
                let why = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
                    "value out of range"
                } else {
                    "invalid syntax"
                };
                ApiError::BadRequest(format!(
                    "invalid resource version: resourceVersion: Invalid value: {q}: strconv.ParseUint: parsing {q}: {why}",
                    q = kvrs_store::names::go_quote(v)
                ))
            }),
        }
    }

    /// Checks the parameters of a list or watch that this server reads or that
    /// kube-apiserver would refuse when malformed.
    pub fn check_list(&self) -> Result<(), ApiError> {
        self.int("limit")?;
        self.int("timeoutSeconds")?;
        self.resource_version()?;
        for f in ["watch", "allowWatchBookmarks", "sendInitialEvents"] {
            self.flag(f)?;
        }
        Ok(())
    }
}

/// `now + seconds`, saturated: a negative count is no time, and a deadline past what the
/// clock holds is a year away (no watch lives that long; nothing overflows).
pub fn saturating_deadline(now: Instant, seconds: i64) -> Instant {
    const FAR: Duration = Duration::from_secs(365 * 24 * 3600);
    let d = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    now.checked_add(d.min(FAR))
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn go_messages() {
        assert_eq!(
            parse_i64("abc").unwrap_err(),
            "strconv.ParseInt: parsing \"abc\": invalid syntax"
        );
        assert_eq!(
            parse_i64("99999999999999999999").unwrap_err(),
            "strconv.ParseInt: parsing \"99999999999999999999\": value out of range"
        );
        assert_eq!(parse_i64("-5"), Ok(-5));
        assert_eq!(parse_i64("+5"), Ok(5));
        assert!(parse_i64("").is_err() && parse_i64("-").is_err() && parse_i64(" 1").is_err());
        assert!(parse_bool("True").unwrap() && !parse_bool("0").unwrap());
        assert!(parse_bool("yes").is_err());
    }

    #[test]
    fn huge_timeouts_saturate() {
        let now = Instant::now();
        for s in [i64::MAX, i64::MIN, -1, 0, 1, 31_536_000_000] {
            let d = saturating_deadline(now, s);
            assert!(d >= now);
        }
        let q = Query::parse("timeoutSeconds=18446744073709551615");
        assert_eq!(q.int("timeoutSeconds").unwrap_err().code(), 400);
    }

    proptest! {
        /// Any query string: parsing each parameter answers (a value or a 400), never panics.
        #[test]
        fn any_query_parses_or_is_a_bad_request(s in ".{0,64}", k in prop::sample::select(vec![
            "limit", "timeoutSeconds", "resourceVersion", "gracePeriodSeconds", "watch",
            "allowWatchBookmarks", "sendInitialEvents", "orphanDependents",
        ])) {
            let q = Query::parse(&format!("{k}={s}"));
            let _ = q.check_list();
            if let Err(e) = q.int(k) { prop_assert_eq!(e.code(), 400); }
            if let Err(e) = q.flag(k) { prop_assert_eq!(e.code(), 400); }
            if let Err(e) = q.resource_version() { prop_assert_eq!(e.code(), 400); }
            if let Ok(Some(n)) = q.int(k) {
                let now = Instant::now();
                prop_assert!(saturating_deadline(now, n) >= now);
            }
        }
    }
}
