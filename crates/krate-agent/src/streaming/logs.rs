//! Container logs as the kubelet serves them: the CRI log files the runtime writes
//! (`<RFC3339Nano> <stdout|stderr> <F|P> <message>` per line, `P` marking a part of a
//! longer line), read with the PodLogOptions — tail, since, timestamps, byte limit,
//! stream — and followed while the container runs.

use std::io::SeekFrom;
use std::time::Duration;

use bytes::Bytes;
use jiff::Timestamp;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

/// Which output of the container a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One parsed line of a CRI log file.
#[derive(Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    pub time: Timestamp,
    pub stream: Stream,
    /// A part of a longer line (tag `P`): the message carries no newline.
    pub partial: bool,
    /// The message, with its newline unless partial.
    pub message: &'a [u8],
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("timestamp is not found")]
    NoTimestamp,
    #[error("unexpected timestamp {0:?}")]
    BadTimestamp(String),
    #[error("stream type is not found")]
    NoStream,
    #[error("unexpected stream type {0:?}")]
    BadStream(String),
    #[error("log tag is not found")]
    NoTag,
}

/// Parses one line of a CRI log file (with or without its trailing newline).
pub fn parse_cri_line(line: &[u8]) -> Result<LogLine<'_>, ParseError> {
    let field = |rest: &'_ [u8]| rest.iter().position(|b| *b == b' ');
    let i = field(line).ok_or(ParseError::NoTimestamp)?;
    let text = String::from_utf8_lossy(&line[..i]);
    let time: Timestamp = text.parse().map_err(|_| ParseError::BadTimestamp(text.into_owned()))?;
    let rest = &line[i + 1..];
    let i = field(rest).ok_or(ParseError::NoStream)?;
    let stream = match &rest[..i] {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        other => return Err(ParseError::BadStream(String::from_utf8_lossy(other).into_owned())),
    };
    let rest = &rest[i + 1..];
    let i = field(rest).ok_or(ParseError::NoTag)?;
    // Tags may carry more, colon-separated; the first says full or partial.
    let partial = rest[..i].split(|b| *b == b':').next() == Some(b"P");
    let mut message = &rest[i + 1..];
    if partial && message.last() == Some(&b'\n') {
        message = &message[..message.len() - 1];
    }
    Ok(LogLine { time, stream, partial, message })
}

/// PodLogOptions as the kubelet reads them from the query.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    pub since_time: Option<Timestamp>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
    /// Only this stream (PodLogOptions.stream: Stdout or Stderr); None for All.
    pub stream: Option<Stream>,
}

/// Why the query could not be used: the kubelet's two answers.
#[derive(Debug, PartialEq, Eq)]
pub enum OptionsError {
    /// 400 `{"message": "Unable to decode query."}`
    Decode,
    /// 422 `{"message": "Invalid request."}`
    Invalid,
}

/// Go's strconv.ParseBool.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

impl LogOptions {
    /// From the query's pairs, with the kubelet's `tail` alias (`all` for no limit)
    /// and upstream's validation.
    pub fn from_query<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<LogOptions, OptionsError> {
        let mut o = LogOptions::default();
        let int = |v: &str| v.parse::<i64>().map_err(|_| OptionsError::Decode);
        let flag = |v: &str| parse_bool(v).ok_or(OptionsError::Decode);
        for (k, v) in pairs {
            match k {
                "follow" => o.follow = flag(v)?,
                "previous" => o.previous = flag(v)?,
                "timestamps" => o.timestamps = flag(v)?,
                "sinceSeconds" => o.since_seconds = Some(int(v)?),
                "sinceTime" => o.since_time = Some(v.parse().map_err(|_| OptionsError::Decode)?),
                "tailLines" => o.tail_lines = Some(int(v)?),
                "tail" if v == "all" => o.tail_lines = None,
                "tail" => o.tail_lines = Some(int(v)?),
                "limitBytes" => o.limit_bytes = Some(int(v)?),
                "stream" => {
                    o.stream = match v {
                        "" | "All" => None,
                        "Stdout" => Some(Stream::Stdout),
                        "Stderr" => Some(Stream::Stderr),
                        _ => return Err(OptionsError::Invalid),
                    }
                }
                _ => {}
            }
        }
        let invalid = o.tail_lines.is_some_and(|n| n < 0)
            || o.limit_bytes.is_some_and(|n| n < 1)
            || o.since_seconds.is_some_and(|n| n < 1)
            || (o.since_seconds.is_some() && o.since_time.is_some())
            || (o.stream.is_some() && o.tail_lines.is_some());
        if invalid {
            return Err(OptionsError::Invalid);
        }
        Ok(o)
    }

    /// The oldest time a line may have, if any.
    pub fn since(&self, now: Timestamp) -> Option<Timestamp> {
        if let Some(t) = self.since_time {
            return Some(t);
        }
        self.since_seconds.and_then(|s| now.checked_sub(jiff::SignedDuration::from_secs(s)).ok())
    }
}

/// RFC3339 with nine fraction digits, as upstream prints log timestamps.
pub fn format_timestamp(t: Timestamp) -> String {
    format!("{}.{:09}Z", t.strftime("%Y-%m-%dT%H:%M:%S"), t.subsec_nanosecond().max(0))
}

/// Whether to go on after a line.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    More,
    /// The byte limit or the tail count is reached.
    Done,
}

/// Turns parsed lines into the bytes sent to the client, keeping count of the tail
/// lines and bytes left: the pure part of upstream's ReadLogs/logWriter.
#[derive(Debug)]
pub struct Selector {
    since: Option<Timestamp>,
    timestamps: bool,
    stream: Option<Stream>,
    bytes_left: Option<u64>,
    /// Lines left to show when tail applies (not following).
    lines_left: Option<u64>,
    at_line_start: bool,
}

impl Selector {
    pub fn new(options: &LogOptions, now: Timestamp) -> Selector {
        Selector {
            since: options.since(now),
            timestamps: options.timestamps,
            stream: options.stream,
            bytes_left: options.limit_bytes.map(|n| n.max(0) as u64),
            lines_left: options.tail_lines.filter(|_| !options.follow).map(|n| n.max(0) as u64),
            at_line_start: true,
        }
    }

    /// Whether nothing at all is to be shown (tail 0 without following).
    pub fn done(&self) -> bool {
        self.lines_left == Some(0) || self.bytes_left == Some(0)
    }

    /// Appends what `line` shows to `out`.
    pub fn push(&mut self, line: &LogLine<'_>, out: &mut Vec<u8>) -> Flow {
        let starts_line = self.at_line_start;
        self.at_line_start = line.message.last().is_none_or(|b| *b == b'\n');
        let shown = self.since.is_none_or(|since| line.time >= since) && self.stream.is_none_or(|s| s == line.stream);
        if shown {
            let mut text = Vec::with_capacity(line.message.len() + 31);
            if self.timestamps && starts_line {
                text.extend_from_slice(format_timestamp(line.time).as_bytes());
                text.push(b' ');
            }
            text.extend_from_slice(line.message);
            if let Some(left) = self.bytes_left.as_mut() {
                text.truncate(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= text.len() as u64;
            }
            out.extend_from_slice(&text);
        }
        if let Some(n) = self.lines_left.as_mut() {
            *n = n.saturating_sub(1);
        }
        if self.done() { Flow::Done } else { Flow::More }
    }
}

/// Where the last `n` lines of a file start, given its last bytes (`tail`, which
/// begins at offset `tail_start` of the file): Some(offset) when found, None when more
/// of the file must be looked at. A last line without its newline counts as a line.
pub fn tail_start(tail: &[u8], tail_start: u64, n: u64) -> Option<u64> {
    if n == 0 {
        return Some(tail_start + tail.len() as u64);
    }
    let mut end = tail.len();
    // A final newline ends the last line rather than starting an empty one.
    if tail.last() == Some(&b'\n') {
        end -= 1;
    }
    let mut seen = 0;
    for i in (0..end).rev() {
        if tail[i] == b'\n' {
            seen += 1;
            if seen == n {
                return Some(tail_start + i as u64 + 1);
            }
        }
    }
    if tail_start == 0 { Some(0) } else { None }
}

/// The offset of the last `n` lines of `file`, reading backwards in blocks.
async fn find_tail(file: &mut tokio::fs::File, n: u64) -> std::io::Result<u64> {
    let len = file.metadata().await?.len();
    let mut block = 64 * 1024u64;
    loop {
        let start = len.saturating_sub(block);
        file.seek(SeekFrom::Start(start)).await?;
        let mut buf = Vec::with_capacity((len - start) as usize);
        (&mut *file).take(len - start).read_to_end(&mut buf).await?;
        if let Some(offset) = tail_start(&buf, start, n) {
            return Ok(offset);
        }
        block *= 4;
    }
}

/// Whether the container still runs (so a follower waits for more).
pub trait Liveness: Send + Sync {
    fn running(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>>;
}

/// How often a follower looks for more at the end of the file.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Streams the log at `file` to `tx` as `options` say, following while `live` says the
/// container runs; ends when done or when the receiver is gone.
pub async fn stream_log(
    mut file: tokio::fs::File,
    options: LogOptions,
    live: Box<dyn Liveness>,
    tx: mpsc::Sender<Bytes>,
) -> std::io::Result<()> {
    let mut selector = Selector::new(&options, Timestamp::now());
    if selector.done() {
        return Ok(());
    }
    if let Some(n) = options.tail_lines {
        let offset = find_tail(&mut file, n.max(0) as u64).await?;
        file.seek(SeekFrom::Start(offset)).await?;
    } else {
        file.seek(SeekFrom::Start(0)).await?;
    }
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 32 * 1024];
    let mut last_look = false;
    loop {
        let n = file.read(&mut chunk).await?;
        if n > 0 {
            pending.extend_from_slice(&chunk[..n]);
            let mut out = Vec::new();
            let mut consumed = 0;
            let mut done = false;
            while let Some(i) = pending[consumed..].iter().position(|b| *b == b'\n') {
                let line = &pending[consumed..consumed + i + 1];
                consumed += i + 1;
                match parse_cri_line(line) {
                    Ok(l) => {
                        if selector.push(&l, &mut out) == Flow::Done {
                            done = true;
                            break;
                        }
                    }
                    Err(error) => tracing::debug!(%error, "skipping a log line that does not parse"),
                }
            }
            pending.drain(..consumed);
            if !out.is_empty() && tx.send(Bytes::from(out)).await.is_err() {
                return Ok(());
            }
            if done {
                return Ok(());
            }
            continue;
        }
        // At the end of the file.
        if !options.follow || last_look {
            // What is left is an incomplete line; upstream shows it too.
            if !pending.is_empty()
                && let Ok(l) = parse_cri_line(&pending)
            {
                let mut out = Vec::new();
                selector.push(&l, &mut out);
                if !out.is_empty() {
                    let _ = tx.send(Bytes::from(out)).await;
                }
            }
            return Ok(());
        }
        if !live.running().await {
            // One more read for what was written before it stopped.
            last_look = true;
            continue;
        }
        tokio::select! {
            _ = tx.closed() => return Ok(()),
            _ = tokio::time::sleep(FOLLOW_POLL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn cri_lines_parse_with_partial_markers() {
        let l = parse_cri_line(b"2024-05-01T10:00:00.123456789Z stdout F hello world\n").unwrap();
        assert_eq!(l.time, ts("2024-05-01T10:00:00.123456789Z"));
        assert_eq!((l.stream, l.partial, l.message), (Stream::Stdout, false, &b"hello world\n"[..]));
        let p = parse_cri_line(b"2024-05-01T10:00:00+02:00 stderr P:x part\n").unwrap();
        assert_eq!((p.stream, p.partial, p.message), (Stream::Stderr, true, &b"part"[..]));
        assert_eq!(p.time, ts("2024-05-01T08:00:00Z"));
        let empty = parse_cri_line(b"2024-05-01T10:00:00Z stdout F \n").unwrap();
        assert_eq!(empty.message, b"\n");
        assert_eq!(parse_cri_line(b"nonsense"), Err(ParseError::NoTimestamp));
        assert!(matches!(parse_cri_line(b"yesterday stdout F x\n"), Err(ParseError::BadTimestamp(_))));
        assert!(matches!(parse_cri_line(b"2024-05-01T10:00:00Z stdin F x\n"), Err(ParseError::BadStream(_))));
        assert_eq!(parse_cri_line(b"2024-05-01T10:00:00Z stdout F"), Err(ParseError::NoTag));
    }

    #[test]
    fn options_come_from_the_query_and_are_validated() {
        let o = LogOptions::from_query([("follow", "true"), ("tailLines", "3"), ("timestamps", "1")]).unwrap();
        assert!(o.follow && o.timestamps && !o.previous);
        assert_eq!(o.tail_lines, Some(3));
        assert_eq!(LogOptions::from_query([("tail", "all")]).unwrap().tail_lines, None);
        assert_eq!(LogOptions::from_query([("tail", "7")]).unwrap().tail_lines, Some(7));
        assert_eq!(LogOptions::from_query([("follow", "yes")]), Err(OptionsError::Decode));
        assert_eq!(LogOptions::from_query([("tailLines", "-1")]), Err(OptionsError::Invalid));
        assert_eq!(LogOptions::from_query([("limitBytes", "0")]), Err(OptionsError::Invalid));
        assert_eq!(
            LogOptions::from_query([("sinceSeconds", "5"), ("sinceTime", "2024-01-01T00:00:00Z")]),
            Err(OptionsError::Invalid)
        );
        let now = ts("2024-05-01T10:00:00Z");
        let o = LogOptions::from_query([("sinceSeconds", "60")]).unwrap();
        assert_eq!(o.since(now), Some(ts("2024-05-01T09:59:00Z")));
    }

    fn select(options: &LogOptions, lines: &[&str]) -> String {
        let mut s = Selector::new(options, ts("2024-05-01T10:00:10Z"));
        let mut out = Vec::new();
        for line in lines {
            if s.push(&parse_cri_line(line.as_bytes()).unwrap(), &mut out) == Flow::Done {
                break;
            }
        }
        String::from_utf8(out).unwrap()
    }

    const LINES: &[&str] = &[
        "2024-05-01T10:00:01Z stdout F one\n",
        "2024-05-01T10:00:02Z stderr F two\n",
        "2024-05-01T10:00:03.5Z stdout P thr\n",
        "2024-05-01T10:00:04Z stdout F ee\n",
        "2024-05-01T10:00:05Z stdout F four\n",
    ];

    #[test]
    fn partial_lines_join_and_timestamps_start_lines() {
        assert_eq!(select(&LogOptions::default(), LINES), "one\ntwo\nthree\nfour\n");
        let o = LogOptions { timestamps: true, ..Default::default() };
        assert_eq!(
            select(&o, &LINES[2..4]),
            "2024-05-01T10:00:03.500000000Z three\n",
            "a joined line has the timestamp of its first part"
        );
    }

    #[test]
    fn since_stream_and_byte_limits_select() {
        let o = LogOptions { since_seconds: Some(7), ..Default::default() };
        assert_eq!(select(&o, LINES), "three\nfour\n");
        let o = LogOptions { stream: Some(Stream::Stderr), ..Default::default() };
        assert_eq!(select(&o, LINES), "two\n");
        let o = LogOptions { limit_bytes: Some(6), ..Default::default() };
        assert_eq!(select(&o, LINES), "one\ntw");
        let o = LogOptions { tail_lines: Some(2), ..Default::default() };
        assert_eq!(select(&o, LINES), "one\ntwo\n", "tail counts lines read from its start");
        let o = LogOptions { tail_lines: Some(0), ..Default::default() };
        assert!(Selector::new(&o, Timestamp::now()).done());
    }

    #[test]
    fn tail_finds_where_the_last_lines_start() {
        let file = b"a\nbb\nccc\n";
        assert_eq!(tail_start(file, 0, 1), Some(5));
        assert_eq!(tail_start(file, 0, 2), Some(2));
        assert_eq!(tail_start(file, 0, 3), Some(0));
        assert_eq!(tail_start(file, 0, 10), Some(0));
        assert_eq!(tail_start(file, 0, 0), Some(9));
        // Only the end of a longer file: not enough lines in it yet.
        assert_eq!(tail_start(&file[3..], 3, 3), None);
        assert_eq!(tail_start(&file[3..], 3, 1), Some(5));
        // A last line still being written counts.
        assert_eq!(tail_start(b"a\nbb", 0, 1), Some(2));
    }

    #[test]
    fn timestamps_print_nine_fraction_digits() {
        assert_eq!(format_timestamp(ts("2024-05-01T10:00:00.1Z")), "2024-05-01T10:00:00.100000000Z");
        assert_eq!(format_timestamp(ts("2024-05-01T12:00:00+02:00")), "2024-05-01T10:00:00.000000000Z");
    }
}
