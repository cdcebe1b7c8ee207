//! Quantity arithmetic with Kubernetes' format rules, for sums KubeVirt builds in Go.
//!
//! The sums themselves are exact integers; what needs care is the *format* the result keeps,
//! because it decides how the pod prints it (`1294Mi` versus `1305018368`). Kubernetes keeps the
//! receiver's format unless the receiver is zero, in which case it takes the addend's.

use kvrs_overhead::{Amount, Format};

use super::ResourceError;
use crate::quantity::{Quantity, QuantityFormat};

/// An exact amount in thousandths, with the format its Kubernetes quantity carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GoQty {
    pub(crate) milli: i128,
    pub(crate) format: QuantityFormat,
}

impl GoQty {
    /// A zero quantity in `format` (Go's `resource.Quantity{}` is zero DecimalSI-less; KubeVirt's
    /// zero sums are created decimal).
    pub(crate) fn zero(format: QuantityFormat) -> Self {
        Self { milli: 0, format }
    }

    /// A whole number of units.
    pub(crate) fn units(n: i64, format: QuantityFormat) -> Self {
        Self {
            milli: i128::from(n) * 1000,
            format,
        }
    }

    /// Parses a quantity from the VMI, naming `field` when it is not one.
    pub(crate) fn parse(q: &Quantity, field: &str) -> Result<Self, ResourceError> {
        let bad = |e| ResourceError::Quantity {
            field: field.to_string(),
            source: e,
        };
        Ok(Self {
            milli: i128::from(q.milli_value().map_err(bad)?),
            format: q.format().map_err(bad)?,
        })
    }

    /// Parses a quantity KubeVirt itself writes (known to be valid).
    pub(crate) fn literal(text: &str) -> Self {
        let q = Quantity::new(text);
        Self {
            milli: q.milli_value().map(i128::from).unwrap_or(0),
            format: q.format().unwrap_or(QuantityFormat::DecimalSI),
        }
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.milli == 0
    }

    /// Go's `Quantity.Add`.
    pub(crate) fn add(&mut self, other: GoQty) {
        if self.milli == 0 {
            self.format = other.format;
        }
        self.milli += other.milli;
    }

    /// Go's `Quantity.Sub`.
    pub(crate) fn sub(&mut self, other: GoQty) {
        if self.milli == 0 {
            self.format = other.format;
        }
        self.milli -= other.milli;
    }

    /// Whole units, rounded up like `Value()`.
    pub(crate) fn value(&self) -> i64 {
        let v = self.milli.div_euclid(1000) + i128::from(self.milli.rem_euclid(1000) != 0);
        i64::try_from(v).unwrap_or(i64::MAX)
    }

    pub(crate) fn milli_value(&self) -> i64 {
        i64::try_from(self.milli).unwrap_or(i64::MAX)
    }

    /// The canonical text Kubernetes prints for this quantity.
    pub(crate) fn to_quantity(self) -> Quantity {
        Quantity::from_milli(self.milli_value(), self.format)
    }

    pub(crate) fn from_amount(a: Amount) -> Self {
        Self::units(
            a.bytes,
            match a.format {
                Format::BinarySI => QuantityFormat::BinarySI,
                Format::DecimalSI => QuantityFormat::DecimalSI,
            },
        )
    }

    pub(crate) fn to_amount(self) -> Amount {
        match self.format {
            QuantityFormat::BinarySI => Amount::binary(self.value()),
            _ => Amount::decimal(self.value()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_keep_the_format_of_the_first_non_zero_term() {
        let mut q = GoQty::literal("1024M");
        q.add(GoQty::literal("268Mi"));
        assert_eq!(q.to_quantity().as_str(), "1305018368");
        let mut q = GoQty::literal("1Gi");
        q.add(GoQty::literal("270Mi"));
        assert_eq!(q.to_quantity().as_str(), "1294Mi");
        let mut z = GoQty::zero(QuantityFormat::DecimalSI);
        z.add(GoQty::literal("2Gi"));
        assert_eq!(z.to_quantity().as_str(), "2Gi");
    }
}
