//! A minimal ustar writer: enough to build image layers and OCI layout tarballs in
//! memory (directories, regular files, symlinks; names under 100 bytes).

pub struct Tar {
    out: Vec<u8>,
}

impl Tar {
    pub fn new() -> Tar {
        Tar { out: Vec::new() }
    }

    pub fn dir(&mut self, name: &str) {
        self.header(name, b'5', 0o755, 0, "");
    }

    pub fn file(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.header(name, b'0', mode, data.len() as u64, "");
        self.out.extend_from_slice(data);
        self.pad();
    }

    pub fn symlink(&mut self, name: &str, target: &str) {
        self.header(name, b'2', 0o777, 0, target);
    }

    /// The archive with its two zero blocks of end marker.
    pub fn finish(mut self) -> Vec<u8> {
        self.out.extend_from_slice(&[0; 1024]);
        self.out
    }

    fn pad(&mut self) {
        let rem = self.out.len() % 512;
        if rem != 0 {
            self.out.resize(self.out.len() + 512 - rem, 0);
        }
    }

    fn header(&mut self, name: &str, kind: u8, mode: u32, size: u64, link: &str) {
        assert!(name.len() < 100 && link.len() < 100, "ustar names are short here");
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        octal(&mut h[100..108], mode as u64);
        octal(&mut h[108..116], 0); // uid
        octal(&mut h[116..124], 0); // gid
        octal(&mut h[124..136], size);
        octal(&mut h[136..148], 0); // mtime: fixed, so the same content gives the same digest
        h[148..156].copy_from_slice(b"        "); // checksum placeholder while summing
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        let sum: u32 = h.iter().map(|&b| b as u32).sum();
        octal(&mut h[148..155], sum as u64);
        h[155] = b' ';
        self.out.extend_from_slice(&h);
    }
}

/// Zero-padded octal with a trailing NUL, filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(text.as_bytes());
    field[digits] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_block_aligned_with_valid_checksums() {
        let mut t = Tar::new();
        t.dir("bin/");
        t.file("bin/x", 0o755, b"hello");
        t.symlink("bin/y", "x");
        let out = t.finish();
        assert_eq!(out.len(), 512 * 4 + 1024);
        let header = &out[512..1024];
        assert_eq!(&header[..5], b"bin/x");
        assert_eq!(&header[124..135], b"00000000005");
        let stored = u32::from_str_radix(std::str::from_utf8(&header[148..154]).unwrap(), 8).unwrap();
        let mut copy = header.to_vec();
        copy[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, copy.iter().map(|&b| b as u32).sum::<u32>());
        assert_eq!(&out[1024..1029], b"hello");
        assert_eq!(out[1536 + 156], b'2');
    }
}
