//! Kubernetes resource quantities (`2Gi`, `1.5G`, `512M`, `100m`), parsed exactly.
//!
//! A [`Quantity`] keeps the text it was written as, so an object read and written again is
//! byte-for-byte what it was; the number behind it is computed on demand with integer arithmetic
//! (no floating point), rounding up the way Kubernetes' `Value()` and `MilliValue()` do.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a quantity string could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text is not `<sign><digits>[.<digits>]<suffix>`.
    #[error("quantity {0:?} is not a number with an optional suffix (e.g. 2Gi, 1.5G, 100m)")]
    Syntax(String),
    /// The suffix is not one Kubernetes knows.
    #[error("quantity {0:?} has an unknown suffix")]
    Suffix(String),
    /// The value does not fit in 64 bits (tiny values are not an error: they round up to `1n`).
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

/// How a quantity prints its suffix, as Kubernetes' `resource.Format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantityFormat {
    /// Powers of 1024: `Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`.
    BinarySI,
    /// Powers of 1000: `n`, `u`, `m`, ``, `k`, `M`, `G`, `T`, `P`, `E`.
    DecimalSI,
    /// `e<N>` exponents.
    DecimalExponent,
}

/// A Kubernetes quantity as written, with exact accessors for its value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Quantity {
    text: String,
    /// Written as a bare JSON number rather than a string; kept so the round trip is exact.
    was_number: bool,
}

/// The parsed form: `mantissa * 10^exp10 * 2^exp2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Parsed {
    mantissa: i128,
    exp10: i32,
    exp2: u32,
    format: QuantityFormat,
}

impl Quantity {
    /// Wraps text without checking it; the accessors report errors.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            was_number: false,
        }
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The value rounded up to a whole number (bytes for memory, cores for CPU).
    pub fn value(&self) -> Result<i64, QuantityError> {
        self.scaled(0)
    }

    /// The value in thousandths, rounded up (millicores for CPU).
    pub fn milli_value(&self) -> Result<i64, QuantityError> {
        self.scaled(3)
    }

    /// The suffix family the text was written in.
    pub fn format(&self) -> Result<QuantityFormat, QuantityError> {
        Ok(self.parse()?.format)
    }

    /// A quantity of `value` units printed canonically in `format`, the way Kubernetes prints a
    /// quantity it computed (`1073741824` in BinarySI prints `1Gi`, `2000` in DecimalSI `2k`).
    pub fn from_value(value: i64, format: QuantityFormat) -> Self {
        // Any 64-bit value fits the 128-bit arithmetic; the plain digits are the fallback anyway.
        Self::new(canonical(i128::from(value), 0, format).unwrap_or_else(|| value.to_string()))
    }

    /// A quantity of `milli` thousandths printed canonically in `format` (`100` prints `100m`).
    pub fn from_milli(milli: i64, format: QuantityFormat) -> Self {
        // Any 64-bit value fits the 128-bit arithmetic; the plain digits are the fallback anyway.
        Self::new(canonical(i128::from(milli), -3, format).unwrap_or_else(|| format!("{milli}m")))
    }

    /// This quantity printed the way Kubernetes' `Quantity.String()` prints it.
    pub fn canonical(&self) -> Result<Quantity, QuantityError> {
        let p = self.parse()?;
        let overflow = || QuantityError::Overflow(self.text.clone());
        let m = p
            .mantissa
            .checked_mul(1i128.checked_shl(p.exp2).ok_or_else(overflow)?)
            .ok_or_else(overflow)?;
        Ok(Self::new(
            canonical(m, p.exp10, p.format).ok_or_else(overflow)?,
        ))
    }

    fn scaled(&self, scale: i32) -> Result<i64, QuantityError> {
        let p = self.parse()?;
        let overflow = || QuantityError::Overflow(self.text.clone());
        let mut n = p
            .mantissa
            .checked_mul(1i128.checked_shl(p.exp2).ok_or_else(overflow)?)
            .ok_or_else(overflow)?;
        let e = p.exp10 + scale;
        if e >= 0 {
            n = n
                .checked_mul(pow10(e.unsigned_abs()).ok_or_else(overflow)?)
                .ok_or_else(overflow)?;
        } else {
            let d = pow10(e.unsigned_abs()).ok_or_else(overflow)?;
            // Round away from zero, as Kubernetes does for Value()/MilliValue().
            n = if n >= 0 {
                n / d + i128::from(n % d != 0)
            } else {
                n / d - i128::from(n % d != 0)
            };
        }
        i64::try_from(n).map_err(|_| overflow())
    }

    fn parse(&self) -> Result<Parsed, QuantityError> {
        parse(self.text.trim())
    }
}

fn pow10(e: u32) -> Option<i128> {
    10i128.checked_pow(e)
}

/// Significant digits kept while parsing (`10^36` fits an `i128` with room for the binary
/// suffixes' `2^60`); further digits only decide the rounding.
const MAX_DIGITS: usize = 36;
/// The largest `e<N>` exponent accepted: beyond it every non-zero value is out of range anyway.
const MAX_EXPONENT: i32 = 30;
/// Kubernetes' finest granularity: values are rounded up (away from zero) to whole nano units.
const NANO_EXP: i32 = -9;

fn parse(s: &str) -> Result<Parsed, QuantityError> {
    let syntax = || QuantityError::Syntax(s.to_string());
    let bytes = s.as_bytes();
    let mut i = 0;
    let negative = match bytes.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    let mut mantissa: i128 = 0;
    let mut digits = 0usize;
    let mut exp10: i32 = 0;
    let mut seen_dot = false;
    // A non-zero digit was dropped beyond `MAX_DIGITS`: the value is a little above `mantissa`.
    let mut inexact = false;
    while i < bytes.len() {
        match bytes[i] {
            b'0'..=b'9' => {
                let digit = bytes[i] - b'0';
                if mantissa == 0 && digit == 0 {
                    // Leading zeros carry no precision (after the dot they only scale).
                    if seen_dot {
                        exp10 = exp10.saturating_sub(1);
                    }
                } else if digits < MAX_DIGITS {
                    digits += 1;
                    mantissa = mantissa * 10 + i128::from(digit);
                    if seen_dot {
                        exp10 -= 1;
                    }
                } else {
                    // Beyond the precision kept: an integer digit still scales the value.
                    inexact |= digit != 0;
                    if !seen_dot {
                        exp10 = exp10.saturating_add(1);
                    }
                }
            }
            b'.' if !seen_dot => seen_dot = true,
            _ => break,
        }
        i += 1;
    }
    let number_text = &s[usize::from(negative || s.starts_with('+'))..i];
    if number_text.is_empty() || number_text == "." {
        return Err(syntax());
    }
    let suffix = &s[i..];
    let (format, extra10, exp2) = match suffix {
        "" => (QuantityFormat::DecimalSI, 0, 0),
        "n" => (QuantityFormat::DecimalSI, -9, 0),
        "u" => (QuantityFormat::DecimalSI, -6, 0),
        "m" => (QuantityFormat::DecimalSI, -3, 0),
        "k" => (QuantityFormat::DecimalSI, 3, 0),
        "M" => (QuantityFormat::DecimalSI, 6, 0),
        "G" => (QuantityFormat::DecimalSI, 9, 0),
        "T" => (QuantityFormat::DecimalSI, 12, 0),
        "P" => (QuantityFormat::DecimalSI, 15, 0),
        "E" => (QuantityFormat::DecimalSI, 18, 0),
        "Ki" => (QuantityFormat::BinarySI, 0, 10),
        "Mi" => (QuantityFormat::BinarySI, 0, 20),
        "Gi" => (QuantityFormat::BinarySI, 0, 30),
        "Ti" => (QuantityFormat::BinarySI, 0, 40),
        "Pi" => (QuantityFormat::BinarySI, 0, 50),
        "Ei" => (QuantityFormat::BinarySI, 0, 60),
        other => {
            let exp = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))
                .ok_or_else(|| QuantityError::Suffix(s.to_string()))?;
            let n: i32 = exp
                .parse()
                .map_err(|_| QuantityError::Suffix(s.to_string()))?;
            // Tiny exponents are fine (the value rounds up to 1n, as in Kubernetes); huge ones
            // make any non-zero value out of range.
            if n > MAX_EXPONENT && mantissa != 0 {
                return Err(QuantityError::Overflow(s.to_string()));
            }
            (QuantityFormat::DecimalExponent, n, 0)
        }
    };
    if mantissa == 0 {
        return Ok(Parsed {
            mantissa: 0,
            exp10: 0,
            exp2,
            format,
        });
    }
    let (mantissa, exp10) = round_to_nano(mantissa, i64::from(exp10) + i64::from(extra10), inexact)
        .ok_or_else(|| QuantityError::Overflow(s.to_string()))?;
    Ok(Parsed {
        mantissa: if negative { -mantissa } else { mantissa },
        exp10,
        exp2,
        format,
    })
}

/// `m * 10^e` (plus a little when `inexact`), rounded up to whole nano units as Kubernetes'
/// `ParseQuantity` does (`1e-400` is `1n`); `None` when the exponent is out of range.
fn round_to_nano(m: i128, e: i64, inexact: bool) -> Option<(i128, i32)> {
    let nano = i64::from(NANO_EXP);
    if e >= nano && !inexact {
        return Some((m, i32::try_from(e).ok()?));
    }
    if e >= nano {
        // Only reachable with more than 36 significant digits above nano: huge values.
        let scale = pow10(u32::try_from(e - nano).ok()?)?;
        return Some((m.checked_mul(scale)?.checked_add(1)?, NANO_EXP));
    }
    // `m < 10^36`: dividing by 10^37 or more leaves a fraction of one nano, which rounds up.
    let d = u32::try_from(nano - e).unwrap_or(u32::MAX);
    let rounded = match pow10(d) {
        Some(d) => m / d + i128::from(m % d != 0 || inexact),
        None => 1,
    };
    Some((rounded, NANO_EXP))
}

/// Prints `m * 10^e` in Kubernetes' canonical form for `format`; `None` when the digits do not
/// fit 128 bits (only for values far beyond any 64-bit quantity).
fn canonical(mut m: i128, mut e: i32, format: QuantityFormat) -> Option<String> {
    if m == 0 {
        return Some("0".to_string());
    }
    // Normalise: drop trailing zeros into the exponent.
    while m % 10 == 0 {
        m /= 10;
        e += 1;
    }
    let integral = e >= 0;
    if format == QuantityFormat::BinarySI && integral {
        let mut n = m.checked_mul(pow10(e.unsigned_abs())?)?;
        if n.abs() >= 1024 {
            let mut power = 0usize;
            while power < 6 && n % 1024 == 0 {
                n /= 1024;
                power += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
            return Some(format!("{n}{suffix}"));
        }
    }
    // Decimal: exponent to a multiple of 3 (rounding the exponent down), mantissa widened.
    let mut e3 = e.div_euclid(3) * 3;
    m = m.checked_mul(pow10((e - e3).unsigned_abs())?)?;
    // Kubernetes keeps small integers unsuffixed-free of precision loss: prefer the largest
    // suffix that keeps an integral mantissa.
    while m % 1000 == 0 && e3 < 18 {
        m /= 1000;
        e3 += 3;
    }
    if format == QuantityFormat::DecimalExponent {
        return Some(if e3 == 0 {
            format!("{m}")
        } else {
            format!("{m}e{e3}")
        });
    }
    if e3 < -9 {
        // Below nano: Kubernetes rounds up to 1n granularity.
        let v = match pow10((-9 - e3).unsigned_abs()) {
            Some(d) => m / d + i128::from(m % d != 0 && m > 0),
            None => i128::from(m > 0),
        };
        return Some(format!("{v}n"));
    }
    let suffix = match e3 {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        _ => "E",
    };
    if e3 > 18 {
        m = m.checked_mul(pow10((e3 - 18).unsigned_abs())?)?;
    }
    Some(format!("{m}{suffix}"))
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let q = Quantity::new(s);
        q.parse()?;
        Ok(q)
    }
}

impl From<&str> for Quantity {
    fn from(s: &str) -> Self {
        Quantity::new(s)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.was_number {
            if let Ok(n) = self.text.parse::<i64>() {
                return serializer.serialize_i64(n);
            }
            if let Ok(n) = self.text.parse::<f64>() {
                return serializer.serialize_f64(n);
            }
        }
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Int(i64),
            Float(f64),
        }
        let (text, was_number) = match Raw::deserialize(deserializer)? {
            Raw::Text(s) => (s, false),
            Raw::Int(n) => (n.to_string(), true),
            Raw::Float(n) => (n.to_string(), true),
        };
        parse(text.trim()).map_err(serde::de::Error::custom)?;
        Ok(Quantity { text, was_number })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        s.parse().unwrap()
    }

    #[test]
    fn binary_and_decimal_suffixes_give_exact_bytes() {
        assert_eq!(q("2Gi").value(), Ok(2 * 1024 * 1024 * 1024));
        assert_eq!(q("1.5G").value(), Ok(1_500_000_000));
        assert_eq!(q("512M").value(), Ok(512_000_000));
        assert_eq!(q("128Mi").value(), Ok(134_217_728));
        assert_eq!(q("1e3").value(), Ok(1000));
        assert_eq!(q("0.5Ki").value(), Ok(512));
    }

    #[test]
    fn millicores_round_up_like_kubernetes() {
        assert_eq!(q("100m").milli_value(), Ok(100));
        assert_eq!(q("2").milli_value(), Ok(2000));
        assert_eq!(q("0.1").milli_value(), Ok(100));
        assert_eq!(q("100m").value(), Ok(1));
        assert_eq!(q("1n").milli_value(), Ok(1));
    }

    #[test]
    fn canonical_forms_match_kubernetes() {
        assert_eq!(
            Quantity::from_value(281_018_368, QuantityFormat::BinarySI).as_str(),
            "268Mi"
        );
        assert_eq!(
            Quantity::from_value(1_305_018_368, QuantityFormat::DecimalSI).as_str(),
            "1305018368"
        );
        assert_eq!(
            Quantity::from_milli(100, QuantityFormat::DecimalSI).as_str(),
            "100m"
        );
        assert_eq!(
            Quantity::from_milli(2000, QuantityFormat::DecimalSI).as_str(),
            "2"
        );
        assert_eq!(
            Quantity::from_value(2000, QuantityFormat::DecimalSI).as_str(),
            "2k"
        );
        assert_eq!(q("1.5G").canonical().unwrap().as_str(), "1500M");
        assert_eq!(q("1024").canonical().unwrap().as_str(), "1024");
        assert_eq!(
            Quantity::from_value(1000, QuantityFormat::BinarySI).as_str(),
            "1k"
        );
    }

    #[test]
    fn bad_text_is_a_typed_error() {
        assert!(matches!(
            "abc".parse::<Quantity>(),
            Err(QuantityError::Syntax(_))
        ));
        assert!(matches!(
            "1Qi".parse::<Quantity>(),
            Err(QuantityError::Suffix(_))
        ));
        assert!(matches!(
            q("9999999Ei").value(),
            Err(QuantityError::Overflow(_))
        ));
    }

    #[test]
    fn tiny_quantities_round_up_to_one_nano_not_too_large() {
        // issue 17: `1e-400` was "too large"; Kubernetes rounds it up to 1n.
        assert_eq!(q("1e-400").milli_value(), Ok(1));
        assert_eq!(q("1e-400").value(), Ok(1));
        assert_eq!(q("1e-400").canonical().unwrap().as_str(), "1e-9");
        assert_eq!(q("-1e-400").canonical().unwrap().as_str(), "-1e-9");
        let many_zeros = format!("0.{}1", "0".repeat(60));
        assert_eq!(q(&many_zeros).canonical().unwrap().as_str(), "1n");
        assert_eq!(q("1.5n").canonical().unwrap().as_str(), "2n");
        // 40 significant digits: the dropped ones still round up.
        let long = format!("1.{}1", "0".repeat(38));
        assert_eq!(q(&long).canonical().unwrap().as_str(), "1000000001n");
        assert_eq!(q("0e99").value(), Ok(0));
    }

    #[test]
    fn huge_quantities_are_too_large_not_a_panic() {
        assert_eq!(
            q("8Ei").value(),
            Err(QuantityError::Overflow("8Ei".to_string()))
        );
        assert_eq!(q("7Ei").value(), Ok(7 << 60));
        assert_eq!(
            "1e31".parse::<Quantity>(),
            Err(QuantityError::Overflow("1e31".to_string()))
        );
        // canonical() used to compute 10^e unchecked: 36 nines then 21 zeros does not fit.
        let big = format!("{}000E", "9".repeat(36));
        assert_eq!(
            q(&big).canonical(),
            Err(QuantityError::Overflow(big.clone()))
        );
        let digits = format!("1{}", "0".repeat(50));
        assert_eq!(
            q(&digits).value(),
            Err(QuantityError::Overflow(digits.clone()))
        );
        assert_eq!(
            Quantity::from_value(i64::MAX, QuantityFormat::BinarySI).as_str(),
            "9223372036854775807"
        );
        assert_eq!(
            Quantity::from_milli(i64::MIN, QuantityFormat::DecimalSI).as_str(),
            "-9223372036854775808m"
        );
    }

    #[test]
    fn serde_keeps_the_written_text() {
        let v: Quantity = serde_json::from_str("\"1.50Gi\"").unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"1.50Gi\"");
        let n: Quantity = serde_json::from_str("1024").unwrap();
        assert_eq!(serde_json::to_string(&n).unwrap(), "1024");
    }
}
