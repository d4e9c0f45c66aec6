//! Resource quantities (`resource.Quantity`): parsing, comparison, and the canonical
//! form upstream serializes them in ("1000m" comes back as "1", "1024Mi" as "1Gi").

use std::cmp::Ordering;

use serde_json::Value;

pub const FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const SUFFIX_ERROR: &str = "unable to parse quantity's suffix";
const NUMERIC_ERROR: &str = "unable to parse quantity's numeric value";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// An exact quantity: `mantissa * 10^exponent`, and the format it prints in.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    mantissa: i128,
    exponent: i32,
    pub format: Format,
}

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

/// Divides rounding away from zero (inf.RoundUp).
fn div_away(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b == 0 { q } else { q + a.signum() }
}

impl Quantity {
    pub fn zero() -> Self {
        Quantity { mantissa: 0, exponent: 0, format: Format::DecimalSi }
    }

    /// A quantity as JSON carries it: a string, or (from YAML manifests) a number.
    pub fn from_json(v: &Value) -> Result<Self, &'static str> {
        match v {
            Value::String(s) => Self::parse(s.trim()),
            Value::Number(n) => Self::parse(&n.to_string()),
            _ => Err(FORMAT_ERROR),
        }
    }

    /// Upstream's `ParseQuantity`.
    pub fn parse(s: &str) -> Result<Self, &'static str> {
        if s.is_empty() {
            return Err(FORMAT_ERROR);
        }
        let b = s.as_bytes();
        let mut pos = 0;
        let mut negative = false;
        if matches!(b[0], b'+' | b'-') {
            negative = b[0] == b'-';
            pos = 1;
        }
        let num_start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        let num = &s[num_start..pos];
        let mut denom = "";
        if pos < b.len() && b[pos] == b'.' {
            pos += 1;
            let d = pos;
            while pos < b.len() && b[pos].is_ascii_digit() {
                pos += 1;
            }
            denom = &s[d..pos];
        }
        if num.is_empty() && denom.is_empty() {
            return Err(FORMAT_ERROR);
        }
        let suffix = &s[pos..];
        // The suffix: letters from "eEinumkKMGTP", then an optional signed integer.
        let sb = suffix.as_bytes();
        let mut i = 0;
        while i < sb.len() && b"eEinumkKMGTP".contains(&sb[i]) {
            i += 1;
        }
        if i < sb.len() && matches!(sb[i], b'+' | b'-') {
            i += 1;
        }
        if !sb[i..].iter().all(u8::is_ascii_digit) {
            return Err(FORMAT_ERROR);
        }
        let (base2, exp, format) = match suffix {
            "" => (false, 0, Format::DecimalSi),
            "n" => (false, -9, Format::DecimalSi),
            "u" => (false, -6, Format::DecimalSi),
            "m" => (false, -3, Format::DecimalSi),
            "k" => (false, 3, Format::DecimalSi),
            "M" => (false, 6, Format::DecimalSi),
            "G" => (false, 9, Format::DecimalSi),
            "T" => (false, 12, Format::DecimalSi),
            "P" => (false, 15, Format::DecimalSi),
            "E" => (false, 18, Format::DecimalSi),
            "Ki" => (true, 10, Format::BinarySi),
            "Mi" => (true, 20, Format::BinarySi),
            "Gi" => (true, 30, Format::BinarySi),
            "Ti" => (true, 40, Format::BinarySi),
            "Pi" => (true, 50, Format::BinarySi),
            "Ei" => (true, 60, Format::BinarySi),
            other if other.len() > 1 && (other.starts_with('e') || other.starts_with('E')) => {
                let e: i32 = other[1..].parse().map_err(|_| SUFFIX_ERROR)?;
                if !(-100..=100).contains(&e) {
                    return Err(NUMERIC_ERROR);
                }
                (false, e, Format::DecimalExponent)
            }
            _ => return Err(SUFFIX_ERROR),
        };
        let digits = format!("{num}{denom}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 36 {
            return Err(NUMERIC_ERROR);
        }
        let mut mantissa: i128 = if digits.is_empty() { 0 } else { digits.parse().map_err(|_| NUMERIC_ERROR)? };
        let mut exponent = -(denom.len() as i32);
        if base2 {
            mantissa = mantissa.checked_mul(1i128 << exp).ok_or(NUMERIC_ERROR)?;
        } else {
            exponent += exp;
        }
        if negative {
            mantissa = -mantissa;
        }
        let mut q = Quantity { mantissa, exponent, format };
        // Values finer than a nano round up to one, as upstream does.
        q.round_up(-9);
        if q.format == Format::BinarySi
            && q.mantissa != 0
            && q.cmp_int(-1) == Ordering::Greater
            && q.cmp_int(1) == Ordering::Less
        {
            q.format = Format::DecimalSi;
        }
        Ok(q)
    }

    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// Rounds up (away from zero) to `scale` decimal places (`-3`: milli), as
    /// `Quantity.RoundUp`; the default of every ResourceList rounds to milli.
    pub fn round_up(&mut self, scale: i32) {
        if self.exponent < scale {
            let shift = (scale - self.exponent) as u32;
            self.mantissa = match pow10(shift) {
                Some(p) => div_away(self.mantissa, p),
                None => self.mantissa.signum(),
            };
            self.exponent = scale;
        }
    }

    /// Both mantissas at a common exponent (None on overflow).
    fn aligned(&self, other: &Quantity) -> Option<(i128, i128, i32)> {
        let e = self.exponent.min(other.exponent);
        let a = self.mantissa.checked_mul(pow10((self.exponent - e) as u32)?)?;
        let b = other.mantissa.checked_mul(pow10((other.exponent - e) as u32)?)?;
        Some((a, b, e))
    }

    fn as_f64(&self) -> f64 {
        self.mantissa as f64 * 10f64.powi(self.exponent)
    }

    pub fn cmp_q(&self, other: &Quantity) -> Ordering {
        match self.aligned(other) {
            Some((a, b, _)) => a.cmp(&b),
            None => self.as_f64().partial_cmp(&other.as_f64()).unwrap_or(Ordering::Equal),
        }
    }

    fn cmp_int(&self, n: i64) -> Ordering {
        self.cmp_q(&Quantity { mantissa: n as i128, exponent: 0, format: Format::DecimalSi })
    }

    pub fn add(&self, other: &Quantity) -> Quantity {
        match self.aligned(other) {
            Some((a, b, e)) => Quantity { mantissa: a.saturating_add(b), exponent: e, format: self.format },
            None => *self,
        }
    }

    /// The value in units of 10^`scale`, rounded up and saturating (`ScaledValue`).
    pub fn scaled_value(&self, scale: i32) -> i64 {
        let mut q = *self;
        q.round_up(scale);
        let shifted = match u32::try_from(q.exponent - scale).ok().and_then(pow10) {
            Some(p) => q.mantissa.saturating_mul(p),
            None if q.mantissa == 0 => 0,
            None => q.mantissa.signum() * i128::MAX,
        };
        shifted.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// Thousandths, rounded up (`MilliValue`: millicores of cpu).
    pub fn milli_value(&self) -> i64 {
        self.scaled_value(-3)
    }

    /// Whole units, rounded up (`Value`: bytes of memory).
    pub fn value(&self) -> i64 {
        self.scaled_value(0)
    }

    pub fn sub(&self, other: &Quantity) -> Quantity {
        self.add(&Quantity { mantissa: other.mantissa.saturating_neg(), ..*other })
    }

    /// Whether the value is a whole number.
    pub fn is_integer(&self) -> bool {
        self.exponent >= 0 || pow10((-self.exponent) as u32).is_some_and(|p| self.mantissa % p == 0)
    }

    /// The value as a whole number, when it is one.
    pub fn to_integer(&self) -> Option<i128> {
        if !self.is_integer() {
            return None;
        }
        if self.exponent >= 0 {
            self.mantissa.checked_mul(pow10(self.exponent as u32)?)
        } else {
            Some(self.mantissa / pow10((-self.exponent) as u32)?)
        }
    }

    /// The canonical string upstream serializes the quantity as.
    pub fn canonical(&self) -> String {
        if self.mantissa == 0 {
            return "0".into();
        }
        let mut format = self.format;
        if format == Format::BinarySi
            && ((self.cmp_int(-1024) == Ordering::Greater && self.cmp_int(1024) == Ordering::Less)
                || !self.is_integer())
        {
            format = Format::DecimalSi;
        }
        match format {
            Format::BinarySi => {
                let mut v = if self.exponent >= 0 {
                    self.mantissa.saturating_mul(pow10(self.exponent as u32).unwrap_or(1))
                } else {
                    self.mantissa / pow10((-self.exponent) as u32).unwrap_or(1)
                };
                let mut k = 0;
                while k < 6 && v % 1024 == 0 {
                    v /= 1024;
                    k += 1;
                }
                format!("{v}{}", ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][k])
            }
            Format::DecimalSi | Format::DecimalExponent => {
                let (mut m, mut e) = (self.mantissa, self.exponent);
                while m % 10 == 0 {
                    m /= 10;
                    e += 1;
                }
                let r = e.rem_euclid(3);
                if let Some(p) = pow10(r as u32).and_then(|p| m.checked_mul(p)) {
                    m = p;
                    e -= r;
                }
                let suffix = match (format, e) {
                    (_, 0) => String::new(),
                    (Format::DecimalSi, -9) => "n".into(),
                    (Format::DecimalSi, -6) => "u".into(),
                    (Format::DecimalSi, -3) => "m".into(),
                    (Format::DecimalSi, 3) => "k".into(),
                    (Format::DecimalSi, 6) => "M".into(),
                    (Format::DecimalSi, 9) => "G".into(),
                    (Format::DecimalSi, 12) => "T".into(),
                    (Format::DecimalSi, 15) => "P".into(),
                    (Format::DecimalSi, 18) => "E".into(),
                    (_, e) => format!("e{e}"),
                };
                format!("{m}{suffix}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        Quantity::parse(s).unwrap().canonical()
    }

    #[test]
    fn canonical_forms_match_upstream() {
        for (input, want) in [
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("100Mi", "100Mi"),
            ("0.5Gi", "512Mi"),
            ("1000", "1k"),
            ("1024", "1024"),
            ("12345", "12345"),
            ("1e3", "1e3"),
            ("129e6", "129e6"),
            ("500M", "500M"),
            ("0", "0"),
            ("00100m", "100m"),
            ("2048Ki", "2Mi"),
            ("512", "512"),
            ("-1", "-1"),
            ("100n", "100n"),
            ("0.0000000001", "1n"),
            ("1.G", "1G"),
        ] {
            assert_eq!(canon(input), want, "{input}");
        }
    }

    #[test]
    fn bad_quantities_are_refused() {
        assert_eq!(Quantity::parse("abc").unwrap_err(), FORMAT_ERROR);
        assert_eq!(Quantity::parse("").unwrap_err(), FORMAT_ERROR);
        assert_eq!(Quantity::parse("1mm").unwrap_err(), SUFFIX_ERROR);
        assert_eq!(Quantity::parse("1Gb").unwrap_err(), FORMAT_ERROR);
        assert_eq!(Quantity::parse("1 Gi").unwrap_err(), FORMAT_ERROR);
        assert!(Quantity::from_json(&serde_json::json!(2)).is_ok());
    }

    #[test]
    fn comparison_and_rounding() {
        let q = |s| Quantity::parse(s).unwrap();
        assert_eq!(q("1").cmp_q(&q("1000m")), Ordering::Equal);
        assert_eq!(q("1Gi").cmp_q(&q("1G")), Ordering::Greater);
        assert_eq!(q("500m").add(&q("500m")).canonical(), "1");
        let mut r = q("0.0001");
        r.round_up(-3);
        assert_eq!(r.canonical(), "1m");
        assert!(q("2").is_integer() && !q("1500m").is_integer());
    }

    #[test]
    fn scaled_values_round_up_and_saturate() {
        assert_eq!(Quantity::parse("250m").unwrap().milli_value(), 250);
        assert_eq!(Quantity::parse("1.5").unwrap().milli_value(), 1500);
        assert_eq!(Quantity::parse("0.1").unwrap().milli_value(), 100);
        assert_eq!(Quantity::parse("1n").unwrap().milli_value(), 1);
        assert_eq!(Quantity::parse("128Mi").unwrap().value(), 134_217_728);
        assert_eq!(Quantity::parse("1e3").unwrap().value(), 1000);
        assert_eq!(Quantity::parse("1500m").unwrap().value(), 2);
        assert_eq!(Quantity::parse("9E").unwrap().milli_value(), i64::MAX);
    }
}
