//! Precision names (`--trainer.precision`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{FlagError, list};

/// The numeric policy of a run, named as Lightning 2.x names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Everything in f32.
    F32True,
    /// Everything in f64.
    F64True,
    /// Everything in f16.
    F16True,
    /// Everything in bf16.
    Bf16True,
    /// f32 master weights, f16 compute, dynamic loss scaling.
    F16Mixed,
    /// f32 master weights, bf16 compute.
    Bf16Mixed,
}

impl Precision {
    /// Every precision, in the order the docs list them.
    pub const ALL: [Precision; 6] = [
        Precision::F32True,
        Precision::F64True,
        Precision::F16True,
        Precision::Bf16True,
        Precision::F16Mixed,
        Precision::Bf16Mixed,
    ];

    /// The name used on the command line and in plans.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32True => "32-true",
            Precision::F64True => "64-true",
            Precision::F16True => "16-true",
            Precision::Bf16True => "bf16-true",
            Precision::F16Mixed => "16-mixed",
            Precision::Bf16Mixed => "bf16-mixed",
        }
    }

    /// Parses a precision name (case-insensitive), naming `--trainer.precision` on error.
    pub fn parse(value: &str) -> Result<Self, FlagError> {
        let wanted = value.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|p| p.name() == wanted)
            .ok_or_else(|| {
                FlagError::new(
                    "--trainer.precision",
                    value,
                    format!(
                        "unknown precision; allowed: {}",
                        list(Self::ALL.map(Precision::name))
                    ),
                )
            })
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = FlagError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for Precision {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Precision {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_six_names_round_trip() {
        for p in Precision::ALL {
            assert_eq!(Precision::parse(p.name()).unwrap(), p);
        }
        assert_eq!(
            Precision::parse("BF16-Mixed").unwrap(),
            Precision::Bf16Mixed
        );
    }

    #[test]
    fn unknown_name_lists_the_allowed_ones() {
        let err = Precision::parse("16").unwrap_err();
        assert_eq!(err.flag, "--trainer.precision");
        for p in Precision::ALL {
            assert!(err.message.contains(p.name()), "{err}");
        }
    }
}
