//! resource.Quantity strings ("250m", "1.5", "128Mi", "1e3") as milli-units, the scale
//! the HPA computes in (upstream's MilliValue), and back (NewMilliQuantity, DecimalSI).

/// The quantity in thousandths, rounded up as MilliValue does; None if malformed.
pub fn milli(q: &str) -> Option<i64> {
    krate_api::kinds::quantity::Quantity::parse(q.trim()).ok().map(|q| q.milli_value())
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
