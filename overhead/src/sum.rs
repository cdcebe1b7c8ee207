//! Amounts that remember how Kubernetes would print them.

/// The print format of a Kubernetes quantity, as far as sums of bytes care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Powers of 1024 (`268Mi`); amounts not divisible by 1024 print as bare numbers.
    BinarySI,
    /// Powers of 1000 (`1G`); amounts not divisible by 1000 print as bare numbers.
    DecimalSI,
}

/// A whole number of units (bytes, cores) with the format its quantity carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Amount {
    /// The amount.
    pub bytes: i64,
    /// How the quantity holding it prints.
    pub format: Format,
}

impl Amount {
    /// Zero in a given format (the starting point of a sum).
    pub fn zero(format: Format) -> Self {
        Self { bytes: 0, format }
    }

    /// An amount written with a binary suffix (`25Mi`).
    pub fn binary(bytes: i64) -> Self {
        Self {
            bytes,
            format: Format::BinarySI,
        }
    }

    /// An amount written in decimal (`1G`, or a plain number).
    pub fn decimal(bytes: i64) -> Self {
        Self {
            bytes,
            format: Format::DecimalSI,
        }
    }

    /// Adds `other` the way Kubernetes' `Quantity.Add` does: a zero receiver adopts the format of
    /// what is added to it; otherwise the receiver keeps its own. Saturates instead of wrapping.
    pub fn add(&mut self, other: Amount) {
        if self.bytes == 0 {
            self.format = other.format;
        }
        self.bytes = self.bytes.saturating_add(other.bytes);
    }

    /// `self + other` as a new value (see [`Amount::add`]).
    pub fn plus(mut self, other: Amount) -> Amount {
        self.add(other);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_receiver_adopts_the_format_of_the_addend() {
        let mut s = Amount::zero(Format::DecimalSI);
        s.add(Amount::decimal(0));
        assert_eq!(s.format, Format::DecimalSI);
        s.add(Amount::binary(1024));
        assert_eq!(s.format, Format::BinarySI);
        s.add(Amount::decimal(1000));
        assert_eq!((s.bytes, s.format), (2024, Format::BinarySI));
    }
}
