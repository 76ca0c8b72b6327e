//! One reader thread per output pipe: lines into the run log as they arrive, the last bytes
//! into a fixed-size ring for the result.
//!
//! Memory per stream is fixed whatever the program prints: the read buffer (64 KiB), one line
//! of at most [`MAX_LINE_BYTES`](crate::params::MAX_LINE_BYTES) (the rest of a longer line is
//! counted, not kept) and the ring of `outputLimit` bytes. The pipe is always drained, so a
//! chatty program never blocks on a full pipe, and after `logLines` lines the run log only
//! gets a count.

use std::io::Read;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use takt_plugin_api::abi::LogLevel;
use takt_plugin_api::sdk::JobContext;

use crate::params::MAX_LINE_BYTES;

/// The last `capacity` bytes written, in a buffer allocated once.
#[derive(Debug)]
pub(crate) struct Ring {
    buf: Vec<u8>,
    /// Where the next byte goes.
    head: usize,
    /// Bytes held (≤ capacity).
    len: usize,
    /// Bytes ever written.
    total: u64,
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Ring {
        Ring {
            buf: vec![0; capacity],
            head: 0,
            len: 0,
            total: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn write(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let cap = self.buf.len();
        if cap == 0 {
            return;
        }
        if data.len() >= cap {
            data = &data[data.len() - cap..];
            self.buf.copy_from_slice(data);
            self.head = 0;
            self.len = cap;
            return;
        }
        let first = data.len().min(cap - self.head);
        self.buf[self.head..self.head + first].copy_from_slice(&data[..first]);
        self.buf[..data.len() - first].copy_from_slice(&data[first..]);
        self.head = (self.head + data.len()) % cap;
        self.len = (self.len + data.len()).min(cap);
    }

    /// The held bytes, oldest first.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let cap = self.buf.len();
        let start = (self.head + cap - self.len) % cap.max(1);
        let mut out = Vec::with_capacity(self.len);
        let first = self.len.min(cap - start);
        out.extend_from_slice(&self.buf[start..start + first]);
        out.extend_from_slice(&self.buf[..self.len - first]);
        out
    }

    /// Whether bytes were written that are no longer held.
    pub(crate) fn dropped_any(&self) -> bool {
        self.total > self.len as u64
    }
}

/// Which pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    /// stdout lines are info, stderr lines warnings.
    fn level(self) -> LogLevel {
        match self {
            Stream::Stdout => LogLevel::INFO,
            Stream::Stderr => LogLevel::WARN,
        }
    }
}

/// What one stream produced, for the result JSON.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StreamReport {
    /// Bytes the program wrote.
    pub bytes: u64,
    /// Lines (a last line without a newline counts).
    pub lines: u64,
    /// The last `outputLimit` bytes, as text (invalid UTF-8 replaced).
    pub tail: String,
    /// Whether `tail` is not the whole output.
    pub tail_truncated: bool,
    /// Lines not forwarded to the run log (over `logLines`).
    pub lines_not_logged: u64,
    /// Lines cut in the run log because they were longer than 16 KiB.
    pub long_lines_cut: u64,
}

/// The reader's state, shared with the handler so that a tail can be read even when a
/// process outside the group keeps the pipe open and the reader never sees end-of-file.
#[derive(Debug)]
pub(crate) struct Shared {
    ring: Ring,
    lines: u64,
    logged: u64,
    not_logged: u64,
    cut: u64,
}

impl Shared {
    pub(crate) fn report(&self) -> StreamReport {
        let mut bytes = self.ring.bytes();
        if self.ring.dropped_any() {
            // Start at a character boundary: drop UTF-8 continuation bytes cut in half.
            let skip = bytes
                .iter()
                .take(3)
                .take_while(|b| (**b & 0xC0) == 0x80)
                .count();
            bytes.drain(..skip);
        }
        StreamReport {
            bytes: self.ring.total,
            lines: self.lines,
            tail: String::from_utf8_lossy(&bytes).into_owned(),
            tail_truncated: self.ring.dropped_any(),
            lines_not_logged: self.not_logged,
            long_lines_cut: self.cut,
        }
    }
}

/// A running reader: its state and a flag raised when it reached end-of-file.
pub(crate) struct Reader {
    pub(crate) shared: Arc<Mutex<Shared>>,
    pub(crate) done: std::sync::mpsc::Receiver<()>,
}

impl Reader {
    /// Waits up to `wait` for end-of-file, then reports what was read.
    pub(crate) fn finish(&self, wait: std::time::Duration) -> (StreamReport, bool) {
        let eof = !matches!(
            self.done.recv_timeout(wait),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        );
        let report = self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .report();
        (report, eof)
    }
}

/// Starts the reader thread of `pipe`.
pub(crate) fn spawn(
    pipe: impl Read + Send + 'static,
    stream: Stream,
    ctx: JobContext,
    output_limit: usize,
    log_lines: u64,
) -> std::io::Result<Reader> {
    let shared = Arc::new(Mutex::new(Shared {
        ring: Ring::new(output_limit),
        lines: 0,
        logged: 0,
        not_logged: 0,
        cut: 0,
    }));
    let (tx, done) = std::sync::mpsc::channel();
    let state = shared.clone();
    std::thread::Builder::new()
        .name(format!("takt-exe-{}", stream.name()))
        .spawn(move || {
            read(pipe, stream, &ctx, &state, log_lines);
            let _ = tx.send(());
        })?;
    Ok(Reader { shared, done })
}

fn read(
    mut pipe: impl Read,
    stream: Stream,
    ctx: &JobContext,
    state: &Mutex<Shared>,
    log_lines: u64,
) {
    let mut buf = vec![0u8; 64 << 10];
    let mut line: Vec<u8> = Vec::new();
    let mut line_cut = 0u64;
    let emit = |line: &mut Vec<u8>, cut: &mut u64| {
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let forward = {
            let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
            s.lines += 1;
            if *cut > 0 {
                s.cut += 1;
            }
            if s.logged < log_lines {
                s.logged += 1;
                true
            } else {
                s.not_logged += 1;
                false
            }
        };
        if forward {
            let mut text = String::from_utf8_lossy(line).into_owned();
            if *cut > 0 {
                text.push_str(&format!(" … ({cut} more bytes of this line cut)"));
            }
            ctx.log(stream.level(), &text);
        }
        line.clear();
        *cut = 0;
    };
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ring
            .write(chunk);
        let mut rest = chunk;
        while !rest.is_empty() {
            let (piece, newline) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(line.len());
            let keep = piece.len().min(room);
            line.extend_from_slice(&piece[..keep]);
            line_cut += (piece.len() - keep) as u64;
            rest = &rest[piece.len() + usize::from(newline)..];
            if newline {
                emit(&mut line, &mut line_cut);
            }
        }
    }
    if !line.is_empty() || line_cut > 0 {
        emit(&mut line, &mut line_cut);
    }
    let s = state.lock().unwrap_or_else(PoisonError::into_inner);
    if s.not_logged > 0 {
        let note = format!(
            "{}: {} more lines not logged (logLines = {log_lines}); the last {} bytes are in \
             the result",
            stream.name(),
            s.not_logged,
            s.ring.capacity()
        );
        drop(s);
        ctx.log(LogLevel::INFO, &note);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_bytes() {
        let mut r = Ring::new(5);
        r.write(b"ab");
        assert_eq!(r.bytes(), b"ab");
        r.write(b"cde");
        assert_eq!(r.bytes(), b"abcde");
        r.write(b"fg");
        assert_eq!(r.bytes(), b"cdefg");
        assert!(r.dropped_any());
        r.write(b"0123456789");
        assert_eq!(r.bytes(), b"56789");
        r.write(b"x");
        assert_eq!(r.bytes(), b"6789x");
        assert_eq!(r.total, 18);
        assert_eq!(r.buf.len(), 5, "never grows");
        let mut empty = Ring::new(0);
        empty.write(b"abc");
        assert!(empty.bytes().is_empty());
    }

    #[test]
    fn lines_are_split_cut_and_counted() {
        let host = takt_plugin_api::sdk::TestHost::new();
        let long = "y".repeat(MAX_LINE_BYTES + 10);
        let input = format!("one\r\ntwo\n{long}\nlast");
        let report = host.run(|ctx| {
            let r = spawn(
                std::io::Cursor::new(input.into_bytes()),
                Stream::Stderr,
                ctx.clone(),
                8,
                3,
            )
            .unwrap();
            r.finish(std::time::Duration::from_secs(10)).0
        });
        assert_eq!(report.lines, 4);
        assert_eq!(report.tail, "yyy\nlast");
        assert!(report.tail.len() <= 8 && report.tail_truncated);
        assert_eq!(report.lines_not_logged, 1);
        assert_eq!(report.long_lines_cut, 1);
        let logs = host.logs();
        assert_eq!(logs[0], (LogLevel::WARN, "one".to_string()));
        assert_eq!(logs[1], (LogLevel::WARN, "two".to_string()));
        assert!(logs[2].1.ends_with("(10 more bytes of this line cut)"));
        assert!(logs[3].1.contains("1 more lines not logged"), "{logs:?}");
    }
}
