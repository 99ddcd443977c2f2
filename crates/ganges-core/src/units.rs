//! Sizes, rates and durations in the units people type: `64MiB`, `32MiB/s`, `4ms`.
//!
//! Written here rather than taken from a crate because ganges needs all three with one
//! grammar and one error type (a rate is a size per second), the grammar is a dozen lines,
//! and the CLI, the cluster file and the benchmarks all parse through it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A size in bytes, parsed from `4096`, `64KiB`, `1.5GiB`, `10MB` (decimal units are 10^n).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

/// A rate in bytes per second, parsed from `32MiB/s` or `100MB/s`.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Default)]
pub struct Rate(pub f64);

/// A duration parsed from `4ms`, `1.5s`, `250us`, `2m`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// The text is empty or has no number in front.
    #[error("`{0}` is not a number with a unit (examples: 64MiB, 32MiB/s, 4ms)")]
    NotANumber(String),
    /// The unit after the number is not one ganges knows.
    #[error("`{text}`: unknown unit `{unit}` (use {expected})")]
    UnknownUnit { text: String, unit: String, expected: &'static str },
    /// The value does not fit (negative, or too large for 64 bits).
    #[error("`{0}` is out of range")]
    OutOfRange(String),
}

const SIZE_UNITS: &str = "B, KiB, MiB, GiB, TiB, kB, MB, GB, TB";

fn split_number(text: &str) -> Result<(f64, &str), UnitError> {
    let t = text.trim();
    let end =
        t.char_indices().find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '_')).map_or(t.len(), |(i, _)| i);
    let (num, unit) = t.split_at(end);
    let num: String = num.chars().filter(|c| *c != '_').collect();
    let value: f64 = num.parse().map_err(|_| UnitError::NotANumber(text.to_string()))?;
    Ok((value, unit.trim()))
}

fn size_multiplier(unit: &str) -> Option<f64> {
    Some(match unit {
        "" | "B" | "b" => 1.0,
        "KiB" | "K" | "k" => 1024.0,
        "MiB" | "M" | "m" => 1024.0 * 1024.0,
        "GiB" | "G" | "g" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "T" | "t" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return None,
    })
}

impl FromStr for ByteSize {
    type Err = UnitError;
    fn from_str(text: &str) -> Result<Self, UnitError> {
        let (value, unit) = split_number(text)?;
        let mult = size_multiplier(unit).ok_or_else(|| UnitError::UnknownUnit {
            text: text.to_string(),
            unit: unit.to_string(),
            expected: SIZE_UNITS,
        })?;
        let bytes = (value * mult).round();
        if !(0.0..=u64::MAX as f64).contains(&bytes) {
            return Err(UnitError::OutOfRange(text.to_string()));
        }
        Ok(ByteSize(bytes as u64))
    }
}

impl FromStr for Rate {
    type Err = UnitError;
    fn from_str(text: &str) -> Result<Self, UnitError> {
        let t = text.trim();
        let Some(size) = t.strip_suffix("/s") else {
            return Err(UnitError::UnknownUnit {
                text: text.to_string(),
                unit: t.to_string(),
                expected: "a size per second, e.g. 32MiB/s",
            });
        };
        let (value, unit) = split_number(size)?;
        let mult = size_multiplier(unit).ok_or_else(|| UnitError::UnknownUnit {
            text: text.to_string(),
            unit: unit.to_string(),
            expected: SIZE_UNITS,
        })?;
        let rate = value * mult;
        if !rate.is_finite() || rate <= 0.0 {
            return Err(UnitError::OutOfRange(text.to_string()));
        }
        Ok(Rate(rate))
    }
}

impl FromStr for Dur {
    type Err = UnitError;
    fn from_str(text: &str) -> Result<Self, UnitError> {
        let (value, unit) = split_number(text)?;
        let secs = match unit {
            "ns" => value * 1e-9,
            "us" | "µs" => value * 1e-6,
            "ms" => value * 1e-3,
            "s" | "" => value,
            "m" | "min" => value * 60.0,
            "h" => value * 3600.0,
            _ => {
                return Err(UnitError::UnknownUnit {
                    text: text.to_string(),
                    unit: unit.to_string(),
                    expected: "ns, us, ms, s, m, h",
                });
            }
        };
        Duration::try_from_secs_f64(secs).map(Dur).map_err(|_| UnitError::OutOfRange(text.to_string()))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const STEPS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (name, size) in STEPS {
            if self.0 >= size {
                let v = self.0 as f64 / size as f64;
                return if self.0.is_multiple_of(size) {
                    write!(f, "{}{name}", self.0 / size)
                } else {
                    write!(f, "{v:.1}{name}")
                };
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s", ByteSize(self.0.round() as u64))
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs_f64();
        if s >= 1.0 {
            write!(f, "{s}s")
        } else if s >= 1e-3 {
            write!(f, "{}ms", s * 1e3)
        } else {
            write!(f, "{}us", s * 1e6)
        }
    }
}

/// Megabytes (10^6 bytes) per second, the unit of every benchmark table.
pub fn mb_per_sec(bytes: u64, secs: f64) -> f64 {
    if secs <= 0.0 { 0.0 } else { bytes as f64 / secs / 1e6 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
        assert_eq!("64MiB".parse::<ByteSize>().unwrap().0, 64 << 20);
        assert_eq!("1.5GiB".parse::<ByteSize>().unwrap().0, 3 << 29);
        assert_eq!("10MB".parse::<ByteSize>().unwrap().0, 10_000_000);
        assert_eq!(" 4 KiB ".parse::<ByteSize>().unwrap().0, 4096);
        assert!(matches!("12furlongs".parse::<ByteSize>(), Err(UnitError::UnknownUnit { .. })));
        assert!(matches!("MiB".parse::<ByteSize>(), Err(UnitError::NotANumber(_))));
    }

    #[test]
    fn rates_need_per_second() {
        assert_eq!("32MiB/s".parse::<Rate>().unwrap().0, 32.0 * 1024.0 * 1024.0);
        assert!("32MiB".parse::<Rate>().is_err());
        assert!("0MiB/s".parse::<Rate>().is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!("4ms".parse::<Dur>().unwrap().0, Duration::from_millis(4));
        assert_eq!("1.5s".parse::<Dur>().unwrap().0, Duration::from_millis(1500));
        assert_eq!("250us".parse::<Dur>().unwrap().0, Duration::from_micros(250));
        assert!("4 parsecs".parse::<Dur>().is_err());
    }

    #[test]
    fn sizes_display_round_trip() {
        for s in ["64MiB", "1GiB", "4KiB", "17B"] {
            assert_eq!(s.parse::<ByteSize>().unwrap().to_string(), s);
        }
        assert_eq!(ByteSize(1536).to_string(), "1.5KiB");
    }
}
