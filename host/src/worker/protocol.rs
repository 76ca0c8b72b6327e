//! The pipe protocol between the host and a worker: length-prefixed JSON frames.
//!
//! A frame is a 4-byte little-endian length followed by that many bytes of UTF-8 JSON, one
//! message. JSON because both ends are the same program, the messages are small and
//! `serde_json` is already in the binary; a frame can be read in a hex dump when something
//! goes wrong. Frames are bounded by [`MAX_FRAME`]: a longer length is a protocol error
//! (a damaged stream, or a result far beyond what a run record can hold), never an
//! allocation of whatever the length claims.
//!
//! Host → worker ([`ToWorker`]): `call` (one handler call), `cancel` (of a call by id).
//! Worker → host ([`FromWorker`]): `hello` (first, once: protocol, pid, what loaded), `log`
//! and `progress` (while a call runs, tagged with its id), `done` (exactly once per call,
//! also after a cancel). The interruptible sleep and the cancel flag are served inside the
//! worker, so a plugin's `ctx.sleep` and `is_cancelled` never cost a round trip.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// The protocol version; a worker speaking another one refuses to start (it exits with
/// [`EXIT_PROTOCOL`] after saying so on its standard error).
pub const PROTOCOL: u32 = 1;

/// The exit code of a worker started with a protocol it does not speak.
pub(crate) const EXIT_PROTOCOL: i32 = 3;

/// The longest frame either side accepts: 64 MiB (a result or params JSON larger than that
/// does not belong in a run record).
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// What the host sends.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(crate) enum ToWorker {
    /// Run one handler.
    Call(CallFrame),
    /// Raise the cancel flag of call `id` (ignored when another or no call runs).
    Cancel {
        /// The call.
        id: u64,
    },
}

/// One handler call and the facts the plugin's context exposes.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CallFrame {
    /// Distinct per worker; repeated in every frame about the call.
    pub(crate) id: u64,
    pub(crate) handler: String,
    pub(crate) params: String,
    pub(crate) job_id: String,
    pub(crate) job_name: String,
    pub(crate) run_id: String,
    pub(crate) attempt: u32,
    pub(crate) fire_time_unix_ms: i64,
    pub(crate) deadline_unix_ms: i64,
    /// Log lines longer than this are cut in the worker, so that no frame carries more than
    /// the host would keep.
    pub(crate) max_line_bytes: usize,
}

/// What the worker sends.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(crate) enum FromWorker {
    /// The first frame: who the worker is and what it loaded.
    Hello(Hello),
    /// A run-log line of call `id`.
    Log { id: u64, level: u8, message: String },
    /// A progress report of call `id`.
    Progress {
        id: u64,
        done: u64,
        total: u64,
        note: String,
    },
    /// Call `id` returned.
    Done { id: u64, result: CallOutcome },
}

/// The worker's introduction.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub(crate) protocol: u32,
    pub(crate) pid: u32,
    /// The takt version of the worker program.
    pub(crate) takt: String,
    /// The plugin as the worker's loader saw it, or why it refused the file.
    pub(crate) plugin: Result<PluginMeta, RefusalFrame>,
}

/// A loaded plugin's description (what `LoadedPlugin` holds besides the module).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PluginMeta {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) api_version: String,
    pub(crate) handlers: Vec<HandlerFrame>,
}

/// One handler of a [`PluginMeta`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HandlerFrame {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) params_schema: Option<String>,
    pub(crate) default_timeout_ms: Option<u64>,
}

/// The loader's refusal, without the file (the host knows which file it asked for).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RefusalFrame {
    pub(crate) reason: String,
    pub(crate) fix: String,
}

/// How a call ended, as the plugin returned it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CallOutcome {
    /// The result JSON.
    Ok(String),
    /// The plugin's error, field for field.
    Err {
        kind: u8,
        message: String,
        retryable: bool,
        data: Option<String>,
    },
}

/// Writes one frame in a single `write_all` (so that frames written by several threads
/// under one lock, or one syscall, never interleave).
pub(crate) fn write_frame<T: Serialize>(w: &mut impl Write, message: &T) -> io::Result<()> {
    let mut buf = vec![0u8; 4];
    serde_json::to_writer(&mut buf, message).map_err(io::Error::other)?;
    let len = buf.len() - 4;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes exceeds the protocol's limit of {MAX_FRAME} bytes"),
        ));
    }
    buf[..4].copy_from_slice(&(len as u32).to_le_bytes());
    w.write_all(&buf)?;
    w.flush()
}

/// Reads one frame: `Ok(None)` at a clean end of the stream (between frames); an error for
/// an end inside a frame, an oversized length or a message that does not parse.
pub(crate) fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the stream ended inside a frame header",
                ));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame announces {len} bytes, more than the protocol's limit of {MAX_FRAME}"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    serde_json::from_slice(&buf)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("a bad frame: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_end_cleanly_only_between_frames() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &ToWorker::Cancel { id: 7 }).unwrap();
        write_frame(
            &mut wire,
            &FromWorker::Log {
                id: 7,
                level: 2,
                message: "ünïcode \"quoted\"\nline".into(),
            },
        )
        .unwrap();
        let mut r = &wire[..];
        assert!(matches!(
            read_frame::<ToWorker>(&mut r).unwrap(),
            Some(ToWorker::Cancel { id: 7 })
        ));
        match read_frame::<FromWorker>(&mut r).unwrap() {
            Some(FromWorker::Log { message, .. }) => {
                assert_eq!(message, "ünïcode \"quoted\"\nline")
            }
            other => panic!("{other:?}"),
        }
        assert!(
            read_frame::<ToWorker>(&mut r).unwrap().is_none(),
            "clean end"
        );

        let mut cut = &wire[..6];
        assert!(
            read_frame::<ToWorker>(&mut cut).is_err(),
            "an end inside a frame"
        );
        let mut cut = &wire[2..4];
        let e = read_frame::<ToWorker>(&mut cut).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
    }

    #[test]
    fn oversized_and_malformed_frames_are_errors_not_allocations() {
        let mut wire = (u32::MAX).to_le_bytes().to_vec();
        wire.extend_from_slice(b"{}");
        let e = read_frame::<ToWorker>(&mut &wire[..]).unwrap_err();
        assert!(
            e.to_string().contains("more than the protocol's limit"),
            "{e}"
        );
        let mut wire = 2u32.to_le_bytes().to_vec();
        wire.extend_from_slice(b"{}");
        let e = read_frame::<ToWorker>(&mut &wire[..]).unwrap_err();
        assert!(e.to_string().starts_with("a bad frame"), "{e}");
    }
}
