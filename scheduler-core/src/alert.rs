//! Alerts as the store records them: the episodes that make "one alert per (subject,
//! condition) until it recovers" hold across nodes, and the deliveries (sent, failed,
//! suppressed) an operator reads back.
//!
//! An **episode** is one stretch of a condition on a subject (job `nightly` failing, node `n2`
//! down), from its first alert until it recovers. The store keeps at most one *open* episode
//! per (subject, condition): [`Store::alert_open`] opens one only when none is open, in one
//! atomic step, so of several nodes that see the same failure (or failures of the same job on
//! different nodes) exactly one is told to send; [`Store::alert_close`] closes the open one,
//! again for exactly one caller, which sends the "recovered" notice. What the episode's key
//! is (the run that opened it, the heartbeat that was last seen) is the caller's: it is kept
//! for the record.
//!
//! [`Store::alert_open`]: crate::store::Store::alert_open
//! [`Store::alert_close`]: crate::store::Store::alert_close

use jiff::Timestamp;

/// What an alert is about and why: the (subject, condition) pair episodes are kept per.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AlertKey {
    /// `job:<name>` or `node:<id>` (free text for the store; at most 200 characters).
    pub subject: String,
    /// The condition's name (`failed`, `timed_out`, `skipped`, `long_running`, `node_down`;
    /// at most 40 characters).
    pub condition: String,
}

/// How a delivery ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeliveryOutcome {
    /// The channel accepted it (the SMTP server's 250, the webhook's 2xx).
    Sent,
    /// It could not be delivered; the detail says why.
    Failed,
    /// Not sent on purpose: a duplicate of an open episode, held back by the rate limit (and
    /// summarised in a digest), or dropped from a full queue; the detail says which.
    Suppressed,
}

impl DeliveryOutcome {
    /// The stored name: `sent`, `failed`, `suppressed`.
    pub fn name(self) -> &'static str {
        match self {
            DeliveryOutcome::Sent => "sent",
            DeliveryOutcome::Failed => "failed",
            DeliveryOutcome::Suppressed => "suppressed",
        }
    }

    /// The outcome named `name`.
    pub fn from_name(name: &str) -> Option<DeliveryOutcome> {
        match name {
            "sent" => Some(DeliveryOutcome::Sent),
            "failed" => Some(DeliveryOutcome::Failed),
            "suppressed" => Some(DeliveryOutcome::Suppressed),
            _ => None,
        }
    }
}

/// One delivery attempt of one alert on one channel, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertDelivery {
    /// Its id in the store (`None` before it is recorded).
    pub id: Option<i64>,
    /// When the outcome was known.
    pub at: Timestamp,
    /// The node that delivered (or suppressed) it.
    pub node: String,
    /// The channel's name.
    pub channel: String,
    /// What the alert is about.
    pub key: AlertKey,
    /// `firing` or `recovered`, or `digest` for a rate limit's summary.
    pub kind: String,
    /// The run it concerns, if any.
    pub run: Option<i64>,
    /// The outcome.
    pub outcome: DeliveryOutcome,
    /// The alert's one-line summary, and for a failure or a suppression why.
    pub detail: String,
}

/// Truncates `text` to at most `max` characters (on a character boundary), for the columns
/// of bounded width.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => text[..i].to_string(),
        None => text.to_string(),
    }
}

/// Width limits of the stored fields (the SQL columns' sizes).
pub mod limits {
    /// [`super::AlertKey::subject`].
    pub const SUBJECT: usize = 200;
    /// [`super::AlertKey::condition`] and [`super::AlertDelivery::kind`].
    pub const CONDITION: usize = 40;
    /// [`super::AlertDelivery::channel`] and [`super::AlertDelivery::node`].
    pub const NAME: usize = 200;
    /// [`super::AlertDelivery::detail`] and an episode's key.
    pub const DETAIL: usize = 2000;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip_and_clip_keeps_characters_whole() {
        for o in [
            DeliveryOutcome::Sent,
            DeliveryOutcome::Failed,
            DeliveryOutcome::Suppressed,
        ] {
            assert_eq!(DeliveryOutcome::from_name(o.name()), Some(o));
        }
        assert_eq!(DeliveryOutcome::from_name("lost"), None);
        assert_eq!(clip("作业失败了", 2), "作业");
        assert_eq!(clip("ok", 5), "ok");
    }
}
