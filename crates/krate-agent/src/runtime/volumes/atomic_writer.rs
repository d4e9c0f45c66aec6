//! Writes a volume's files all at once, as the kubelet's AtomicWriter does, so a
//! container never sees half of an update: the files go to a fresh timestamped
//! directory (`..2026_01_02_15_04_05.NNN`), the `..data` symlink is pointed at it by
//! renaming a new symlink over it, and each top-level name in the volume is a symlink
//! through `..data` (`key -> ..data/key`). Old names and the old directory are then
//! removed. Blocking std::fs calls: run it on a blocking thread.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// The symlink to the current timestamped directory.
pub const DATA_DIR_NAME: &str = "..data";
const DATA_DIR_TMP_NAME: &str = "..data_tmp";
/// Upstream's limit on a projected path.
const MAX_PATH_LENGTH: usize = 4096;
const MAX_FILE_NAME_LENGTH: usize = 255;

/// One file of a volume: its bytes and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// A volume's files by path relative to the volume.
pub type Payload = BTreeMap<String, FileProjection>;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("invalid path {path:?}: {why}")]
    InvalidPath { path: String, why: &'static str },
    #[error("{what} {}: {source}", .path.display())]
    Io { what: &'static str, path: PathBuf, source: io::Error },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> WriteError {
    let path = path.to_path_buf();
    move |source| WriteError::Io { what, path, source }
}

/// Checks a payload path as upstream's validatePath does and returns it cleaned
/// (`a//b/./c` is `a/b/c`).
pub fn clean_path(path: &str) -> Result<String, WriteError> {
    let invalid = |why| Err(WriteError::InvalidPath { path: path.to_string(), why });
    if path.is_empty() {
        return invalid("must not be empty");
    }
    if path.len() > MAX_PATH_LENGTH {
        return invalid("longer than 4096 characters");
    }
    if path.starts_with('/') {
        return invalid("must be relative");
    }
    let mut parts = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(c) => {
                let c = c.to_string_lossy();
                if c.len() > MAX_FILE_NAME_LENGTH {
                    return invalid("has an element longer than 255 characters");
                }
                parts.push(c.into_owned());
            }
            Component::CurDir => {}
            _ => return invalid("must not contain '..'"),
        }
    }
    if parts.is_empty() {
        return invalid("must name a file");
    }
    if parts[0].starts_with("..") {
        return invalid("must not start with '..'");
    }
    Ok(parts.join("/"))
}

/// The payload with cleaned paths; invalid paths are an error.
fn validate(payload: &Payload) -> Result<Payload, WriteError> {
    payload.iter().map(|(path, file)| Ok((clean_path(path)?, file.clone()))).collect()
}

fn first_component(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

/// Writes `payload` into `target` atomically. Returns whether anything changed (an
/// identical payload leaves the volume alone).
pub fn write(target: &Path, payload: &Payload) -> Result<bool, WriteError> {
    let payload = validate(payload)?;
    std::fs::create_dir_all(target).map_err(io_err("creating", target))?;
    let data_link = target.join(DATA_DIR_NAME);
    let old_dir_name = std::fs::read_link(&data_link).ok();
    let old_dir = old_dir_name.as_ref().map(|n| target.join(n));
    let old_files = match &old_dir {
        Some(dir) if dir.is_dir() => Some(read_tree(dir)?),
        _ => None,
    };
    if old_files.as_ref() == Some(&payload) {
        return Ok(false);
    }

    let ts_dir = new_timestamp_dir(target)?;
    if let Err(e) = write_payload(&ts_dir, &payload) {
        let _ = std::fs::remove_dir_all(&ts_dir);
        return Err(e);
    }
    let ts_name = ts_dir.file_name().map(PathBuf::from).unwrap_or_default();
    let tmp_link = target.join(DATA_DIR_TMP_NAME);
    match std::fs::remove_file(&tmp_link) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err("removing", &tmp_link)(e)),
        _ => {}
    }
    std::os::unix::fs::symlink(&ts_name, &tmp_link).map_err(io_err("linking", &tmp_link))?;
    std::fs::rename(&tmp_link, &data_link).map_err(io_err("renaming over", &data_link))?;

    // The user-visible names: one symlink per top-level element, through ..data.
    let new_names: BTreeSet<&str> = payload.keys().map(|p| first_component(p)).collect();
    for name in &new_names {
        let link = target.join(name);
        let want = Path::new(DATA_DIR_NAME).join(name);
        match std::fs::read_link(&link) {
            Ok(current) if current == want => continue,
            Ok(_) => std::fs::remove_file(&link).map_err(io_err("removing", &link))?,
            Err(_) if link.symlink_metadata().is_ok() => {
                return Err(WriteError::Io {
                    what: "replacing (not a symlink)",
                    path: link,
                    source: io::ErrorKind::AlreadyExists.into(),
                });
            }
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&want, &link).map_err(io_err("linking", &link))?;
    }
    if let Some(old) = &old_files {
        let old_names: BTreeSet<&str> = old.keys().map(|p| first_component(p)).collect();
        for gone in old_names.difference(&new_names) {
            let link = target.join(gone);
            if let Err(e) = std::fs::remove_file(&link)
                && e.kind() != io::ErrorKind::NotFound
            {
                return Err(io_err("removing", &link)(e));
            }
        }
    }
    if let Some(dir) = old_dir
        && dir != ts_dir
        && let Err(e) = std::fs::remove_dir_all(&dir)
        && e.kind() != io::ErrorKind::NotFound
    {
        return Err(io_err("removing", &dir)(e));
    }
    Ok(true)
}

/// A new `..YYYY_MM_DD_HH_MM_SS.N` directory in `target`, mode 0755 whatever the umask.
fn new_timestamp_dir(target: &Path) -> Result<PathBuf, WriteError> {
    let now = jiff::Timestamp::now();
    let stamp = now.strftime("..%Y_%m_%d_%H_%M_%S").to_string();
    let nanos = now.subsec_nanosecond();
    for attempt in 0..1000u32 {
        let dir = target.join(format!("{stamp}.{nanos}{attempt}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(io_err("setting the mode of", &dir))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err("creating", &dir)(e)),
        }
    }
    Err(WriteError::Io {
        what: "creating a timestamped directory in",
        path: target.to_path_buf(),
        source: io::ErrorKind::AlreadyExists.into(),
    })
}

fn write_payload(dir: &Path, payload: &Payload) -> Result<(), WriteError> {
    for (path, file) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent()
            && parent != dir
        {
            std::fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
            let mut p = parent;
            while p != dir {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
                    .map_err(io_err("setting the mode of", p))?;
                p = p.parent().unwrap_or(dir);
            }
        }
        std::fs::write(&full, &file.data).map_err(io_err("writing", &full))?;
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(file.mode & 0o7777))
            .map_err(io_err("setting the mode of", &full))?;
    }
    Ok(())
}

/// The files under `dir` (a timestamped directory) as a payload.
fn read_tree(dir: &Path) -> Result<Payload, WriteError> {
    let mut out = Payload::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, prefix)) = stack.pop() {
        for entry in std::fs::read_dir(&path).map_err(io_err("reading", &path))? {
            let entry = entry.map_err(io_err("reading", &path))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
            let meta = entry.path().symlink_metadata().map_err(io_err("reading", &entry.path()))?;
            if meta.is_dir() {
                stack.push((entry.path(), rel));
            } else {
                let data = std::fs::read(entry.path()).map_err(io_err("reading", &entry.path()))?;
                out.insert(rel, FileProjection { data, mode: meta.permissions().mode() & 0o7777 });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection { data: data.as_bytes().to_vec(), mode }
    }

    fn timestamp_dirs(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("..") && n != DATA_DIR_NAME)
            .collect();
        names.sort();
        names
    }

    #[test]
    fn paths_are_checked_and_cleaned() {
        assert_eq!(clean_path("a//b/./c").unwrap(), "a/b/c");
        assert_eq!(clean_path("key").unwrap(), "key");
        for bad in ["", "/abs", "../up", "a/../../b", "..data/x", "..hidden", "."] {
            assert!(clean_path(bad).is_err(), "{bad:?} accepted");
        }
        assert!(clean_path("a/..b").is_ok(), "only a leading '..' element is reserved");
    }

    #[test]
    fn writes_files_behind_the_data_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("vol");
        let payload =
            Payload::from([("a".to_string(), file("alpha", 0o644)), ("sub/dir/b".to_string(), file("beta", 0o400))]);
        assert!(write(&target, &payload).unwrap());
        assert_eq!(std::fs::read_to_string(target.join("a")).unwrap(), "alpha");
        assert_eq!(std::fs::read_to_string(target.join("sub/dir/b")).unwrap(), "beta");
        assert_eq!(std::fs::read_link(target.join("a")).unwrap(), Path::new("..data/a"));
        assert_eq!(std::fs::read_link(target.join("sub")).unwrap(), Path::new("..data/sub"));
        let ts = std::fs::read_link(target.join(DATA_DIR_NAME)).unwrap();
        assert!(ts.to_string_lossy().starts_with("..20"), "{ts:?}");
        let mode = |p: &str| std::fs::metadata(target.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("a"), 0o644);
        assert_eq!(mode("sub/dir/b"), 0o400);
        assert_eq!(mode(&format!("{}/sub", ts.display())), 0o755);
        assert_eq!(mode(&ts.to_string_lossy()), 0o755);
    }

    #[test]
    fn an_update_swaps_the_data_dir_and_drops_removed_names() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("vol");
        let first = Payload::from([("a".to_string(), file("1", 0o644)), ("b".to_string(), file("2", 0o644))]);
        assert!(write(&target, &first).unwrap());
        let before = timestamp_dirs(&target);
        assert_eq!(before.len(), 1);
        // The same payload again changes nothing.
        assert!(!write(&target, &first).unwrap());
        assert_eq!(timestamp_dirs(&target), before);
        // A mode change alone is a change.
        let chmod = Payload::from([("a".to_string(), file("1", 0o600)), ("b".to_string(), file("2", 0o644))]);
        assert!(write(&target, &chmod).unwrap());

        let second = Payload::from([("a".to_string(), file("one", 0o644)), ("c".to_string(), file("3", 0o644))]);
        assert!(write(&target, &second).unwrap());
        let after = timestamp_dirs(&target);
        assert_eq!(after.len(), 1, "old timestamped dirs removed: {after:?}");
        assert_ne!(after, before);
        assert_eq!(std::fs::read_to_string(target.join("a")).unwrap(), "one");
        assert_eq!(std::fs::read_to_string(target.join("c")).unwrap(), "3");
        assert!(target.join("b").symlink_metadata().is_err(), "b removed");
        assert!(!target.join(DATA_DIR_TMP_NAME).exists());

        // Empty payload: an empty volume, still with ..data.
        assert!(write(&target, &Payload::new()).unwrap());
        let names: Vec<String> = std::fs::read_dir(&target)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| n.starts_with("..")), "{names:?}");
    }

    #[test]
    fn invalid_payload_paths_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("vol");
        let bad = Payload::from([("ok".to_string(), file("x", 0o644)), ("../escape".to_string(), file("x", 0o644))]);
        assert!(matches!(write(&target, &bad), Err(WriteError::InvalidPath { .. })));
        assert!(!dir.path().join("escape").exists());
        assert!(!target.join("ok").exists());
    }
}
