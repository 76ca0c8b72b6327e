//! Why a calendar rule was refused.

/// Why a calendar rule (text or structured) was refused.
///
/// Every message is lowercase, starts with `calendar:`, names the offending piece as written and
/// says what to write instead, because these messages reach users editing a config file or a
/// form, not programmers reading a stack trace. The same variants serve the text parser and the
/// validating constructor [`super::CalendarRule::new`], so a rule built from JSON or TOML is
/// refused with the same wording as its text form would be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CalendarError {
    /// The text is empty or only whitespace.
    #[error(
        "calendar: the rule is empty; write e.g. \"daily at 09:00\", \"weekly on mon-fri every 1h between 06:00-22:30\" or \"monthly on last at 20:00\""
    )]
    Empty,
    /// The first word is not a frequency.
    #[error("calendar: a rule starts with \"daily\", \"weekly\" or \"monthly\", found \"{found}\"")]
    UnknownFrequency {
        /// The first word as written.
        found: String,
    },
    /// A required part is missing or something else stands where it belongs.
    #[error("calendar: expected {expected} after {after}, found {}", found_text(.found))]
    Expected {
        /// What belongs here, e.g. `"at" or "every"`.
        expected: String,
        /// Where: the part it should follow, e.g. `the days` or `"daily"`.
        after: String,
        /// The word found instead, or `None` at the end of the text.
        found: Option<String>,
    },
    /// An "every N days/weeks/months" count that is not a whole number of at least 1.
    #[error(
        "calendar: \"{found}\" is not a valid interval; write a whole number of {unit} from 1 up, e.g. \"every 2 {unit}\""
    )]
    Interval {
        /// The count as written (`0` when a structured rule carried zero).
        found: String,
        /// `days`, `weeks` or `months`.
        unit: &'static str,
    },
    /// A time of day that does not exist or is not written `HH:MM[:SS]`.
    #[error(
        "calendar: \"{found}\" is not a time of day; expected HH:MM or HH:MM:SS (00:00-23:59:59)"
    )]
    BadTime {
        /// The time as written (or formatted from seconds for a structured rule).
        found: String,
    },
    /// An "every" step that is not a number with a unit.
    #[error(
        "calendar: \"{found}\" is not an interval; expected a number followed by s, m or h, e.g. \"every 15m\" or \"every 1h30m\""
    )]
    BadStep {
        /// The step as written.
        found: String,
    },
    /// An "every" step of zero or of a day or more.
    #[error(
        "calendar: an interval of {seconds} seconds is out of range; expected 1s up to 23h59m59s (for a day or more, use \"daily every N days at HH:MM\")"
    )]
    StepOutOfRange {
        /// The step in seconds.
        seconds: u64,
    },
    /// A time window whose end is before its start.
    #[error(
        "calendar: the window {start}-{end} ends before it starts; a window cannot cross midnight, so use two schedules (one between {start}-23:59:59 and one between 00:00-{end})"
    )]
    ReversedWindow {
        /// The window's start, `HH:MM[:SS]`.
        start: String,
        /// The window's end, `HH:MM[:SS]`.
        end: String,
    },
    /// A word in a weekday list that is not a weekday.
    #[error(
        "calendar: unknown weekday \"{found}\"; expected mon, tue, wed, thu, fri, sat or sun (or a range such as mon-fri, \"weekdays\" or \"weekends\")"
    )]
    UnknownWeekday {
        /// The word as written.
        found: String,
    },
    /// An item in a day-of-month list that is not a day.
    #[error("calendar: \"{found}\" is not a day of the month; {hint}")]
    BadMonthDay {
        /// The item as written.
        found: String,
        /// What is allowed instead.
        hint: &'static str,
    },
    /// A weekday or day range written backwards (`fri-mon`, `25-5`).
    #[error(
        "calendar: the range \"{found}\" runs backwards and ranges do not wrap around; write \"{suggestion}\""
    )]
    WrappingRange {
        /// The range as written.
        found: String,
        /// The same days written as forward ranges.
        suggestion: String,
    },
    /// A `from`/`until` value that is not a date (and optional time).
    #[error(
        "calendar: \"{found}\" is not a date; expected YYYY-MM-DD, optionally followed by THH:MM or THH:MM:SS"
    )]
    BadDate {
        /// The value as written.
        found: String,
    },
    /// A keyword that may appear once appears twice.
    #[error("calendar: \"{keyword}\" is given twice; give it at most once")]
    Duplicate {
        /// The keyword (`from` or `until`).
        keyword: &'static str,
    },
    /// A weekly rule with no weekday.
    #[error(
        "calendar: a weekly rule needs at least one weekday; use e.g. mon-fri, or a daily rule for every day"
    )]
    NoWeekdays,
    /// A monthly rule with no day of the month.
    #[error(
        "calendar: a monthly rule needs at least one day of the month; use e.g. 1, last or first mon"
    )]
    NoMonthDays,
    /// An `at` list with no time.
    #[error("calendar: \"at\" needs at least one time of day, e.g. \"at 09:00\"")]
    NoTimes,
    /// The rule is well formed but provably never fires.
    #[error("calendar: the rule never fires: {reason}")]
    NeverFires {
        /// Why no time can match, and what to change.
        reason: String,
    },
}

fn found_text(found: &Option<String>) -> String {
    match found {
        Some(f) => format!("\"{f}\""),
        None => "the end of the rule".to_string(),
    }
}
