//! PEM encoding of DER blocks (certificates, keys), as every component writes them.

use base64::Engine;

/// `der` as a PEM block labelled `label` (e.g. "CERTIFICATE"), 64 columns, LF endings.
pub fn encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        // base64 output is ASCII.
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn blocks_wrap_at_64_columns() {
        let pem = super::encode("CERTIFICATE", &[0u8; 60]);
        let lines: Vec<&str> = pem.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!((lines[1].len(), lines[2].len()), (64, 16));
        assert_eq!(lines[3], "-----END CERTIFICATE-----");
    }
}
