//! A transport wrapper under tiberius that watches the TDS traffic and can cancel a request.
//!
//! tiberius hides two things a stored-procedure executor needs: `Client::query` drops the
//! DONE/DONEPROC/DONEINPROC tokens (the rows-affected counts) and the INFO tokens (PRINT
//! output), and it cannot send an ATTENTION packet (the protocol's cancel). Rather than fork
//! the driver, [`watch`] puts a passthrough stream between tiberius and the socket:
//!
//! - the read side scans the server's bytes as TDS packets and tokens *after* tiberius got
//!   them, without ever changing or holding them back, and sums up what it saw per request
//!   ([`Summary`]);
//! - the write side injects an ATTENTION packet when asked ([`Watch::attention`]), and only
//!   ever at a packet boundary of what tiberius wrote.
//!
//! The scanner is an incremental parser of the server token stream of TDS 7.3/7.4 (MS-TDS):
//! it keeps only a bounded piece of one token (a header, one column's metadata, an INFO
//! message) and skips row values by their length prefixes, so a result of any size costs a
//! few counters. It understands only plaintext TDS: tiberius must have negotiated no
//! encryption after login (see [`Watch::arm`]). When it meets something it cannot parse it
//! says so in [`Summary::gave_up`] and resumes at the next server message, since every
//! message starts at a token boundary.
//!
//! Depends only on `std` and the `futures-io` traits that tiberius uses.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use futures_io::{AsyncRead, AsyncWrite};

/// Wraps `inner` (the socket tiberius will talk through) and returns it with its [`Watch`].
///
/// Give the [`Watched`] stream to `tiberius::Client::connect`; keep the [`Watch`] (it is
/// `Clone + Send + Sync`) to arm the scanner, read summaries and cancel from another task.
pub(crate) fn watch<S>(inner: S) -> (Watched<S>, Watch) {
    let shared = Arc::new(Mutex::new(State::default()));
    let watched = Watched {
        inner,
        shared: Arc::clone(&shared),
        attention: None,
    };
    (watched, Watch { shared })
}

/// The passthrough stream: every byte read or written goes through unchanged; the only
/// addition is the 8-byte ATTENTION packet, written between two packets of tiberius'.
pub(crate) struct Watched<S> {
    inner: S,
    shared: Arc<Mutex<State>>,
    /// An ATTENTION packet being written; kept here, not in the shared state, because only
    /// the stream's own poll methods may touch `inner`.
    attention: Option<Outgoing>,
}

impl<S> fmt::Debug for Watched<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watched").finish_non_exhaustive()
    }
}

/// The handle to a [`Watched`] stream's scanner and cancel; clones share one state.
#[derive(Clone)]
pub(crate) struct Watch {
    shared: Arc<Mutex<State>>,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

/// What the scanner saw of the server's answer since [`Watch::begin_request`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The sum of the counts of DONE/DONEPROC/DONEINPROC tokens that carry the DONE_COUNT
    /// status bit and whose CurCmd is INSERT, UPDATE, DELETE or MERGE: what ADO.NET reports as
    /// RecordsAffected. `None` when no such token came (a SELECT only, or SET NOCOUNT ON).
    pub(crate) rows_affected: Option<u64>,
    /// INFO tokens in arrival order: PRINT, and RAISERROR with a severity of 10 or less.
    pub(crate) messages: Vec<Message>,
    /// The last RETURNSTATUS token: a procedure's `RETURN` value.
    pub(crate) return_status: Option<i32>,
    /// The whole ATTENTION packet was written to the socket.
    pub(crate) attention_sent: bool,
    /// A DONE token with the DONE_ATTN status bit arrived in the response: the server
    /// acknowledged the cancel, and tiberius consumed the acknowledgement with the response.
    pub(crate) attention_acknowledged: bool,
    /// The server's response message to the request ended (its last packet was read).
    pub(crate) response_complete: bool,
    /// Server messages that began after the response had ended (and before the next
    /// [`Watch::begin_request`]). tiberius reads one message per request, so each would be
    /// taken as the answer to the next request: see [`Summary::out_of_step`].
    pub(crate) late_messages: u32,
    /// Writing the ATTENTION packet failed (the socket's error; the next read fails too).
    pub(crate) attention_error: Option<String>,
    /// The scanner met something it cannot parse and skipped the rest of that server message,
    /// so the fields above may miss what followed. Bytes still passed through unchanged.
    pub(crate) gave_up: Option<String>,
}

impl Summary {
    /// Whether tiberius and the server are out of step: the server sent, or still owes, a
    /// message that no request of tiberius' asked for, which tiberius would read as the
    /// answer to the next request (and that one's answer as the answer to the one after).
    ///
    /// It happens when a cancel crossed the end of the response: the server had finished, so
    /// it acknowledges the ATTENTION with a message of its own (the iridium emulator always
    /// does so, as it never interrupts a batch). Once the response is complete this is
    /// final; such a connection must be closed, not reused.
    pub(crate) fn out_of_step(&self) -> bool {
        let owed = self.attention_sent && self.response_complete && !self.attention_acknowledged;
        // An acknowledgement without a cancel of this request's is an earlier cancel's, read
        // as this request's answer: the real answer is still to come.
        let stale = self.attention_acknowledged && !self.attention_sent;
        self.late_messages > 0 || owed || stale
    }
}

/// One INFO token (MS-TDS 2.2.7.13).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Message {
    /// The message number (0 for PRINT, 50000 for RAISERROR with a text).
    pub(crate) number: i32,
    /// The state the statement gave.
    pub(crate) state: u8,
    /// The severity class (10 or less for an INFO token).
    pub(crate) class: u8,
    /// The message text.
    pub(crate) text: String,
    /// The server's name.
    pub(crate) server: String,
    /// The procedure that raised it; empty for a batch.
    pub(crate) procedure: String,
    /// The line in the batch or procedure.
    pub(crate) line: u32,
}

impl Watch {
    /// Starts scanning: from the next byte on, server→client bytes are read as TDS packets
    /// and client→server bytes are tracked for packet boundaries. Before it, bytes pass
    /// untouched and unread.
    ///
    /// Call it once `Client::connect` has returned, before the first request: the login
    /// response has then been read to its end and the server sends nothing unasked, so both
    /// directions stand at a packet boundary, which is what the scanner assumes.
    ///
    /// The scanner needs plaintext TDS. tiberius 0.12.3 with `Encrypt=DANGER_PLAINTEXT`
    /// (EncryptionLevel::NotSupported) never starts TLS; with `Encrypt=false` (Off) against a
    /// server that answers "off", only the LOGIN7 packet goes through TLS and the connection
    /// switches back to the raw stream right after sending it (`post_login_encryption`), so
    /// the login response and all later traffic are plaintext; any other outcome encrypts
    /// everything. That is detected rather than trusted: bytes that are not a TDS packet
    /// header (a TLS record starts 0x17 0x03) make the scanner give up for good and
    /// [`Watch::attention`] refuse, since an injected packet would break the TLS stream.
    pub(crate) fn arm(&self) {
        let mut state = self.lock();
        state.armed = true;
        state.lost = None;
        state.inbound = Inbound::default();
        state.outbound = Outbound::default();
    }

    /// Starts a new request's summary: call it right before handing tiberius the request.
    ///
    /// It also forgets a cancel not yet sent, and makes the scanner record only server
    /// messages that begin after the request was written, so that leftovers of an earlier
    /// response that tiberius drains first are not counted for this one.
    pub(crate) fn begin_request(&self) {
        let mut state = self.lock();
        state.summary = Summary::default();
        state.begun = true;
        state.sent = 0;
        state.wants_attention = false;
        state.inbound.recording = false;
    }

    /// Asks for an ATTENTION packet (MS-TDS 2.2.1.7) to cancel the current request.
    ///
    /// The packet is written from the stream's read side: tiberius reads only after it has
    /// flushed its whole request, so the socket is then between two client packets, which
    /// the write tracker double-checks. If the request is not fully written yet, the packet
    /// follows it. The read's waker is woken so the packet goes out even while the server
    /// is silent (a long-running procedure); if tiberius is not reading at the moment (the
    /// caller holds the stream without polling it), it goes out at its next read.
    ///
    /// Returns false when no cancel can be sent: not armed, the traffic is not plaintext TDS,
    /// no request began, or the response to the request has already ended. True means it is
    /// sent or queued; watch [`Summary::attention_acknowledged`] and
    /// [`Summary::out_of_step`]. Calling it again is harmless.
    pub(crate) fn attention(&self) -> bool {
        let waker = {
            let mut state = self.lock();
            if !state.armed || state.lost.is_some() || !state.begun {
                return false;
            }
            if state.summary.response_complete {
                return false;
            }
            state.wants_attention = true;
            state.read_waker.clone()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    /// What the scanner saw since [`Watch::begin_request`] (a copy).
    pub(crate) fn summary(&self) -> Summary {
        self.lock().summary.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared)
    }
}

/// A panic elsewhere while holding the lock leaves counters at worst stale; never propagate
/// it into the I/O path.
fn lock(shared: &Mutex<State>) -> MutexGuard<'_, State> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Default)]
struct State {
    armed: bool,
    /// Why the traffic stopped looking like plaintext TDS; permanent, since packet framing
    /// cannot be found again once lost.
    lost: Option<String>,
    inbound: Inbound,
    outbound: Outbound,
    begun: bool,
    /// Complete client messages (a request, an attention) written since `begin_request`.
    sent: u32,
    wants_attention: bool,
    read_waker: Option<Waker>,
    summary: Summary,
}

impl State {
    fn should_send_attention(&self) -> bool {
        self.armed
            && self.lost.is_none()
            && self.wants_attention
            && !self.summary.attention_sent
            && self.sent > 0
            && !self.summary.response_complete
            && self.outbound.at_boundary()
    }

    fn lose(&mut self, why: String) {
        self.summary.gave_up.get_or_insert_with(|| why.clone());
        self.lost = Some(why);
    }

    fn read_bytes(&mut self, data: &[u8]) {
        if !self.armed || self.lost.is_some() {
            return;
        }
        let request_sent = self.sent > 0;
        if let Err(why) = self.inbound.feed(data, request_sent, &mut self.summary) {
            self.lose(why);
        }
    }

    fn wrote_bytes(&mut self, data: &[u8]) {
        if !self.armed || self.lost.is_some() {
            return;
        }
        match self.outbound.feed(data) {
            Ok(messages) => self.sent = self.sent.saturating_add(messages),
            Err(why) => self.lose(why),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The stream.

const HEADER_LEN: usize = 8;
const PACKET_TABULAR_RESULT: u8 = 0x04;
const PACKET_ATTENTION: u8 = 0x06;
const STATUS_EOM: u8 = 0x01;

/// The ATTENTION packet in flight.
struct Outgoing {
    bytes: [u8; HEADER_LEN],
    written: usize,
}

impl<S: AsyncWrite + Unpin> Watched<S> {
    /// Writes a requested ATTENTION packet (or the rest of one). Ready when none is
    /// pending; Pending when the socket cannot take it now (`cx` is then registered).
    fn drive_attention(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.attention.is_none() {
            let state = lock(&self.shared);
            if !state.should_send_attention() {
                return Poll::Ready(());
            }
            // A server ignores the packet id of an attention; the next id keeps the client's
            // sequence as a driver would number it.
            let id = state.outbound.last_id.wrapping_add(1);
            self.attention = Some(Outgoing {
                bytes: [
                    PACKET_ATTENTION,
                    STATUS_EOM,
                    0,
                    HEADER_LEN as u8,
                    0,
                    0,
                    id,
                    0,
                ],
                written: 0,
            });
        }
        let Some(out) = self.attention.as_mut() else {
            return Poll::Ready(());
        };
        while out.written < HEADER_LEN {
            let result = Pin::new(&mut self.inner).poll_write(cx, &out.bytes[out.written..]);
            let failure = match result {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => "the socket took no byte".to_owned(),
                Poll::Ready(Ok(n)) => {
                    let mut state = lock(&self.shared);
                    state.wrote_bytes(&out.bytes[out.written..out.written + n]);
                    out.written += n;
                    continue;
                }
                Poll::Ready(Err(e)) => e.to_string(),
            };
            // The socket is broken: tiberius' next read reports it; nothing to retry.
            let mut state = lock(&self.shared);
            state.summary.attention_error =
                Some(format!("writing the attention packet: {failure}"));
            state.wants_attention = false;
            self.attention = None;
            return Poll::Ready(());
        }
        // A flush error or a pending flush is left to tiberius' own next flush: the bytes are
        // handed over, which is all the ordering needs.
        let _ = Pin::new(&mut self.inner).poll_flush(cx);
        self.attention = None;
        let mut state = lock(&self.shared);
        state.summary.attention_sent = true;
        state.wants_attention = false;
        Poll::Ready(())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        {
            // Registered before looking for a cancel to send, so one asked for from now on
            // wakes this read: no lost wake-up between the check and the inner read.
            let mut state = lock(&this.shared);
            if state.armed {
                match &state.read_waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => state.read_waker = Some(cx.waker().clone()),
                }
            }
        }
        // Pending here only means the socket is full; the read below registers cx as well.
        let _ = this.drive_attention(cx);
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            lock(&this.shared).read_bytes(&buf[..n]);
        }
        result
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Only a socket that took part of the 8 bytes gets here with one unfinished: finish
        // it first, or tiberius' packet would land inside it.
        if this.attention.is_some() && this.drive_attention(cx).is_pending() {
            return Poll::Pending;
        }
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            lock(&this.shared).wrote_bytes(&buf[..n]);
        }
        result
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

// ---------------------------------------------------------------------------------------
// Packet framing, the same in both directions.

/// Cuts a byte stream, fed in chunks of any size, into TDS packet headers and payloads.
#[derive(Default)]
struct Framer {
    header: [u8; HEADER_LEN],
    /// Header bytes gathered so far (a header may arrive split across chunks).
    have: usize,
    /// Payload bytes of the current packet not seen yet.
    left: usize,
    /// The current packet ends its message.
    eom: bool,
}

/// What [`Framer::next`] took from the stream.
enum Framed<'a> {
    /// A complete header: the caller checks it and accepts it with [`Framer::begin`].
    Header([u8; HEADER_LEN]),
    /// Payload bytes of the current packet.
    Payload(&'a [u8]),
    /// Part of a header; the chunk is used up.
    Partial,
}

impl Framer {
    fn at_boundary(&self) -> bool {
        self.have == 0 && self.left == 0
    }

    /// Takes the next piece off the front of `data`.
    fn next<'a>(&mut self, data: &mut &'a [u8]) -> Framed<'a> {
        if self.left == 0 {
            let n = (HEADER_LEN - self.have).min(data.len());
            self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            *data = &data[n..];
            if self.have < HEADER_LEN {
                return Framed::Partial;
            }
            self.have = 0;
            Framed::Header(self.header)
        } else {
            let (payload, rest) = data.split_at(self.left.min(data.len()));
            self.left -= payload.len();
            *data = rest;
            Framed::Payload(payload)
        }
    }

    /// Accepts a checked header: `len` is the whole packet's length (at least the header's).
    fn begin(&mut self, len: usize, status: u8) {
        self.eom = status & STATUS_EOM != 0;
        self.left = len - HEADER_LEN;
    }

    /// Whether the bytes so far completed a message's last packet; true once per message.
    fn message_ended(&mut self) -> bool {
        let ended = self.eom && self.at_boundary();
        if ended {
            self.eom = false;
        }
        ended
    }
}

// ---------------------------------------------------------------------------------------
// Client→server: only packet boundaries and message ends matter.

#[derive(Default)]
struct Outbound {
    framer: Framer,
    last_id: u8,
}

impl Outbound {
    fn at_boundary(&self) -> bool {
        self.framer.at_boundary()
    }

    /// Tracks written bytes; returns how many client messages they completed.
    fn feed(&mut self, mut data: &[u8]) -> Result<u32, String> {
        let mut messages = 0;
        while !data.is_empty() {
            if let Framed::Header(header) = self.framer.next(&mut data) {
                let [kind, status, hi, lo, _, _, id, _] = header;
                let len = usize::from(u16::from_be_bytes([hi, lo]));
                // SQL batch, RPC, attention, bulk load, transaction manager: what a client
                // sends after login (MS-TDS 2.2.3.1.1).
                let known = matches!(kind, 0x01 | 0x03 | 0x06 | 0x07 | 0x0E);
                if !known || len < HEADER_LEN {
                    return Err(format!(
                        "client bytes are not a tds packet (header {header:02x?}); is the connection encrypted?"
                    ));
                }
                self.last_id = id;
                self.framer.begin(len, status);
            }
            if self.framer.message_ended() {
                messages += 1;
            }
        }
        Ok(messages)
    }
}

// ---------------------------------------------------------------------------------------
// Server→client: packets, then tokens.

#[derive(Default)]
struct Inbound {
    framer: Framer,
    in_message: bool,
    /// Whether the current message answers the current request (it began after the request
    /// was written); other messages are parsed, to stay in step, but not recorded.
    recording: bool,
    tokens: Tokens,
}

impl Inbound {
    /// Err only when the packet framing is lost (bytes that are not a server packet).
    fn feed(
        &mut self,
        mut data: &[u8],
        request_sent: bool,
        summary: &mut Summary,
    ) -> Result<(), String> {
        while !data.is_empty() {
            match self.framer.next(&mut data) {
                Framed::Header(header) => {
                    let [kind, status, hi, lo, ..] = header;
                    let len = usize::from(u16::from_be_bytes([hi, lo]));
                    // The status byte is not checked: servers set only EOM, and a strict
                    // check could only turn an unexpected bit into a lost scan.
                    if kind != PACKET_TABULAR_RESULT || len < HEADER_LEN {
                        return Err(format!(
                            "server bytes are not a tds packet (header {header:02x?}); is the connection encrypted?"
                        ));
                    }
                    if !self.in_message {
                        self.in_message = true;
                        // Only the first message after the request is its response.
                        self.recording = request_sent && !summary.response_complete;
                        if request_sent && summary.response_complete {
                            summary.late_messages = summary.late_messages.saturating_add(1);
                        }
                        self.tokens = Tokens::default();
                    }
                    self.framer.begin(len, status);
                }
                Framed::Payload(payload) => {
                    let mut sink = Sink {
                        summary: if self.recording {
                            Some(&mut *summary)
                        } else {
                            None
                        },
                    };
                    self.tokens.feed(payload, &mut sink);
                }
                Framed::Partial => {}
            }
            if self.framer.message_ended() {
                self.end_message(summary);
            }
        }
        Ok(())
    }

    fn end_message(&mut self, summary: &mut Summary) {
        self.in_message = false;
        let mut sink = Sink {
            summary: if self.recording {
                Some(&mut *summary)
            } else {
                None
            },
        };
        self.tokens.end(&mut sink);
        if self.recording {
            summary.response_complete = true;
        }
        self.recording = false;
    }
}

/// Where parsed facts go: `None` for a message that is not recorded.
struct Sink<'a> {
    summary: Option<&'a mut Summary>,
}

impl Sink<'_> {
    fn gave_up(&mut self, why: String) {
        if let Some(s) = self.summary.as_deref_mut() {
            s.gave_up.get_or_insert(why);
        }
    }
}

// Token types (MS-TDS 2.2.7).
const TOKEN_COLMETADATA: u8 = 0x81;
const TOKEN_TABNAME: u8 = 0xA4;
const TOKEN_COLINFO: u8 = 0xA5;
const TOKEN_ORDER: u8 = 0xA9;
const TOKEN_ERROR: u8 = 0xAA;
const TOKEN_INFO: u8 = 0xAB;
const TOKEN_RETURNVALUE: u8 = 0xAC;
const TOKEN_LOGINACK: u8 = 0xAD;
const TOKEN_FEATUREEXTACK: u8 = 0xAE;
const TOKEN_RETURNSTATUS: u8 = 0x79;
const TOKEN_ROW: u8 = 0xD1;
const TOKEN_NBCROW: u8 = 0xD2;
const TOKEN_ENVCHANGE: u8 = 0xE3;
const TOKEN_SESSIONSTATE: u8 = 0xE4;
const TOKEN_SSPI: u8 = 0xED;
const TOKEN_FEDAUTHINFO: u8 = 0xEE;
const TOKEN_DONE: u8 = 0xFD;
const TOKEN_DONEPROC: u8 = 0xFE;
const TOKEN_DONEINPROC: u8 = 0xFF;

const DONE_COUNT: u16 = 0x10;
const DONE_ATTN: u16 = 0x20;

// CurCmd values of DML statements. MS-TDS leaves CurCmd to the application layer and lists
// none; these are the ones SQL Server sends and SqlClient compares against (TdsEnums).
const CMD_INSERT: u16 = 0xC3;
const CMD_DELETE: u16 = 0xC4;
const CMD_UPDATE: u16 = 0xC5;
const CMD_MERGE: u16 = 0x117;

/// No single piece of metadata is this large in practice; a length beyond it means the
/// parse went wrong, and buffering it would make the watcher a memory risk.
const MAX_GATHER: usize = 1 << 20;

/// How a column's value is laid out in a row, all the scanner keeps of its metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A fixed-length type: that many bytes, no length prefix.
    Fixed(u8),
    /// BYTELEN: a 1-byte length (0 for NULL) and the bytes.
    Len1,
    /// USHORTLEN: a 2-byte length (0xFFFF for NULL) and the bytes.
    Len2,
    /// LONGLEN (SSVARIANT): a 4-byte length (0 for NULL) and the bytes.
    Len4,
    /// TEXT/NTEXT/IMAGE: a text pointer (1-byte length, 0 for NULL), an 8-byte timestamp,
    /// a 4-byte length and the bytes.
    Text,
    /// PLP (the (max) types, XML, UDT): an 8-byte total length (all ones for NULL), then
    /// chunks with a 4-byte length up to a zero-length terminator.
    Plp,
}

/// A bounded piece being gathered into `Tokens::buf`; parsed when complete.
#[derive(Debug, Clone, Copy)]
enum Piece {
    /// The length of a length-prefixed token (2 or 4 bytes).
    TokenLen {
        token: u8,
        width: u8,
    },
    /// An INFO token's body.
    Info,
    Done,
    ReturnStatus,
    ColumnCount,
    /// One column of COLMETADATA.
    Column,
    /// RETURNVALUE up to its value.
    ReturnValue,
    /// One FEATUREEXTACK option's id (and then its 4-byte length).
    FeatureAck,
    /// NBCROW's null bitmap.
    Bitmap,
    /// A value's length prefix of 1, 2 or 4 bytes.
    ValueLen(u8),
    TextPtrLen,
    PlpTotal,
    PlpChunk,
}

/// What follows a skip.
#[derive(Debug, Clone, Copy)]
enum Then {
    Token,
    NextValue,
    PlpChunk,
    TextLen,
    FeatureAck,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    /// At a token boundary: the next byte is a token type.
    Token,
    Gather {
        piece: Piece,
        need: usize,
    },
    Skip {
        left: u64,
        then: Then,
    },
    /// Gave up on this message; waiting for its end.
    Stalled,
}

/// Walking the values of a ROW/NBCROW, or the one value of a RETURNVALUE.
#[derive(Default)]
struct Row {
    /// The next column's index.
    next: usize,
    count: usize,
    /// NBCROW's null bitmap (empty for ROW): a set bit means NULL, and no bytes.
    nulls: Vec<u8>,
    /// The RETURNVALUE's kind, instead of the result set's columns.
    single: Option<Kind>,
}

struct Tokens {
    step: Step,
    buf: Vec<u8>,
    /// The current result set's columns.
    columns: Vec<Kind>,
    columns_left: usize,
    row: Row,
}

impl Default for Tokens {
    fn default() -> Self {
        Tokens {
            step: Step::Token,
            buf: Vec::new(),
            columns: Vec::new(),
            columns_left: 0,
            row: Row::default(),
        }
    }
}

/// Why a piece could not be parsed yet, or at all.
enum Halt {
    /// The piece is longer: this many bytes in all.
    Need(usize),
    Bad(String),
}

impl Tokens {
    fn feed(&mut self, mut data: &[u8], sink: &mut Sink<'_>) {
        loop {
            // Steps that need no byte run first, so a message can end right after them.
            match self.step {
                Step::Stalled => return,
                Step::Skip { left: 0, then } => {
                    self.after(then);
                    continue;
                }
                Step::Gather { piece, need } if self.buf.len() >= need => {
                    self.complete(piece, sink);
                    continue;
                }
                _ => {}
            }
            let Some(&first) = data.first() else { return };
            match &mut self.step {
                Step::Token => {
                    data = &data[1..];
                    self.start_token(first, sink);
                }
                Step::Skip { left, .. } => {
                    let n = usize::try_from(*left).unwrap_or(usize::MAX).min(data.len());
                    *left -= n as u64;
                    data = &data[n..];
                }
                Step::Gather { need, .. } => {
                    let n = (*need - self.buf.len()).min(data.len());
                    self.buf.extend_from_slice(&data[..n]);
                    data = &data[n..];
                }
                Step::Stalled => return,
            }
        }
    }

    /// The message ended: anything but a token boundary means the parse went wrong.
    fn end(&mut self, sink: &mut Sink<'_>) {
        // Finish zero-byte steps (a trailing empty value) before judging.
        self.feed(&[], sink);
        match self.step {
            Step::Token | Step::Stalled => {}
            step => sink.gave_up(format!(
                "the server message ended inside a token ({step:?})"
            )),
        }
        *self = Tokens::default();
    }

    fn give_up(&mut self, why: String, sink: &mut Sink<'_>) {
        sink.gave_up(why);
        self.step = Step::Stalled;
        self.buf = Vec::new();
    }

    fn gather(&mut self, piece: Piece, need: usize) {
        self.buf.clear();
        self.step = Step::Gather { piece, need };
    }

    fn skip(&mut self, left: u64, then: Then) {
        self.step = Step::Skip { left, then };
    }

    fn start_token(&mut self, token: u8, sink: &mut Sink<'_>) {
        match token {
            TOKEN_COLMETADATA => self.gather(Piece::ColumnCount, 2),
            // Row data is laid out by the metadata: without it there is no way past it.
            TOKEN_ROW | TOKEN_NBCROW if self.columns.is_empty() => {
                self.give_up(
                    format!("row token 0x{token:02x} without column metadata"),
                    sink,
                );
            }
            TOKEN_ROW => {
                self.row = Row {
                    next: 0,
                    count: self.columns.len(),
                    nulls: Vec::new(),
                    single: None,
                };
                self.next_value();
            }
            TOKEN_NBCROW => self.gather(Piece::Bitmap, self.columns.len().div_ceil(8)),
            TOKEN_DONE | TOKEN_DONEPROC | TOKEN_DONEINPROC => self.gather(Piece::Done, 12),
            TOKEN_RETURNSTATUS => self.gather(Piece::ReturnStatus, 4),
            // Ordinal (2) and the name's length (1) at least.
            TOKEN_RETURNVALUE => self.gather(Piece::ReturnValue, 3),
            TOKEN_FEATUREEXTACK => self.gather(Piece::FeatureAck, 1),
            TOKEN_INFO | TOKEN_ERROR | TOKEN_LOGINACK | TOKEN_ENVCHANGE | TOKEN_ORDER
            | TOKEN_COLINFO | TOKEN_TABNAME | TOKEN_SSPI => {
                self.gather(Piece::TokenLen { token, width: 2 }, 2)
            }
            TOKEN_SESSIONSTATE | TOKEN_FEDAUTHINFO => {
                self.gather(Piece::TokenLen { token, width: 4 }, 4)
            }
            other => self.give_up(format!("unknown token 0x{other:02x}"), sink),
        }
    }

    fn complete(&mut self, piece: Piece, sink: &mut Sink<'_>) {
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.parse(piece, &buf, sink);
        match result {
            Ok(()) => {
                // Whatever step comes next starts with an empty buffer: keep the allocation
                // unless an outsized piece grew it.
                if buf.capacity() <= 1 << 16 {
                    buf.clear();
                    self.buf = buf;
                }
            }
            Err(Halt::Need(need)) if need > MAX_GATHER => {
                self.give_up(format!("a piece of {piece:?} claims {need} bytes"), sink);
            }
            Err(Halt::Need(need)) => {
                self.buf = buf;
                self.step = Step::Gather { piece, need };
            }
            Err(Halt::Bad(why)) => self.give_up(why, sink),
        }
    }

    /// Parses a complete `piece` and sets the next step; Need when the piece is longer.
    fn parse(&mut self, piece: Piece, buf: &[u8], sink: &mut Sink<'_>) -> Result<(), Halt> {
        let mut cur = Cursor { buf, at: 0 };
        match piece {
            Piece::TokenLen { token, width } => {
                let len = if width == 2 {
                    u64::from(cur.u16()?)
                } else {
                    u64::from(cur.u32()?)
                };
                if token == TOKEN_INFO && sink.summary.is_some() {
                    self.gather(Piece::Info, usize::try_from(len).unwrap_or(usize::MAX));
                } else {
                    self.skip(len, Then::Token);
                }
            }
            Piece::Info => {
                // The token's length was gathered whole: fields beyond it mean a bad token,
                // not more to read.
                let message = parse_info(&mut cur).map_err(|halt| match halt {
                    Halt::Need(_) => Halt::Bad("an info token shorter than its fields".into()),
                    bad => bad,
                })?;
                if let Some(s) = sink.summary.as_deref_mut() {
                    s.messages.push(message);
                }
                self.step = Step::Token;
            }
            Piece::Done => {
                let status = cur.u16()?;
                let cmd = cur.u16()?;
                let count = cur.u64()?;
                if let Some(s) = sink.summary.as_deref_mut() {
                    if status & DONE_ATTN != 0 {
                        s.attention_acknowledged = true;
                    }
                    let dml = matches!(cmd, CMD_INSERT | CMD_DELETE | CMD_UPDATE | CMD_MERGE);
                    if status & DONE_COUNT != 0 && dml {
                        s.rows_affected = Some(s.rows_affected.unwrap_or(0).saturating_add(count));
                    }
                }
                self.step = Step::Token;
            }
            Piece::ReturnStatus => {
                let value = cur.u32()? as i32;
                if let Some(s) = sink.summary.as_deref_mut() {
                    s.return_status = Some(value);
                }
                self.step = Step::Token;
            }
            Piece::ColumnCount => {
                let count = cur.u16()?;
                self.columns.clear();
                // 0xFFFF: no metadata, no columns (MS-TDS 2.2.7.4).
                self.columns_left = if count == 0xFFFF {
                    0
                } else {
                    usize::from(count)
                };
                self.next_column();
            }
            Piece::Column => {
                cur.take(4)?; // user type
                cur.take(2)?; // flags
                let kind = type_info(&mut cur)?;
                if kind == Kind::Text {
                    // Since TDS 7.2 a multi-part name: the count of parts, then each.
                    let parts = cur.u8()?;
                    for _ in 0..parts {
                        cur.us_varchar()?;
                    }
                }
                cur.b_varchar()?; // column name
                self.columns.push(kind);
                self.columns_left -= 1;
                self.next_column();
            }
            Piece::ReturnValue => {
                cur.take(2)?; // ordinal
                cur.b_varchar()?; // name
                cur.take(1)?; // status
                cur.take(4)?; // user type
                cur.take(2)?; // flags
                let kind = type_info(&mut cur)?;
                self.row = Row {
                    next: 0,
                    count: 1,
                    nulls: Vec::new(),
                    single: Some(kind),
                };
                self.next_value();
            }
            Piece::FeatureAck => {
                if cur.u8()? == 0xFF {
                    self.step = Step::Token;
                } else {
                    let len = cur.u32()?;
                    self.skip(u64::from(len), Then::FeatureAck);
                }
            }
            Piece::Bitmap => {
                self.row = Row {
                    next: 0,
                    count: self.columns.len(),
                    nulls: buf.to_vec(),
                    single: None,
                };
                self.next_value();
            }
            Piece::ValueLen(width) => {
                let len = match width {
                    1 => u64::from(cur.u8()?),
                    2 => match cur.u16()? {
                        0xFFFF => 0,
                        n => u64::from(n),
                    },
                    _ => u64::from(cur.u32()?),
                };
                self.skip(len, Then::NextValue);
            }
            Piece::TextPtrLen => match cur.u8()? {
                0 => self.next_value(),
                // The pointer, then the 8-byte timestamp.
                n => self.skip(u64::from(n) + 8, Then::TextLen),
            },
            Piece::PlpTotal => match cur.u64()? {
                u64::MAX => self.next_value(),
                _ => self.gather(Piece::PlpChunk, 4),
            },
            Piece::PlpChunk => match cur.u32()? {
                0 => self.next_value(),
                n => self.skip(u64::from(n), Then::PlpChunk),
            },
        }
        Ok(())
    }

    fn after(&mut self, then: Then) {
        match then {
            Then::Token => self.step = Step::Token,
            Then::NextValue => self.next_value(),
            Then::PlpChunk => self.gather(Piece::PlpChunk, 4),
            Then::TextLen => self.gather(Piece::ValueLen(4), 4),
            Then::FeatureAck => self.gather(Piece::FeatureAck, 1),
        }
    }

    fn next_column(&mut self) {
        if self.columns_left == 0 {
            self.step = Step::Token;
        } else {
            // User type, flags and the type byte at least.
            self.gather(Piece::Column, 7);
        }
    }

    /// Starts the next non-NULL value of the row, or ends the row.
    fn next_value(&mut self) {
        loop {
            let i = self.row.next;
            if i >= self.row.count {
                self.row = Row::default();
                self.step = Step::Token;
                return;
            }
            self.row.next += 1;
            let null = self
                .row
                .nulls
                .get(i / 8)
                .is_some_and(|b| b & (1 << (i % 8)) != 0);
            if null {
                continue;
            }
            let kind = match self.row.single {
                Some(kind) => kind,
                None => self.columns[i],
            };
            match kind {
                Kind::Fixed(n) => self.skip(u64::from(n), Then::NextValue),
                Kind::Len1 => self.gather(Piece::ValueLen(1), 1),
                Kind::Len2 => self.gather(Piece::ValueLen(2), 2),
                Kind::Len4 => self.gather(Piece::ValueLen(4), 4),
                Kind::Text => self.gather(Piece::TextPtrLen, 1),
                Kind::Plp => self.gather(Piece::PlpTotal, 8),
            }
            return;
        }
    }
}

/// TYPE_INFO (MS-TDS 2.2.5.6), reduced to how a value of the type is laid out.
fn type_info(cur: &mut Cursor<'_>) -> Result<Kind, Halt> {
    let ty = cur.u8()?;
    let kind = match ty {
        0x1F => Kind::Fixed(0),                      // NULLTYPE
        0x30 | 0x32 => Kind::Fixed(1),               // INT1, BIT
        0x34 => Kind::Fixed(2),                      // INT2
        0x38 | 0x3A | 0x3B | 0x7A => Kind::Fixed(4), // INT4, DATETIM4, FLT4, MONEY4
        0x3C | 0x3D | 0x3E | 0x7F => Kind::Fixed(8), // MONEY, DATETIME, FLT8, INT8
        // GUID, INTN, BITN, FLTN, MONEYN, DATETIMN, and the legacy VARBINARY, VARCHAR,
        // BINARY, CHAR (no collation: only the BIG and N types carry one): a max length.
        0x24 | 0x26 | 0x68 | 0x6D | 0x6E | 0x6F | 0x25 | 0x27 | 0x2D | 0x2F => {
            cur.take(1)?;
            Kind::Len1
        }
        // DECIMALN, NUMERICN and the legacy DECIMAL, NUMERIC: length, precision, scale.
        0x6A | 0x6C | 0x37 | 0x3F => {
            cur.take(3)?;
            Kind::Len1
        }
        0x28 => Kind::Len1, // DATEN: nothing more
        // TIMEN, DATETIME2N, DATETIMEOFFSETN: the scale.
        0x29..=0x2B => {
            cur.take(1)?;
            Kind::Len1
        }
        // BIGVARBINARY, BIGBINARY: a max length, 0xFFFF for (max).
        0xA5 | 0xAD => usual_len(cur.u16()?),
        // BIGVARCHAR, BIGCHAR, NVARCHAR, NCHAR: a max length and the 5-byte collation.
        0xA7 | 0xAF | 0xE7 | 0xEF => {
            let max = cur.u16()?;
            cur.take(5)?;
            usual_len(max)
        }
        // IMAGE: a max length (the table name follows in COLMETADATA only).
        0x22 => {
            cur.take(4)?;
            Kind::Text
        }
        // TEXT, NTEXT: a max length and the collation.
        0x23 | 0x63 => {
            cur.take(4 + 5)?;
            Kind::Text
        }
        // SSVARIANT: a max length; each value has a 4-byte length.
        0x62 => {
            cur.take(4)?;
            Kind::Len4
        }
        // XML: whether a schema collection is named, then database, owner and collection.
        0xF1 => {
            if cur.u8()? != 0 {
                cur.b_varchar()?;
                cur.b_varchar()?;
                cur.us_varchar()?;
            }
            Kind::Plp
        }
        // UDT: a max length, then database, schema and type names and the assembly-qualified
        // name; values are PLP since TDS 7.2 whatever the max length.
        0xF0 => {
            cur.take(2)?;
            cur.b_varchar()?;
            cur.b_varchar()?;
            cur.b_varchar()?;
            cur.us_varchar()?;
            Kind::Plp
        }
        other => return Err(Halt::Bad(format!("unknown column type 0x{other:02x}"))),
    };
    Ok(kind)
}

fn usual_len(max: u16) -> Kind {
    if max == 0xFFFF { Kind::Plp } else { Kind::Len2 }
}

/// INFO's body after its length (MS-TDS 2.2.7.13; the line is 4 bytes since TDS 7.2).
fn parse_info(cur: &mut Cursor<'_>) -> Result<Message, Halt> {
    let number = cur.u32()? as i32;
    let state = cur.u8()?;
    let class = cur.u8()?;
    let text = cur.us_varchar()?;
    let server = cur.b_varchar()?;
    let procedure = cur.b_varchar()?;
    let line = cur.u32()?;
    Ok(Message {
        number,
        state,
        class,
        text,
        server,
        procedure,
        line,
    })
}

/// Reads a gathered piece; running out of bytes says how many the piece needs.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Halt> {
        let end = self.at + n;
        let Some(bytes) = self.buf.get(self.at..end) else {
            return Err(Halt::Need(end));
        };
        self.at = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Halt> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, Halt> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Halt> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, Halt> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, Halt> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// B_VARCHAR: a count of UTF-16 code units in one byte, then the units.
    fn b_varchar(&mut self) -> Result<String, Halt> {
        let units = usize::from(self.u8()?);
        Ok(utf16(self.take(units * 2)?))
    }

    /// US_VARCHAR: the count in two bytes.
    fn us_varchar(&mut self) -> Result<String, Halt> {
        let units = usize::from(self.u16()?);
        Ok(utf16(self.take(units * 2)?))
    }
}

fn utf16(bytes: &[u8]) -> String {
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .collect();
    String::from_utf16_lossy(&units)
}

#[cfg(test)]
mod tests {
    use super::*;
    // Test bodies name their handle `watch`.
    use super::watch as wrap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    // ---- the socket under the wrapper -------------------------------------------------

    /// How a test socket hands out its bytes per read.
    #[derive(Clone, Copy, Debug)]
    enum Chunks {
        Fixed(usize),
        Random(u64),
    }

    /// A socket with scripted server bytes; silent (Pending) once they are used up.
    struct Socket {
        input: Vec<u8>,
        at: usize,
        chunks: Chunks,
        rng: u64,
        written: Vec<u8>,
        /// Accept at most this many bytes per write (to split the attention packet).
        write_limit: usize,
    }

    impl Socket {
        fn new(input: Vec<u8>, chunks: Chunks) -> Self {
            let rng = match chunks {
                Chunks::Random(seed) => seed | 1,
                Chunks::Fixed(_) => 1,
            };
            Socket {
                input,
                at: 0,
                chunks,
                rng,
                written: Vec::new(),
                write_limit: usize::MAX,
            }
        }

        fn next_len(&mut self) -> usize {
            match self.chunks {
                Chunks::Fixed(n) => n,
                Chunks::Random(_) => {
                    // xorshift64: reproducible chunk sizes from 1 to 64.
                    self.rng ^= self.rng << 13;
                    self.rng ^= self.rng >> 7;
                    self.rng ^= self.rng << 17;
                    (self.rng % 64) as usize + 1
                }
            }
        }
    }

    impl AsyncRead for Socket {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            if this.at == this.input.len() {
                return Poll::Pending;
            }
            let n = this
                .next_len()
                .min(buf.len())
                .min(this.input.len() - this.at);
            buf[..n].copy_from_slice(&this.input[this.at..this.at + n]);
            this.at += n;
            Poll::Ready(Ok(n))
        }
    }

    impl AsyncWrite for Socket {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            let n = buf.len().min(this.write_limit);
            this.written.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Reads like tiberius would until the socket is silent; returns what was read.
    fn read_all(stream: &mut Watched<Socket>) -> Vec<u8> {
        read_all_with(stream, Waker::noop())
    }

    fn read_all_with(stream: &mut Watched<Socket>, waker: &Waker) -> Vec<u8> {
        let mut cx = Context::from_waker(waker);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Poll::Ready(result) = Pin::new(&mut *stream).poll_read(&mut cx, &mut buf) {
            let n = result.unwrap();
            assert!(n > 0);
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    fn write_all(stream: &mut Watched<Socket>, mut bytes: &[u8]) {
        let mut cx = Context::from_waker(Waker::noop());
        while !bytes.is_empty() {
            match Pin::new(&mut *stream).poll_write(&mut cx, bytes) {
                Poll::Ready(Ok(n)) => bytes = &bytes[n..],
                other => panic!("write: {other:?}"),
            }
        }
    }

    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    // ---- building server bytes ----------------------------------------------------------

    /// Splits one server message into packets of `size` bytes (header included).
    fn packets(payload: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let chunks: Vec<&[u8]> = payload.chunks(size - HEADER_LEN).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let status = if i + 1 == chunks.len() { STATUS_EOM } else { 0 };
            let len = (chunk.len() + HEADER_LEN) as u16;
            out.extend_from_slice(&[PACKET_TABULAR_RESULT, status]);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&[0, 0x35, (i + 1) as u8, 0]);
            out.extend_from_slice(chunk);
        }
        out
    }

    /// A client SQL batch packet (what tiberius writes for a query).
    fn request(id: u8) -> Vec<u8> {
        let body: Vec<u8> = utf16le("select 1");
        let mut out = vec![0x01, STATUS_EOM];
        out.extend_from_slice(&((body.len() + HEADER_LEN) as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0, id, 0]);
        out.extend_from_slice(&body);
        out
    }

    fn utf16le(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_le_bytes).collect()
    }

    fn b_varchar(s: &str) -> Vec<u8> {
        let mut out = vec![s.encode_utf16().count() as u8];
        out.extend(utf16le(s));
        out
    }

    fn us_varchar(s: &str) -> Vec<u8> {
        let mut out = (s.encode_utf16().count() as u16).to_le_bytes().to_vec();
        out.extend(utf16le(s));
        out
    }

    const COLLATION: [u8; 5] = [0x09, 0x04, 0xD0, 0x00, 0x34];

    fn done(token: u8, status: u16, cmd: u16, count: u64) -> Vec<u8> {
        let mut out = vec![token];
        out.extend_from_slice(&status.to_le_bytes());
        out.extend_from_slice(&cmd.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        out
    }

    fn info(number: i32, class: u8, text: &str, procedure: &str, line: u32) -> Vec<u8> {
        let mut body = number.to_le_bytes().to_vec();
        body.extend_from_slice(&[1, class]);
        body.extend(us_varchar(text));
        body.extend(b_varchar("iridium"));
        body.extend(b_varchar(procedure));
        body.extend_from_slice(&line.to_le_bytes());
        let mut out = vec![TOKEN_INFO];
        out.extend_from_slice(&(body.len() as u16).to_le_bytes());
        out.extend(body);
        out
    }

    /// A length-prefixed token with an opaque body.
    fn opaque(token: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![token];
        out.extend_from_slice(&(body.len() as u16).to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    fn plp(value: Option<&[u8]>, chunk: usize, known_length: bool) -> Vec<u8> {
        let Some(value) = value else {
            return u64::MAX.to_le_bytes().to_vec();
        };
        let total = if known_length {
            value.len() as u64
        } else {
            u64::MAX - 1
        };
        let mut out = total.to_le_bytes().to_vec();
        for piece in value.chunks(chunk) {
            out.extend_from_slice(&(piece.len() as u32).to_le_bytes());
            out.extend_from_slice(piece);
        }
        out.extend_from_slice(&0u32.to_le_bytes());
        out
    }

    fn len1(value: Option<&[u8]>) -> Vec<u8> {
        match value {
            None => vec![0],
            Some(v) => [&[v.len() as u8][..], v].concat(),
        }
    }

    fn len2(value: Option<&[u8]>) -> Vec<u8> {
        match value {
            None => vec![0xFF, 0xFF],
            Some(v) => [&(v.len() as u16).to_le_bytes()[..], v].concat(),
        }
    }

    fn text(value: Option<&[u8]>) -> Vec<u8> {
        match value {
            None => vec![0],
            Some(v) => {
                let mut out = vec![16];
                out.extend_from_slice(&[0xAB; 16]); // text pointer
                out.extend_from_slice(&[0xCD; 8]); // timestamp
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
                out
            }
        }
    }

    /// One column: its COLMETADATA bytes and a value (None: NULL) written as in a ROW.
    struct Col {
        meta: Vec<u8>,
        value: fn(bool) -> Vec<u8>,
    }

    fn col(
        type_info: &[u8],
        table: Option<&[&str]>,
        name: &str,
        value: fn(bool) -> Vec<u8>,
    ) -> Col {
        let mut meta = vec![0, 0, 0, 0, 0x09, 0x00];
        meta.extend_from_slice(type_info);
        if let Some(parts) = table {
            meta.push(parts.len() as u8);
            for part in parts {
                meta.extend(us_varchar(part));
            }
        }
        meta.extend(b_varchar(name));
        Col { meta, value }
    }

    /// Every type TDS 7.3 sends in a result set, each with a value maker (true: NULL).
    fn all_columns() -> Vec<Col> {
        let nvarchar_max = [&[0xE7, 0xFF, 0xFF][..], &COLLATION].concat();
        let varchar10 = [&[0xA7, 10, 0][..], &COLLATION].concat();
        let char4 = [&[0xAF, 4, 0][..], &COLLATION].concat();
        let nvarchar50 = [&[0xE7, 100, 0][..], &COLLATION].concat();
        let nchar2 = [&[0xEF, 4, 0][..], &COLLATION].concat();
        let text_info = [&[0x23, 0xFF, 0xFF, 0xFF, 0x7F][..], &COLLATION].concat();
        let ntext_info = [&[0x63, 0xFE, 0xFF, 0xFF, 0x7F][..], &COLLATION].concat();
        let xml_schema = [
            &[0xF1, 1][..],
            &b_varchar("db"),
            &b_varchar("dbo"),
            &us_varchar("collection"),
        ]
        .concat();
        let udt = [
            &[0xF0, 0xFF, 0xFF][..],
            &b_varchar("db"),
            &b_varchar("sys"),
            &b_varchar("geography"),
            &us_varchar("Microsoft.SqlServer.Types.SqlGeography, Microsoft.SqlServer.Types"),
        ]
        .concat();
        fn fixed<const N: usize>(_: bool) -> Vec<u8> {
            vec![0x5A; N]
        }
        vec![
            col(&[0x30], None, "tiny", fixed::<1>),
            col(&[0x32], None, "bit", fixed::<1>),
            col(&[0x34], None, "small", fixed::<2>),
            col(&[0x38], None, "int", fixed::<4>),
            col(&[0x3A], None, "smalldatetime", fixed::<4>),
            col(&[0x3B], None, "real", fixed::<4>),
            col(&[0x3C], None, "money", fixed::<8>),
            col(&[0x3D], None, "datetime", fixed::<8>),
            col(&[0x3E], None, "float", fixed::<8>),
            col(&[0x7A], None, "smallmoney", fixed::<4>),
            col(&[0x7F], None, "big", fixed::<8>),
            col(&[0x26, 8], None, "intn", |null| {
                len1((!null).then_some(&[1, 0, 0, 0, 0, 0, 0, 0]))
            }),
            col(&[0x68, 1], None, "bitn", |null| {
                len1((!null).then_some(&[1]))
            }),
            col(&[0x6D, 8], None, "floatn", |null| {
                len1((!null).then_some(&[0; 8]))
            }),
            col(&[0x6E, 8], None, "moneyn", |null| {
                len1((!null).then_some(&[0; 8]))
            }),
            col(&[0x6F, 8], None, "datetimen", |null| {
                len1((!null).then_some(&[0; 8]))
            }),
            col(&[0x24, 16], None, "guid", |null| {
                len1((!null).then_some(&[7; 16]))
            }),
            col(&[0x6A, 17, 38, 4], None, "decimal", |null| {
                len1((!null).then_some(&[1; 17]))
            }),
            col(&[0x6C, 5, 9, 2], None, "numeric", |null| {
                len1((!null).then_some(&[1; 5]))
            }),
            col(&[0x28], None, "date", |null| {
                len1((!null).then_some(&[1, 2, 3]))
            }),
            col(&[0x29, 7], None, "time", |null| {
                len1((!null).then_some(&[1; 5]))
            }),
            col(&[0x2A, 3], None, "datetime2", |null| {
                len1((!null).then_some(&[1; 7]))
            }),
            col(&[0x2B, 7], None, "datetimeoffset", |null| {
                len1((!null).then_some(&[1; 10]))
            }),
            col(&varchar10, None, "varchar", |null| {
                len2((!null).then_some(b"hello"))
            }),
            col(&char4, None, "char", |null| {
                len2((!null).then_some(b"abcd"))
            }),
            col(&nvarchar50, None, "nvarchar", |null| {
                len2((!null).then_some(&[0x41, 0, 0x42, 0]))
            }),
            col(&nchar2, None, "nchar", |null| {
                len2((!null).then_some(&[0x41, 0, 0x42, 0]))
            }),
            col(&[0xA5, 0x40, 0x1F], None, "varbinary", |null| {
                len2((!null).then_some(&[0xFF; 300]))
            }),
            col(&[0xAD, 4, 0], None, "binary", |null| {
                len2((!null).then_some(&[0xFF; 4]))
            }),
            // (max): PLP, with a known total, an unknown total and several chunks.
            col(&nvarchar_max, None, "nvarchar_max", |null| {
                plp((!null).then_some(&[0x61; 5000]), 1000, true)
            }),
            col(&[0xA5, 0xFF, 0xFF], None, "varbinary_max", |null| {
                plp((!null).then_some(&[0xFF; 70]), 33, false)
            }),
            col(&text_info, Some(&["dbo", "t"]), "text", |null| {
                text((!null).then_some(b"some text"))
            }),
            col(
                &ntext_info,
                Some(&["master", "dbo", "t"]),
                "ntext",
                |null| text((!null).then_some(&[0x41, 0])),
            ),
            col(
                &[0x22, 0xFF, 0xFF, 0xFF, 0x7F],
                Some(&["t"]),
                "image",
                |null| text((!null).then_some(&[1, 2, 3])),
            ),
            col(&[0xF1, 0], None, "xml", |null| {
                plp((!null).then_some(b"<a/>"), 2, true)
            }),
            col(&xml_schema, None, "typed_xml", |null| {
                plp((!null).then_some(b"<b/>"), 4, false)
            }),
            col(&udt, None, "udt", |null| {
                plp((!null).then_some(&[0xE6, 0x10, 0, 0]), 4, true)
            }),
            col(&[0x62, 0x10, 0x1F, 0, 0], None, "variant", |null| {
                // 4-byte length 0 for NULL; else base type int, no properties, the int.
                let body: &[u8] = if null { &[] } else { &[0x38, 0, 1, 0, 0, 0] };
                [&(body.len() as u32).to_le_bytes()[..], body].concat()
            }),
        ]
    }

    fn colmetadata(cols: &[Col]) -> Vec<u8> {
        let mut out = vec![TOKEN_COLMETADATA];
        out.extend_from_slice(&(cols.len() as u16).to_le_bytes());
        for c in cols {
            out.extend_from_slice(&c.meta);
        }
        out
    }

    fn row(cols: &[Col]) -> Vec<u8> {
        let mut out = vec![TOKEN_ROW];
        for c in cols {
            out.extend((c.value)(false));
        }
        out
    }

    /// A ROW with all nullable values NULL (fixed types cannot be).
    fn row_of_nulls(cols: &[Col]) -> Vec<u8> {
        let mut out = vec![TOKEN_ROW];
        for c in cols {
            out.extend((c.value)(true));
        }
        out
    }

    /// An NBCROW with every column whose index is in `nulls` NULL.
    fn nbcrow(cols: &[Col], nulls: &[usize]) -> Vec<u8> {
        let mut out = vec![TOKEN_NBCROW];
        let mut bitmap = vec![0u8; cols.len().div_ceil(8)];
        for &i in nulls {
            bitmap[i / 8] |= 1 << (i % 8);
        }
        out.extend(bitmap);
        for (i, c) in cols.iter().enumerate() {
            if !nulls.contains(&i) {
                out.extend((c.value)(false));
            }
        }
        out
    }

    const MORE: u16 = 0x01;
    const CMD_SELECT: u16 = 0xC1;
    const CMD_EXECUTE: u16 = 0xE0;

    /// A procedure's response: a result set of every type, PRINTs, DML counts, a return
    /// status and an output parameter.
    fn procedure_response() -> Vec<u8> {
        let cols = all_columns();
        let mut out = Vec::new();
        out.extend(colmetadata(&cols));
        out.extend(row(&cols));
        out.extend(row_of_nulls(&cols));
        out.extend(nbcrow(&cols, &[0, 3, 11, 22, 29, 30, 31, 36, 37]));
        out.extend(nbcrow(&cols, &(0..cols.len()).collect::<Vec<_>>()));
        out.extend(done(TOKEN_DONEINPROC, MORE | DONE_COUNT, CMD_SELECT, 4));
        out.extend(info(0, 0, "hello", "p", 3));
        out.extend(opaque(TOKEN_ORDER, &[1, 0]));
        out.extend(done(TOKEN_DONEINPROC, MORE | DONE_COUNT, CMD_UPDATE, 3));
        out.extend(done(TOKEN_DONEINPROC, MORE | DONE_COUNT, CMD_INSERT, 2));
        out.extend(done(TOKEN_DONEINPROC, MORE | DONE_COUNT, CMD_DELETE, 10));
        out.extend(done(TOKEN_DONEINPROC, MORE | DONE_COUNT, CMD_MERGE, 100));
        // No DONE_COUNT: the count is not valid and must not be added.
        out.extend(done(TOKEN_DONEINPROC, MORE, CMD_UPDATE, 1000));
        out.extend(info(50000, 10, "world ✓", "p", 9));
        // A second, narrow result set replaces the first one's columns.
        let narrow = vec![col(&[0x38], None, "n", |_| vec![1, 0, 0, 0])];
        out.extend(colmetadata(&narrow));
        out.extend(row(&narrow));
        out.extend(done(TOKEN_DONEINPROC, MORE | DONE_COUNT, CMD_SELECT, 1));
        out.extend([TOKEN_RETURNSTATUS, 7, 0, 0, 0]);
        // RETURNVALUE: an nvarchar(max) output parameter, then an int one.
        out.push(TOKEN_RETURNVALUE);
        out.extend_from_slice(&[1, 0]);
        out.extend(b_varchar("@out"));
        out.extend_from_slice(&[1, 0, 0, 0, 0, 0x09, 0x00]);
        out.extend_from_slice(&[0xE7, 0xFF, 0xFF]);
        out.extend_from_slice(&COLLATION);
        out.extend(plp(Some(&[0x62; 9000]), 4000, true));
        out.push(TOKEN_RETURNVALUE);
        out.extend_from_slice(&[2, 0]);
        out.extend(b_varchar("@n"));
        out.extend_from_slice(&[1, 0, 0, 0, 0, 0x09, 0x00, 0x26, 4, 4, 9, 0, 0, 0]);
        out.extend(done(TOKEN_DONEPROC, DONE_COUNT, CMD_EXECUTE, 0));
        out.extend(opaque(
            TOKEN_ENVCHANGE,
            &[7, 5, 0x09, 0x04, 0xD0, 0x00, 0x34, 0],
        ));
        out.extend([TOKEN_SESSIONSTATE, 3, 0, 0, 0, 1, 2, 3]);
        out.extend(done(TOKEN_DONE, 0, CMD_EXECUTE, 0));
        out
    }

    fn chunkings() -> Vec<Chunks> {
        vec![
            Chunks::Fixed(1),
            Chunks::Fixed(3),
            Chunks::Fixed(4096),
            Chunks::Random(7),
            Chunks::Random(0xDEAD_BEEF),
            Chunks::Random(12345),
        ]
    }

    /// Arms, begins a request, writes it, then lets the "server" answer with `input`.
    fn run(input: Vec<u8>, chunks: Chunks) -> (Vec<u8>, Summary, Watched<Socket>, Watch) {
        let (mut stream, watch) = wrap(Socket::new(input, chunks));
        watch.arm();
        watch.begin_request();
        write_all(&mut stream, &request(1));
        let read = read_all(&mut stream);
        (read, watch.summary(), stream, watch)
    }

    // ---- tests -------------------------------------------------------------------------

    #[test]
    fn the_handle_is_send_and_sync_and_the_stream_send() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Watch>();
        send::<Watched<Socket>>();
    }

    #[test]
    fn malformed_tokens_give_up() {
        let cases: [(Vec<u8>, &str); 3] = [
            (
                vec![TOKEN_INFO, 2, 0, 1, 2],
                "an info token shorter than its fields",
            ),
            (
                vec![TOKEN_ROW, 1, 2, 3],
                "row token 0xd1 without column metadata",
            ),
            (
                vec![TOKEN_NBCROW, 0],
                "row token 0xd2 without column metadata",
            ),
        ];
        for (payload, why) in cases {
            let (_, summary, ..) = run(packets(&payload, 512), Chunks::Fixed(1));
            assert_eq!(summary.gave_up.as_deref(), Some(why));
        }
    }

    #[test]
    fn counts_messages_and_values_whatever_the_packet_and_read_sizes() {
        let payload = procedure_response();
        for size in [512, 4096, 9, 17, 32767] {
            let input = packets(&payload, size);
            for chunks in chunkings() {
                let (read, summary, ..) = run(input.clone(), chunks);
                assert_eq!(read, input, "passthrough, packet size {size}, {chunks:?}");
                assert_eq!(summary.gave_up, None, "packet size {size}, {chunks:?}");
                assert_eq!(
                    summary.rows_affected,
                    Some(115),
                    "packet size {size}, {chunks:?}"
                );
                assert_eq!(summary.return_status, Some(7));
                assert!(summary.response_complete);
                assert!(!summary.attention_acknowledged);
                let texts: Vec<_> = summary.messages.iter().map(|m| m.text.as_str()).collect();
                assert_eq!(texts, ["hello", "world ✓"]);
                assert_eq!(
                    summary.messages[1],
                    Message {
                        number: 50000,
                        state: 1,
                        class: 10,
                        text: "world ✓".into(),
                        server: "iridium".into(),
                        procedure: "p".into(),
                        line: 9,
                    }
                );
            }
        }
    }

    #[test]
    fn the_scanner_keeps_no_row_data() {
        // A 200 kB PLP value read in one go: the gather buffer stays at a length prefix.
        let cols = vec![col(&[0xA5, 0xFF, 0xFF], None, "blob", |_| {
            plp(Some(&[1; 200_000]), 8000, true)
        })];
        let mut payload = colmetadata(&cols);
        payload.extend(row(&cols));
        payload.extend(done(TOKEN_DONE, DONE_COUNT, CMD_SELECT, 1));
        let (_, summary, _, watch) = run(packets(&payload, 8000), Chunks::Fixed(70_000));
        assert_eq!(summary.gave_up, None);
        assert!(lock(&watch.shared).inbound.tokens.buf.capacity() < 4096);
    }

    #[test]
    fn select_and_nocount_give_no_rows_affected() {
        let mut payload = Vec::new();
        payload.extend(done(TOKEN_DONE, MORE | DONE_COUNT, CMD_SELECT, 5));
        payload.extend(done(TOKEN_DONEINPROC, MORE, CMD_INSERT, 0));
        payload.extend(done(TOKEN_DONE, 0, CMD_UPDATE, 0));
        let (_, summary, ..) = run(packets(&payload, 512), Chunks::Fixed(3));
        assert_eq!(summary.rows_affected, None);
        assert_eq!(summary.gave_up, None);
    }

    #[test]
    fn a_zero_count_is_some_zero() {
        let payload = done(TOKEN_DONE, DONE_COUNT, CMD_DELETE, 0);
        let (_, summary, ..) = run(packets(&payload, 512), Chunks::Fixed(1));
        assert_eq!(summary.rows_affected, Some(0));
    }

    #[test]
    fn an_unknown_token_gives_up_until_the_next_message() {
        let mut bad = done(TOKEN_DONEINPROC, MORE | DONE_COUNT, CMD_UPDATE, 2);
        bad.extend([0xC0, 1, 2, 3]);
        bad.extend(done(TOKEN_DONE, DONE_COUNT, CMD_UPDATE, 40));
        for chunks in chunkings() {
            let input = packets(&bad, 11);
            let (read, summary, mut stream, watch) = run(input.clone(), chunks);
            assert_eq!(read, input);
            assert_eq!(summary.gave_up.as_deref(), Some("unknown token 0xc0"));
            // What came before the unknown token counts; nothing after it is guessed.
            assert_eq!(summary.rows_affected, Some(2));
            assert!(summary.response_complete);

            // The next response is parsed again from its first token.
            watch.begin_request();
            write_all(&mut stream, &request(2));
            stream
                .inner
                .input
                .extend(packets(&done(TOKEN_DONE, DONE_COUNT, CMD_INSERT, 1), 512));
            read_all(&mut stream);
            let summary = watch.summary();
            assert_eq!(summary.gave_up, None);
            assert_eq!(summary.rows_affected, Some(1));
        }
    }

    #[test]
    fn an_unknown_column_type_gives_up() {
        let mut payload = vec![
            TOKEN_COLMETADATA,
            1,
            0,
            0,
            0,
            0,
            0,
            0x09,
            0x00,
            0x99,
            1,
            0x41,
            0,
        ];
        payload.extend(done(TOKEN_DONE, DONE_COUNT, CMD_UPDATE, 1));
        let (_, summary, ..) = run(packets(&payload, 512), Chunks::Random(3));
        assert_eq!(summary.gave_up.as_deref(), Some("unknown column type 0x99"));
        assert_eq!(summary.rows_affected, None);
    }

    #[test]
    fn a_message_ending_inside_a_token_is_reported() {
        let mut payload = done(TOKEN_DONE, DONE_COUNT, CMD_UPDATE, 1);
        payload.truncate(7);
        let (_, summary, ..) = run(packets(&payload, 512), Chunks::Fixed(1));
        assert!(summary.gave_up.unwrap().contains("ended inside a token"));
    }

    #[test]
    fn passthrough_is_byte_identical_armed_or_not() {
        let mut rng = 0x1234_5678_u64;
        let garbage: Vec<u8> = (0..20_000)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect();
        let good = packets(&procedure_response(), 512);
        for input in [garbage.clone(), good] {
            for armed in [false, true] {
                for chunks in chunkings() {
                    let (mut stream, watch) = wrap(Socket::new(input.clone(), chunks));
                    if armed {
                        watch.arm();
                    }
                    watch.begin_request();
                    write_all(&mut stream, &request(1));
                    write_all(&mut stream, &garbage[..777]);
                    assert_eq!(read_all(&mut stream), input);
                    let mut expected = request(1);
                    expected.extend_from_slice(&garbage[..777]);
                    assert_eq!(stream.inner.written, expected);
                }
            }
        }
    }

    #[test]
    fn attention_goes_out_after_the_request_and_is_acknowledged() {
        for write_limit in [usize::MAX, 3] {
            let (mut stream, watch) = wrap(Socket::new(Vec::new(), Chunks::Fixed(5)));
            stream.inner.write_limit = write_limit;
            watch.arm();
            watch.begin_request();
            // Asked for before the request is written: it waits for the request.
            assert!(watch.attention());
            read_all(&mut stream);
            assert!(stream.inner.written.is_empty());
            assert!(!watch.summary().attention_sent);

            write_all(&mut stream, &request(1));
            // The server is silent; the next read writes the attention packet.
            read_all(&mut stream);
            let mut expected = request(1);
            expected.extend_from_slice(&[0x06, 0x01, 0x00, 0x08, 0x00, 0x00, 0x02, 0x00]);
            assert_eq!(stream.inner.written, expected);
            assert!(watch.summary().attention_sent);
            // Once only.
            assert!(watch.attention());
            read_all(&mut stream);
            assert_eq!(stream.inner.written, expected);

            // The server ends the response with DONE_ATTN.
            let mut payload = done(TOKEN_DONEINPROC, MORE | DONE_COUNT, CMD_UPDATE, 4);
            payload.extend(done(TOKEN_DONE, DONE_ATTN, 0, 0));
            stream.inner.input.extend(packets(&payload, 512));
            read_all(&mut stream);
            let summary = watch.summary();
            assert!(summary.attention_acknowledged);
            assert!(summary.response_complete);
            assert!(!summary.out_of_step());
            assert_eq!(summary.rows_affected, Some(4));
            // The response ended: nothing left to cancel.
            assert!(!watch.attention());
        }
    }

    #[test]
    fn attention_wakes_the_pending_read() {
        let (mut stream, watch) = wrap(Socket::new(Vec::new(), Chunks::Fixed(5)));
        watch.arm();
        watch.begin_request();
        write_all(&mut stream, &request(9));
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&counter));
        read_all_with(&mut stream, &waker);
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
        assert!(watch.attention());
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        read_all_with(&mut stream, &waker);
        assert_eq!(
            &stream.inner.written[stream.inner.written.len() - 8..],
            &[6, 1, 0, 8, 0, 0, 10, 0]
        );
    }

    #[test]
    fn attention_is_refused_when_it_cannot_be_sent() {
        // Not armed.
        let (_, watch) = wrap(Socket::new(Vec::new(), Chunks::Fixed(1)));
        watch.begin_request();
        assert!(!watch.attention());

        // Armed but no request began.
        let (_, watch) = wrap(Socket::new(Vec::new(), Chunks::Fixed(1)));
        watch.arm();
        assert!(!watch.attention());

        // The response already ended: the request is not cancelled behind tiberius' back.
        let (mut stream, summary_watch) = {
            let (_, _, stream, watch) =
                run(packets(&done(TOKEN_DONE, 0, 0, 0), 512), Chunks::Fixed(2));
            (stream, watch)
        };
        assert!(!summary_watch.attention());
        read_all(&mut stream);
        assert_eq!(stream.inner.written, request(1));

        // A cancel asked for during one request is forgotten by the next.
        let (mut stream, watch) = wrap(Socket::new(Vec::new(), Chunks::Fixed(1)));
        watch.arm();
        watch.begin_request();
        assert!(watch.attention());
        watch.begin_request();
        write_all(&mut stream, &request(1));
        read_all(&mut stream);
        assert_eq!(stream.inner.written, request(1));
    }

    #[test]
    fn encrypted_traffic_is_detected_and_never_injected_into() {
        // A TLS application-data record where a TDS packet should be.
        let tls = [0x17, 0x03, 0x03, 0x00, 0x20, 1, 2, 3, 4, 5, 6, 7];
        let (mut stream, watch) = wrap(Socket::new(tls.to_vec(), Chunks::Fixed(4)));
        watch.arm();
        watch.begin_request();
        write_all(&mut stream, &tls);
        assert!(watch.summary().gave_up.unwrap().contains("encrypted"));
        assert!(!watch.attention());
        assert_eq!(read_all(&mut stream), tls);
        assert_eq!(stream.inner.written, tls);

        // The same from the server side alone.
        let (mut stream, watch) = wrap(Socket::new(tls.to_vec(), Chunks::Fixed(4)));
        watch.arm();
        watch.begin_request();
        read_all(&mut stream);
        assert!(
            watch
                .summary()
                .gave_up
                .unwrap()
                .contains("server bytes are not a tds packet")
        );
        assert!(!watch.attention());
    }

    #[test]
    fn a_previous_response_drained_late_is_not_counted() {
        // tiberius drains an unread response before writing the next request.
        let stale = packets(&done(TOKEN_DONE, DONE_COUNT, CMD_UPDATE, 50), 512);
        let (mut stream, watch) = wrap(Socket::new(stale, Chunks::Fixed(3)));
        watch.arm();
        watch.begin_request();
        read_all(&mut stream);
        assert_eq!(watch.summary().rows_affected, None);
        assert!(!watch.summary().response_complete);
        write_all(&mut stream, &request(2));
        stream
            .inner
            .input
            .extend(packets(&done(TOKEN_DONE, DONE_COUNT, CMD_UPDATE, 1), 512));
        read_all(&mut stream);
        assert_eq!(watch.summary().rows_affected, Some(1));

        // A response half read when the next request begins: its tail is not counted either.
        let mut payload = done(TOKEN_DONEINPROC, MORE | DONE_COUNT, CMD_UPDATE, 3);
        payload.extend(done(TOKEN_DONE, DONE_COUNT, CMD_UPDATE, 4));
        // Packets of 13 payload bytes: the first holds exactly the DONEINPROC.
        let input = packets(&payload, 21);
        let (mut stream, watch) = wrap(Socket::new(input[..21].to_vec(), Chunks::Fixed(21)));
        watch.arm();
        watch.begin_request();
        write_all(&mut stream, &request(1));
        read_all(&mut stream);
        assert_eq!(watch.summary().rows_affected, Some(3));
        watch.begin_request();
        stream.inner.input.extend_from_slice(&input[21..]);
        read_all(&mut stream);
        assert_eq!(watch.summary().rows_affected, None);
    }

    #[test]
    fn an_acknowledgement_after_the_response_puts_the_connection_out_of_step() {
        // The attention crossed the end of the response: the ack comes as its own message.
        let (mut stream, watch) = wrap(Socket::new(Vec::new(), Chunks::Fixed(64)));
        watch.arm();
        watch.begin_request();
        write_all(&mut stream, &request(1));
        assert!(watch.attention());
        read_all(&mut stream);
        stream
            .inner
            .input
            .extend(packets(&done(TOKEN_DONE, DONE_COUNT, CMD_UPDATE, 1), 512));
        read_all(&mut stream);
        let summary = watch.summary();
        assert!(summary.attention_sent && summary.response_complete);
        assert!(summary.out_of_step());
        assert_eq!(summary.rows_affected, Some(1));
        // The separate acknowledgement (here read in the same chunk as the response, as
        // tiberius' buffered reads do) does not count as acknowledged in the response.
        stream
            .inner
            .input
            .extend(packets(&done(TOKEN_DONE, DONE_ATTN, 0, 0), 512));
        read_all(&mut stream);
        let summary = watch.summary();
        assert!(!summary.attention_acknowledged);
        assert_eq!(summary.late_messages, 1);
        assert!(summary.out_of_step());
    }

    #[test]
    fn a_late_message_is_not_part_of_the_response() {
        let mut input = packets(&done(TOKEN_DONE, DONE_COUNT, CMD_UPDATE, 1), 512);
        input.extend(packets(&done(TOKEN_DONE, DONE_COUNT, CMD_UPDATE, 7), 512));
        let (_, summary, ..) = run(input, Chunks::Fixed(4096));
        assert_eq!(summary.rows_affected, Some(1));
        assert_eq!(summary.late_messages, 1);
        assert!(summary.out_of_step());
    }

    #[test]
    fn feature_ext_ack_and_login_tokens_are_skipped() {
        let mut payload = opaque(TOKEN_LOGINACK, &[1, 2, 3, 4, 5]);
        payload.extend(opaque(TOKEN_ENVCHANGE, &[1, 2, 2, 0x41, 0, 0]));
        payload.extend([
            TOKEN_FEATUREEXTACK,
            0x04,
            1,
            0,
            0,
            0,
            1,
            0x0A,
            0,
            0,
            0,
            0,
            0xFF,
        ]);
        payload.extend(opaque(TOKEN_COLINFO, &[1, 1, 0]));
        payload.extend(opaque(TOKEN_TABNAME, &[1, 0, 0x41, 0]));
        payload.extend(opaque(TOKEN_ERROR, &[0; 20]));
        payload.extend(done(TOKEN_DONE, DONE_COUNT, CMD_INSERT, 1));
        for chunks in chunkings() {
            let (_, summary, ..) = run(packets(&payload, 13), chunks);
            assert_eq!(summary.gave_up, None, "{chunks:?}");
            assert_eq!(summary.rows_affected, Some(1));
        }
    }
}
