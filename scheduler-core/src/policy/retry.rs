//! Retry policy: how many times a failed run is tried again, and how long each retry waits.
//!
//! A retry re-uses its run (seed 003 §3.4): the attempt number goes up by one, the fire time
//! stays, so the `(job, fire time)` unique key never blocks a retry and an operator sees one
//! row "failed once, succeeded on the second attempt". Attempts are numbered from 1; retry `n`
//! is attempt `n + 1`.
//!
//! Delays are deterministic functions of a seed so tests need no random number generator:
//! callers pass [`jitter_seed`]`(run, attempt)`, which spreads retries of different runs (no
//! thundering herd after a database blip, seed 000 §6.2) and repeats for the same run.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::PolicyError;
use crate::run::RunId;
use crate::schedule::{format_duration, parse_duration};

/// How many retries a run gets and how long each waits.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = never retry; seed 003's advice for the default).
    pub max_retries: u32,
    /// The wait before each retry.
    pub backoff: Backoff,
    /// Whether a timed-out attempt is retried. Off by default: a handler that ignored its
    /// cancellation may still be running on an abandoned thread, and a job that overran once
    /// will likely overrun again, so a retry risks two copies at once for little gain.
    pub retry_timeouts: bool,
}

impl Default for RetryPolicy {
    /// No retries; when retries are switched on, seed 000's 10 s / 30 s / 60 s.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 0,
            backoff: Backoff::seed_default(),
            retry_timeouts: false,
        }
    }
}

impl RetryPolicy {
    /// `max_retries` retries with `backoff`, timeouts not retried.
    pub fn new(max_retries: u32, backoff: Backoff) -> Self {
        RetryPolicy {
            max_retries,
            backoff,
            retry_timeouts: false,
        }
    }

    /// The wait before retry number `retry` (1-based), or `None` when the policy allows no
    /// such retry. `jitter_seed` only matters for jittered exponential backoff.
    pub fn delay(&self, retry: u32, jitter_seed: u64) -> Option<Duration> {
        if retry == 0 || retry > self.max_retries {
            return None;
        }
        Some(self.backoff.delay(retry, jitter_seed))
    }
}

/// The wait before each retry.
#[derive(Clone, Debug, PartialEq)]
pub enum Backoff {
    /// Retry at once.
    None,
    /// One delay per retry; the last one repeats (`10s,30s,60s`: the fourth retry waits 60 s).
    /// An empty list means no wait.
    Fixed(Vec<Duration>),
    /// Growing delays; see [`Exponential`].
    Exponential(Exponential),
}

impl Backoff {
    /// Seed 000 §6.2's 10 s, 30 s, 60 s.
    pub fn seed_default() -> Backoff {
        Backoff::Fixed(vec![
            Duration::from_secs(10),
            Duration::from_secs(30),
            Duration::from_secs(60),
        ])
    }

    /// The wait before retry number `retry` (1-based; 0 is treated as 1).
    pub fn delay(&self, retry: u32, jitter_seed: u64) -> Duration {
        let index = retry.saturating_sub(1) as usize;
        match self {
            Backoff::None => Duration::ZERO,
            Backoff::Fixed(list) => list
                .get(index)
                .or(list.last())
                .copied()
                .unwrap_or(Duration::ZERO),
            Backoff::Exponential(e) => e.delay(retry, jitter_seed),
        }
    }
}

impl fmt::Display for Backoff {
    /// The form [`Backoff::from_str`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backoff::None => f.write_str("none"),
            Backoff::Fixed(list) if list.is_empty() => f.write_str("none"),
            Backoff::Fixed(list) => {
                for (i, d) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    f.write_str(&format_duration(d.as_secs()))?;
                }
                Ok(())
            }
            Backoff::Exponential(e) => {
                write!(
                    f,
                    "exp:{}..{} x{}",
                    format_duration(e.base.as_secs()),
                    format_duration(e.cap.as_secs()),
                    e.factor
                )?;
                if e.jitter > 0.0 {
                    write!(f, " jitter {}", e.jitter)?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Backoff {
    type Err = PolicyError;

    /// Reads `none`, a comma-separated list of durations (`10s,30s,60s`) or
    /// `exp:BASE..CAP[ xFACTOR][ jitter J]` (`exp:1s..5m x2 jitter 0.2`; factor 2 and jitter 0
    /// when left out). Durations use [`parse_duration`], so whole seconds only.
    fn from_str(text: &str) -> Result<Backoff, PolicyError> {
        let syntax = || PolicyError::BackoffSyntax {
            text: text.to_string(),
        };
        let t = text.trim();
        if t.eq_ignore_ascii_case("none") {
            return Ok(Backoff::None);
        }
        if let Some(rest) = t.strip_prefix("exp:") {
            let mut words = rest.split_whitespace();
            let range = words.next().ok_or_else(syntax)?;
            let (base, cap) = range.split_once("..").ok_or_else(syntax)?;
            let base = secs(base, "the exponential base")?;
            let cap = secs(cap, "the exponential cap")?;
            let mut factor = 2.0;
            let mut jitter = 0.0;
            while let Some(w) = words.next() {
                if let Some(x) = w.strip_prefix('x') {
                    factor = x.parse().map_err(|_| PolicyError::Factor {
                        factor: x.to_string(),
                    })?;
                } else if w == "jitter" {
                    let j = words.next().ok_or_else(syntax)?;
                    jitter = j.parse().map_err(|_| PolicyError::Jitter {
                        jitter: j.to_string(),
                    })?;
                } else {
                    return Err(syntax());
                }
            }
            return Ok(Backoff::Exponential(Exponential::new(
                base, factor, cap, jitter,
            )?));
        }
        if t.is_empty() || t.contains("..") {
            return Err(syntax());
        }
        let list = t
            .split(',')
            .map(|d| secs(d.trim(), "the retry delay list"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Backoff::Fixed(list))
    }
}

fn secs(text: &str, field: &'static str) -> Result<Duration, PolicyError> {
    parse_duration(text)
        .map(Duration::from_secs)
        .map_err(|source| PolicyError::Duration { field, source })
}

/// Exponential backoff: retry `n` waits `min(cap, base × factor^(n-1))`, then jitter takes off
/// up to `jitter × delay`.
///
/// Jitter only shortens a delay, so `cap` stays a true upper bound (an operator reading "cap
/// 5m" can rely on it). Made by [`Exponential::new`], which checks the invariants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exponential {
    base: Duration,
    factor: f64,
    cap: Duration,
    jitter: f64,
}

impl Exponential {
    /// Checks `factor` in `1..=100`, `jitter` in `0..=1` and `cap >= base`.
    pub fn new(
        base: Duration,
        factor: f64,
        cap: Duration,
        jitter: f64,
    ) -> Result<Exponential, PolicyError> {
        if !(1.0..=100.0).contains(&factor) {
            return Err(PolicyError::Factor {
                factor: factor.to_string(),
            });
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(PolicyError::Jitter {
                jitter: jitter.to_string(),
            });
        }
        if cap < base {
            return Err(PolicyError::CapBelowBase {
                base: format_duration(base.as_secs()),
                cap: format_duration(cap.as_secs()),
            });
        }
        Ok(Exponential {
            base,
            factor,
            cap,
            jitter,
        })
    }

    /// The first delay.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The growth per retry.
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// The longest delay.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// The fraction of a delay jitter may take off.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    fn delay(&self, retry: u32, seed: u64) -> Duration {
        let exp = retry.saturating_sub(1).min(1024) as i32;
        let cap = self.cap.as_secs_f64();
        // powi overflows to infinity for large exponents; min() then yields the cap.
        let raw = (self.base.as_secs_f64() * self.factor.powi(exp)).min(cap);
        let u = unit_interval(splitmix64(seed));
        let jittered = raw * (1.0 - self.jitter * u);
        Duration::from_secs_f64(jittered.clamp(0.0, cap))
    }
}

/// A seed for [`RetryPolicy::delay`] that differs between runs and attempts and repeats for
/// the same pair.
pub fn jitter_seed(run: RunId, attempt: u32) -> u64 {
    splitmix64((run.0 as u64) ^ (u64::from(attempt) << 48).rotate_left(7))
}

/// splitmix64's finaliser: a cheap, well-mixed hash, enough for spreading retries.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Maps a hash to `[0, 1)` using its top 53 bits.
fn unit_interval(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn fixed_delays_repeat_the_last() {
        let p = RetryPolicy::new(5, Backoff::seed_default());
        let delays: Vec<_> = (1..=6).map(|r| p.delay(r, 0)).collect();
        assert_eq!(
            delays,
            [
                Some(s(10)),
                Some(s(30)),
                Some(s(60)),
                Some(s(60)),
                Some(s(60)),
                None
            ]
        );
        assert_eq!(p.delay(0, 0), None);
        assert_eq!(Backoff::Fixed(vec![]).delay(3, 0), Duration::ZERO);
        assert_eq!(Backoff::None.delay(3, 0), Duration::ZERO);
    }

    #[test]
    fn default_policy_never_retries() {
        let p = RetryPolicy::default();
        assert_eq!(p.max_retries, 0);
        assert!(!p.retry_timeouts);
        assert_eq!(p.delay(1, 0), None);
    }

    #[test]
    fn exponential_grows_to_the_cap() {
        let e = Exponential::new(s(1), 2.0, s(60), 0.0).unwrap();
        let b = Backoff::Exponential(e);
        let d: Vec<_> = (1..=8).map(|r| b.delay(r, 0).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(b.delay(u32::MAX, 0), s(60));
    }

    #[test]
    fn jitter_is_deterministic_bounded_and_spread() {
        let e = Exponential::new(s(100), 1.0, s(100), 0.5).unwrap();
        let b = Backoff::Exponential(e);
        let mut seen = std::collections::HashSet::new();
        for run in 0..200 {
            let seed = jitter_seed(RunId(run), 1);
            let d = b.delay(1, seed);
            assert_eq!(d, b.delay(1, seed), "same seed, same delay");
            assert!(d >= s(50) && d <= s(100), "{d:?}");
            seen.insert(d.as_millis());
        }
        assert!(seen.len() > 150, "jitter spreads: {}", seen.len());
        assert_ne!(jitter_seed(RunId(1), 1), jitter_seed(RunId(1), 2));
        assert_ne!(jitter_seed(RunId(1), 1), jitter_seed(RunId(2), 1));
    }

    #[test]
    fn exponential_rejects_bad_parameters() {
        let e = |f, c, j| Exponential::new(s(10), f, s(c), j).unwrap_err().to_string();
        assert!(e(0.5, 60, 0.0).contains("factor 0.5"));
        assert!(e(f64::NAN, 60, 0.0).contains("factor NaN"));
        assert!(e(2.0, 60, 1.5).contains("jitter 1.5"));
        assert!(e(2.0, 5, 0.0).contains("cap 5s is below its base 10s"));
    }

    #[test]
    fn text_forms_parse_and_round_trip() {
        for text in [
            "none",
            "10s,30s,1m",
            "exp:1s..5m x2",
            "exp:10s..1h x3 jitter 0.25",
        ] {
            let b: Backoff = text.parse().unwrap();
            assert_eq!(b.to_string(), text);
        }
        assert_eq!(
            "10s, 30s".parse::<Backoff>(),
            Ok(Backoff::Fixed(vec![s(10), s(30)]))
        );
        let e: Backoff = "exp:1s..5m".parse().unwrap();
        assert_eq!(
            e,
            Backoff::Exponential(Exponential::new(s(1), 2.0, s(300), 0.0).unwrap())
        );
        for bad in [
            "",
            "exp:",
            "exp:1s",
            "exp:1s..5m y2",
            "1s..5m",
            "exp:1s..5m jitter",
        ] {
            let err = bad.parse::<Backoff>().unwrap_err().to_string();
            assert!(err.contains("are not valid"), "{bad}: {err}");
        }
        let err = "10s,x".parse::<Backoff>().unwrap_err().to_string();
        assert!(
            err.starts_with("in the retry delay list: duration \"x\""),
            "{err}"
        );
        let err = "exp:1s..5m xq".parse::<Backoff>().unwrap_err().to_string();
        assert!(err.contains("factor q"), "{err}");
        let err = "exp:1m..5s".parse::<Backoff>().unwrap_err().to_string();
        assert!(err.contains("below its base"), "{err}");
    }
}
