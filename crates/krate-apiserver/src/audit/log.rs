//! The log backend: one JSON event per line, to a file (rotated by size, old files
//! pruned by count and age, as upstream's lumberjack settings) or to stdout ("-").
//! Requests hand events to a bounded queue; a thread of its own does the file I/O, so a
//! slow disk never holds up a request (a full queue drops, counted as an error).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::metrics;

pub const PLUGIN: &str = "log";
/// Events waiting for the writer before new ones are dropped (upstream's batch buffer).
const QUEUE: usize = 10_000;

#[derive(Clone, Debug)]
pub struct LogOptions {
    /// A file, or "-" for stdout.
    pub path: PathBuf,
    /// Rotate past this many megabytes (0: never).
    pub max_size_mb: u64,
    /// Rotated files kept (0: all).
    pub max_backups: usize,
    /// Rotated files older than this many days are removed (0: kept).
    pub max_age_days: u64,
}

pub struct LogBackend {
    tx: SyncSender<Bytes>,
}

impl LogBackend {
    pub fn start(opts: LogOptions) -> std::io::Result<LogBackend> {
        let sink = if opts.path.as_os_str() == "-" { Sink::Stdout } else { Sink::File(RotatingFile::open(opts)?) };
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        std::thread::Builder::new().name("audit-log".into()).spawn(move || write_loop(rx, sink))?;
        Ok(LogBackend { tx })
    }

    pub fn process(&self, line: Bytes) {
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                metrics::ERRORS.with_label_values(&[PLUGIN]).inc();
                tracing::warn!("the audit log queue is full: an audit event was dropped");
            }
            Err(TrySendError::Disconnected(_)) => metrics::ERRORS.with_label_values(&[PLUGIN]).inc(),
        }
    }
}

enum Sink {
    Stdout,
    File(RotatingFile),
}

fn write_loop(rx: Receiver<Bytes>, mut sink: Sink) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let written = match &mut sink {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                batch
                    .iter()
                    .try_for_each(|l| out.write_all(l).and_then(|_| out.write_all(b"\n")))
                    .and_then(|_| out.flush())
            }
            Sink::File(f) => batch.iter().try_for_each(|l| f.write_line(l)).and_then(|_| f.flush()),
        };
        if let Err(e) = written {
            metrics::ERRORS.with_label_values(&[PLUGIN]).inc_by(batch.len() as u64);
            tracing::error!(error = %e, "writing audit events failed");
        }
    }
}

struct RotatingFile {
    opts: LogOptions,
    out: BufWriter<File>,
    size: u64,
}

impl RotatingFile {
    fn open(opts: LogOptions) -> std::io::Result<RotatingFile> {
        if let Some(dir) = opts.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&opts.path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile { opts, out: BufWriter::new(file), size })
    }

    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let limit = self.opts.max_size_mb * 1024 * 1024;
        if limit > 0 && self.size > 0 && self.size + line.len() as u64 + 1 > limit {
            self.rotate()?;
        }
        self.out.write_all(line)?;
        self.out.write_all(b"\n")?;
        self.size += line.len() as u64 + 1;
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    /// Moves the file aside as NAME-TIMESTAMP.EXT (lumberjack's naming) and starts anew.
    fn rotate(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        let backup = backup_name(&self.opts.path, jiff::Timestamp::now());
        std::fs::rename(&self.opts.path, &backup)?;
        let file = OpenOptions::new().create(true).append(true).open(&self.opts.path)?;
        self.out = BufWriter::new(file);
        self.size = 0;
        if let Err(e) = prune(&self.opts) {
            tracing::warn!(error = %e, "removing old audit logs failed");
        }
        Ok(())
    }
}

fn split_name(path: &Path) -> (String, String) {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    (stem, ext)
}

fn backup_name(path: &Path, at: jiff::Timestamp) -> PathBuf {
    let (stem, ext) = split_name(path);
    path.with_file_name(format!("{stem}-{}{ext}", at.strftime("%Y-%m-%dT%H-%M-%S%.3f")))
}

/// Rotated files of `opts.path`, newest first.
fn backups(opts: &LogOptions) -> std::io::Result<Vec<(PathBuf, SystemTime)>> {
    let (stem, ext) = split_name(&opts.path);
    let dir = opts.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let prefix = format!("{stem}-");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && name.ends_with(&ext) && entry.path() != opts.path {
            found.push((entry.path(), entry.metadata()?.modified()?));
        }
    }
    // Names sort by their timestamps.
    found.sort_by(|a, b| b.0.cmp(&a.0));
    Ok(found)
}

fn prune(opts: &LogOptions) -> std::io::Result<()> {
    let now = SystemTime::now();
    let max_age = Duration::from_secs(opts.max_age_days * 86_400);
    for (i, (path, modified)) in backups(opts)?.into_iter().enumerate() {
        let too_many = opts.max_backups > 0 && i >= opts.max_backups;
        let too_old = opts.max_age_days > 0 && now.duration_since(modified).unwrap_or_default() > max_age;
        if too_many || too_old {
            std::fs::remove_file(path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_by_size_and_keeps_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let opts = LogOptions { path: path.clone(), max_size_mb: 1, max_backups: 2, max_age_days: 0 };
        let mut f = RotatingFile::open(opts.clone()).unwrap();
        let line = vec![b'x'; 300 * 1024];
        for _ in 0..12 {
            f.write_line(&line).unwrap();
            // Distinct backup names: the timestamp has milliseconds.
            std::thread::sleep(Duration::from_millis(3));
        }
        f.flush().unwrap();
        let kept = backups(&opts).unwrap();
        assert_eq!(kept.len(), 2, "{kept:?}");
        for (p, _) in &kept {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.starts_with("audit-") && name.ends_with(".log"), "{name}");
            assert!(std::fs::metadata(p).unwrap().len() <= 1024 * 1024);
        }
        // 12 lines of 300 KiB, 3 per file: the current file holds the last 3.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * (300 * 1024 + 1));
    }

    #[test]
    fn old_backups_are_removed_by_age() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let opts = LogOptions { path: path.clone(), max_size_mb: 1, max_backups: 0, max_age_days: 1 };
        let old = dir.path().join("audit-2020-01-01T00-00-00.000.log");
        let recent = dir.path().join("audit-2026-01-01T00-00-00.000.log");
        let unrelated = dir.path().join("other-2020-01-01T00-00-00.000.log");
        for p in [&old, &recent, &unrelated] {
            std::fs::write(p, "x").unwrap();
        }
        let three_days_ago = SystemTime::now() - Duration::from_secs(3 * 86_400);
        for p in [&old, &unrelated] {
            File::options().write(true).open(p).unwrap().set_modified(three_days_ago).unwrap();
        }
        prune(&opts).unwrap();
        assert!(!old.exists() && recent.exists() && unrelated.exists());
    }

    #[test]
    fn backup_names_follow_lumberjack() {
        let at: jiff::Timestamp = "2026-01-02T03:04:05.678Z".parse().unwrap();
        assert_eq!(
            backup_name(Path::new("/var/log/audit.log"), at),
            Path::new("/var/log/audit-2026-01-02T03-04-05.678.log")
        );
    }
}
