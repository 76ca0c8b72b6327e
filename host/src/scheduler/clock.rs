//! [`Clock`]: where the loop reads "now" and waits for a time, so that tests can run an hour
//! of scheduling in milliseconds with a [`TestClock`].

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;

/// A boxed future that completes when a clock reaches an instant.
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The scheduling loop's source of time.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;
    /// Completes once [`now`](Clock::now) is at or after `at` (at once if it already is).
    fn sleep_until(&self, at: Timestamp) -> Sleep<'_>;

    /// The monotonic [`Instant`] at which this clock will read `at`, for a clock that moves
    /// with real time; `None` (the default) for one that does not, like [`TestClock`].
    ///
    /// A run claimed ahead of its fire time is handed to the executor at once with this
    /// instant, and its thread sleeps until it (see `RunRequest::not_before`); without one the
    /// run's task waits on [`sleep_until`](Clock::sleep_until) before the hand-over.
    fn instant_of(&self, at: Timestamp) -> Option<Instant> {
        let _ = at;
        None
    }
}

/// `at` on the monotonic clock, for a clock that reads `now` at this moment.
fn instant_at(at: Timestamp, now: Timestamp) -> Option<Instant> {
    let left = Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO);
    Instant::now().checked_add(left)
}

/// The system clock (`Timestamp::now`) with tokio's timer for the long part of a wait and a
/// precise OS sleep for its last [`FINE_WAIT`].
///
/// tokio's timer has a resolution of one millisecond and rounds deadlines up, so a due instant
/// was noticed 1–2 ms late (B4); a thread sleep on Linux overshoots by tens of microseconds.
/// The fine part runs on tokio's blocking pool and cannot be cancelled: dropped early, it
/// holds a pool thread for at most [`FINE_WAIT`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

/// How much of a [`SystemClock`] wait is a precise thread sleep instead of a tokio timer.
const FINE_WAIT: Duration = Duration::from_millis(2);

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn sleep_until(&self, at: Timestamp) -> Sleep<'_> {
        Box::pin(wait_until(at, Timestamp::now))
    }

    fn instant_of(&self, at: Timestamp) -> Option<Instant> {
        instant_at(at, self.now())
    }
}

/// Waits until `now()` reaches `at`: tokio's timer for all but the last [`FINE_WAIT`], then a
/// precise thread sleep (tokio's timer rounds up to the millisecond and wakes 1–2 ms late).
/// Re-checks after waking: the wall clock (or an offset) may have moved meanwhile.
async fn wait_until(at: Timestamp, now: impl Fn() -> Timestamp) {
    loop {
        let left = at.duration_since(now());
        match Duration::try_from(left) {
            Ok(d) if d > FINE_WAIT => tokio::time::sleep(d - FINE_WAIT).await,
            Ok(d) if !d.is_zero() => {
                // A runtime that is shutting down refuses blocking work: the coarse timer
                // still ends the wait.
                if tokio::task::spawn_blocking(move || std::thread::sleep(d))
                    .await
                    .is_err()
                {
                    tokio::time::sleep(d).await;
                }
            }
            _ => return,
        }
    }
}

/// The system clock shifted by an offset that can change while it runs: a node on a shared
/// database schedules by the database's clock (seed 000 §7: "the database's clock, not a
/// node's, decides what is due"), so a node whose own clock is off by an hour neither fires
/// early, nor skips fires as misfires, nor lets leases look expired to the others.
///
/// The host measures the offset against the database ([`OffsetClock::set_offset`]) at start
/// and again periodically; between measurements the node's clock rate is trusted.
#[derive(Debug, Default)]
pub struct OffsetClock {
    /// Milliseconds added to the system clock.
    offset_ms: std::sync::atomic::AtomicI64,
    /// A fixed error added to the system clock before the offset: a test's way to play a node
    /// whose clock is wrong (`TAKT_TEST_CLOCK_SKEW`), which the offset must then cancel.
    skew_ms: i64,
}

impl OffsetClock {
    /// A clock reading the system clock plus `skew` (zero outside tests), with no offset yet.
    pub fn new(skew: SignedDuration) -> OffsetClock {
        OffsetClock {
            offset_ms: std::sync::atomic::AtomicI64::new(0),
            skew_ms: i64::try_from(skew.as_millis()).unwrap_or(0),
        }
    }

    /// This node's own reading (system clock plus skew), before the offset.
    pub fn local_now(&self) -> Timestamp {
        shift(Timestamp::now(), self.skew_ms)
    }

    /// Sets the offset: from now on [`Clock::now`] is the local reading plus `offset`.
    pub fn set_offset(&self, offset: SignedDuration) {
        let ms = i64::try_from(offset.as_millis()).unwrap_or(0);
        self.offset_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// The offset in use.
    pub fn offset(&self) -> SignedDuration {
        SignedDuration::from_millis(self.offset_ms.load(std::sync::atomic::Ordering::Relaxed))
    }
}

fn shift(t: Timestamp, ms: i64) -> Timestamp {
    t.checked_add(SignedDuration::from_millis(ms)).unwrap_or(t)
}

impl Clock for OffsetClock {
    fn now(&self) -> Timestamp {
        shift(
            self.local_now(),
            self.offset_ms.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    fn sleep_until(&self, at: Timestamp) -> Sleep<'_> {
        Box::pin(wait_until(at, || self.now()))
    }

    fn instant_of(&self, at: Timestamp) -> Option<Instant> {
        instant_at(at, self.now())
    }
}

/// A clock that only moves when a test moves it ([`advance`](TestClock::advance),
/// [`set`](TestClock::set)); every sleeper whose deadline is reached wakes at once.
#[derive(Debug)]
pub struct TestClock {
    now: watch::Sender<Timestamp>,
}

impl TestClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> TestClock {
        TestClock {
            now: watch::Sender::new(start),
        }
    }

    /// Moves the clock forward by `by` and wakes the sleepers it passes.
    ///
    /// # Panics
    ///
    /// If the instant would leave jiff's range (years -9999..=9999).
    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|t| {
            *t = t
                .checked_add(by)
                .expect("test clock advanced beyond jiff's timestamp range");
        });
    }

    /// Sets the clock to `to` (backwards too) and wakes the sleepers it passes.
    pub fn set(&self, to: Timestamp) {
        self.now.send_replace(to);
    }
}

impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        *self.now.borrow()
    }

    fn sleep_until(&self, at: Timestamp) -> Sleep<'_> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender lives in `self`, which outlives the future, so this cannot fail.
            let _ = rx.wait_for(|now| *now >= at).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn test_clock_wakes_sleepers_when_passed() {
        let t0: Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        let clock = TestClock::new(t0);
        let at = t0.checked_add(Duration::from_secs(60)).unwrap();
        let mut sleep = clock.sleep_until(at);
        // Not yet: polling once does not complete it.
        assert!(futures_poll_once(&mut sleep));
        clock.advance(Duration::from_secs(30));
        assert!(futures_poll_once(&mut sleep));
        clock.advance(Duration::from_secs(30));
        sleep.await;
        assert_eq!(clock.now(), at);
        // A deadline already passed completes at once.
        clock.sleep_until(t0).await;
    }

    /// Polls once; `true` when still pending.
    fn futures_poll_once(f: &mut Sleep<'_>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        f.as_mut().poll(&mut cx).is_pending()
    }
}
