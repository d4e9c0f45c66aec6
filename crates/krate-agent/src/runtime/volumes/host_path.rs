//! hostPath type checks, as upstream's hostPath plugin makes them before mounting:
//! DirectoryOrCreate and FileOrCreate create what is missing (0755 directories, an
//! empty 0644 file), the other types must already be what they say. Blocking std::fs
//! calls: run them on a blocking thread.

use std::fs::FileType;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

fn file_type(path: &Path) -> Option<FileType> {
    std::fs::metadata(path).ok().map(|m| m.file_type())
}

/// Checks (and for the *OrCreate types, makes) `path` as `type_` says; the error is
/// upstream's message.
pub fn check(path: &Path, type_: Option<&str>) -> Result<(), String> {
    let shown = path.display();
    let is = |f: fn(&FileType) -> bool| file_type(path).as_ref().is_some_and(f);
    match type_.unwrap_or("") {
        "" => Ok(()),
        "DirectoryOrCreate" if file_type(path).is_none() => {
            std::fs::create_dir_all(path).map_err(|e| format!("hostPath type check failed: {shown}: {e}"))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
        }
        "DirectoryOrCreate" | "Directory" => {
            if is(FileType::is_dir) {
                Ok(())
            } else {
                Err(format!("hostPath type check failed: {shown} is not a directory"))
            }
        }
        "FileOrCreate" if file_type(path).is_none() => {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("hostPath type check failed: {shown}: {e}"))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).map_err(|e| e.to_string())
        }
        "FileOrCreate" | "File" => {
            if is(FileType::is_file) {
                Ok(())
            } else {
                Err(format!("hostPath type check failed: {shown} is not a file"))
            }
        }
        "Socket" => {
            if is(FileType::is_socket) {
                Ok(())
            } else {
                Err(format!("hostPath type check failed: {shown} is not a socket file"))
            }
        }
        "CharDevice" => {
            if is(FileType::is_char_device) {
                Ok(())
            } else {
                Err(format!("hostPath type check failed: {shown} is not a character device"))
            }
        }
        "BlockDevice" => {
            if is(FileType::is_block_device) {
                Ok(())
            } else {
                Err(format!("hostPath type check failed: {shown} is not a block device"))
            }
        }
        other => Err(format!("{other} is an invalid volume type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_checked_and_created() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("made/deeper");
        check(&d, Some("DirectoryOrCreate")).unwrap();
        assert!(d.is_dir());
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o755);
        check(&d, Some("Directory")).unwrap();
        let f = dir.path().join("file");
        check(&f, Some("FileOrCreate")).unwrap();
        assert!(f.is_file());
        check(&f, Some("File")).unwrap();
        check(&f, None).unwrap();
        assert_eq!(
            check(&f, Some("Directory")),
            Err(format!("hostPath type check failed: {} is not a directory", f.display()))
        );
        assert_eq!(check(&d, Some("File")), Err(format!("hostPath type check failed: {} is not a file", d.display())));
        assert_eq!(
            check(&f, Some("Socket")),
            Err(format!("hostPath type check failed: {} is not a socket file", f.display()))
        );
        let missing = dir.path().join("missing");
        assert!(check(&missing, Some("Directory")).is_err());
        assert!(!missing.exists());
        let sock = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        check(&sock, Some("Socket")).unwrap();
        assert!(check(Path::new("/dev/null"), Some("CharDevice")).is_ok());
        assert_eq!(check(&f, Some("Weird")), Err("Weird is an invalid volume type".into()));
    }
}
