//! resource.Quantity strings ("250m", "1.5", "128Mi", "1e3") as milli-units, the scale
//! the HPA computes in (upstream's MilliValue), and back (NewMilliQuantity, DecimalSI).

/// The quantity in thousandths, rounded up as MilliValue does; None if malformed.
pub fn milli(q: &str) -> Option<i64> {
    let q = q.trim();
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    let value = number * factor * 1000.0;
    // Round away float noise before rounding up ("0.1" * 1000 is 100.00000000000001).
    let nearest = value.round();
    Some(if (value - nearest).abs() < 1e-6 { nearest } else { value.ceil() } as i64)
}

/// A milli value as a canonical DecimalSI quantity string ("1500m", "2", "3k").
pub fn from_milli(m: i64) -> String {
    if m % 1000 != 0 {
        return format!("{m}m");
    }
    let mut units = m / 1000;
    for suffix in ["", "k", "M", "G", "T", "P"] {
        if units % 1000 != 0 || units == 0 || suffix == "P" {
            return format!("{units}{suffix}");
        }
        units /= 1000;
    }
    unreachable!("the loop returns at P")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_milli_units() {
        assert_eq!(milli("250m"), Some(250));
        assert_eq!(milli("1"), Some(1000));
        assert_eq!(milli("0.1"), Some(100));
        assert_eq!(milli("1.5"), Some(1500));
        assert_eq!(milli("128Mi"), Some(128 * 1024 * 1024 * 1000));
        assert_eq!(milli("2k"), Some(2_000_000));
        assert_eq!(milli("1e3"), Some(1_000_000));
        assert_eq!(milli("12x"), None);
        assert_eq!(from_milli(1500), "1500m");
        assert_eq!(from_milli(2000), "2");
        assert_eq!(from_milli(3_000_000), "3k");
        assert_eq!(from_milli(0), "0");
    }
}
