//! Memory-backed volume directories: tmpfs mounts for emptyDir medium Memory, and for
//! secret and projected volumes (kept off the disk, as upstream's kubelet does), and
//! unmounting whatever is mounted under a pod's directory when it goes. Blocking
//! syscalls: run them on a blocking thread.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Whether `path` is a mount point (its device differs from its parent's).
pub fn is_mount_point(path: &Path) -> io::Result<bool> {
    let meta = std::fs::symlink_metadata(path)?;
    let Some(parent) = path.parent() else { return Ok(true) };
    let parent_meta = std::fs::symlink_metadata(parent)?;
    Ok(meta.dev() != parent_meta.dev() || meta.ino() == parent_meta.ino())
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput.into())
}

/// Mounts a tmpfs at `dir` (created if missing) unless one is there already; `size`
/// in bytes limits it (emptyDir sizeLimit).
pub fn ensure_tmpfs(dir: &Path, mode: u32, size: Option<u64>) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if is_mount_point(dir)? {
        return Ok(());
    }
    let mut options = format!("mode={mode:o}");
    if let Some(size) = size.filter(|s| *s > 0) {
        options.push_str(&format!(",size={size}"));
    }
    let target = c_path(dir)?;
    let data = CString::new(options).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Undoes the `\NNN` octal escapes of /proc/self/mountinfo paths.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let n = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(n);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&out))
}

/// Mount points at or under `dir`, deepest first, from mountinfo text.
pub fn mounts_under(mountinfo: &str, dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    found.dedup();
    found
}

/// Detaches every mount at or under `dir`.
pub fn unmount_all_under(dir: &Path) -> io::Result<()> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    for mount in mounts_under(&info, dir) {
        let target = c_path(&mount)?;
        // SAFETY: target is a valid NUL-terminated path.
        let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) && e.raw_os_error() != Some(libc::ENOENT) {
                return Err(e);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_paths_under_a_dir_deepest_first() {
        let info = "\
24 27 0:6 / /dev rw - devtmpfs devtmpfs rw\n\
50 27 0:40 / /data/pods/u1/volumes/kubernetes.io~secret/s rw - tmpfs tmpfs rw\n\
51 27 0:41 / /data/pods/u1/volumes/kubernetes.io~empty-dir/with\\040space rw - tmpfs tmpfs rw\n\
52 27 0:42 / /data/pods/u10/volumes/x rw - tmpfs tmpfs rw\n\
53 50 0:43 / /data/pods/u1/volumes/kubernetes.io~secret/s/deeper rw - tmpfs tmpfs rw\n";
        let found = mounts_under(info, Path::new("/data/pods/u1"));
        assert_eq!(
            found,
            vec![
                PathBuf::from("/data/pods/u1/volumes/kubernetes.io~empty-dir/with space"),
                PathBuf::from("/data/pods/u1/volumes/kubernetes.io~secret/s/deeper"),
                PathBuf::from("/data/pods/u1/volumes/kubernetes.io~secret/s"),
            ]
        );
    }
}
