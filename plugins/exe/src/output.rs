//! What happens to a program's output: lines into the run log as they arrive, the last bytes
//! into a fixed-size ring for the result. Who reads the pipes is the platform's business
//! (`crate::pump`): one poll loop on Unix, a thread per pipe on Windows.
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

/// The last `capacity` bytes written, in a buffer allocated once, on the first write (a
/// program that prints nothing costs no allocation).
#[derive(Debug)]
pub(crate) struct Ring {
    buf: Vec<u8>,
    cap: usize,
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
            buf: Vec::new(),
            cap: capacity,
            head: 0,
            len: 0,
            total: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    pub(crate) fn write(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let cap = self.cap;
        if cap == 0 || data.is_empty() {
            return;
        }
        if self.buf.is_empty() {
            self.buf = vec![0; cap];
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
        if self.len == 0 {
            return Vec::new();
        }
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

/// One stream's consumer: splits what arrives into run-log lines and keeps the tail.
#[derive(Debug)]
pub(crate) struct Sink {
    stream: Stream,
    ring: Ring,
    lines: u64,
    logged: u64,
    not_logged: u64,
    cut: u64,
    log_lines: u64,
    /// The line being assembled (at most `MAX_LINE_BYTES`).
    line: Vec<u8>,
    /// Bytes of the current line beyond `MAX_LINE_BYTES`, counted, not kept.
    line_cut: u64,
    ended: bool,
}

impl Sink {
    pub(crate) fn new(stream: Stream, output_limit: usize, log_lines: u64) -> Sink {
        Sink {
            stream,
            ring: Ring::new(output_limit),
            lines: 0,
            logged: 0,
            not_logged: 0,
            cut: 0,
            log_lines,
            line: Vec::new(),
            line_cut: 0,
            ended: false,
        }
    }

    /// Takes a chunk as read from the pipe: complete lines go to the run log.
    pub(crate) fn feed(&mut self, ctx: &JobContext, chunk: &[u8]) {
        self.ring.write(chunk);
        let mut rest = chunk;
        while !rest.is_empty() {
            let (piece, newline) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
            let keep = piece.len().min(room);
            self.line.extend_from_slice(&piece[..keep]);
            self.line_cut += (piece.len() - keep) as u64;
            rest = &rest[piece.len() + usize::from(newline)..];
            if newline {
                self.emit(ctx);
            }
        }
    }

    fn emit(&mut self, ctx: &JobContext) {
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        self.lines += 1;
        if self.line_cut > 0 {
            self.cut += 1;
        }
        if self.logged < self.log_lines {
            self.logged += 1;
            let mut text = String::from_utf8_lossy(&self.line).into_owned();
            if self.line_cut > 0 {
                text.push_str(&format!(
                    " … ({} more bytes of this line cut)",
                    self.line_cut
                ));
            }
            ctx.log(self.stream.level(), &text);
        } else {
            self.not_logged += 1;
        }
        self.line.clear();
        self.line_cut = 0;
    }

    /// End-of-file: the last line without a newline, and the count of lines not logged.
    pub(crate) fn end(&mut self, ctx: &JobContext) {
        if self.ended {
            return;
        }
        self.ended = true;
        if !self.line.is_empty() || self.line_cut > 0 {
            self.emit(ctx);
        }
        if self.not_logged > 0 {
            ctx.log(
                LogLevel::INFO,
                &format!(
                    "{}: {} more lines not logged (logLines = {}); the last {} bytes are in \
                     the result",
                    self.stream.name(),
                    self.not_logged,
                    self.log_lines,
                    self.ring.capacity()
                ),
            );
        }
    }

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

/// A reader thread (Windows, where pipes cannot be polled together with the process): its
/// sink, shared so that the tail can be read even when a process outside the job keeps the
/// pipe open, and a flag raised at end-of-file.
#[cfg_attr(not(windows), allow(dead_code))]
pub(crate) struct Reader {
    pub(crate) sink: Arc<Mutex<Sink>>,
    pub(crate) done: std::sync::mpsc::Receiver<()>,
}

#[cfg_attr(not(windows), allow(dead_code))]
impl Reader {
    /// Whether end-of-file was reached, waiting until `until` at most.
    pub(crate) fn wait_eof(&self, until: std::time::Instant) -> bool {
        let left = until.saturating_duration_since(std::time::Instant::now());
        !matches!(
            self.done.recv_timeout(left),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        )
    }

    pub(crate) fn report(&self) -> StreamReport {
        self.sink
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .report()
    }
}

/// Starts a reader thread on `pipe`.
#[cfg_attr(not(windows), allow(dead_code))]
pub(crate) fn spawn(
    mut pipe: impl Read + Send + 'static,
    sink: Sink,
    ctx: JobContext,
) -> std::io::Result<Reader> {
    let sink = Arc::new(Mutex::new(sink));
    let (tx, done) = std::sync::mpsc::channel();
    let shared = sink.clone();
    let name = format!(
        "takt-exe-{}",
        shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stream
            .name()
    );
    std::thread::Builder::new().name(name).spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => shared
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .feed(&ctx, &buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .end(&ctx);
        let _ = tx.send(());
    })?;
    Ok(Reader { sink, done })
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
            let mut sink = Sink::new(Stream::Stderr, 8, 3);
            // Chunks that split lines anywhere.
            for chunk in input.as_bytes().chunks(7) {
                sink.feed(ctx, chunk);
            }
            sink.end(ctx);
            sink.report()
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
