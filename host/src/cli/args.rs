//! Numbers and durations given on the command line, checked with messages that name the
//! option and the accepted form.
//!
//! Options taking them are declared with `allow_hyphen_values` and parsed here: without it clap
//! reads `--timeout -5s` as an unknown flag `-5` ("unexpected argument '-5'"), which tells the
//! user nothing about what is wrong with the value.

use std::str::FromStr;

use anyhow::{Result, anyhow, bail};
use takt_core::schedule::parse_duration;

/// A duration option in whole seconds (`30s`, `10m`, `1h30m`; at least 1 s); a negative or
/// malformed value is refused with the accepted form.
pub(super) fn duration(flag: &str, text: &str) -> Result<u64> {
    not_negative(flag, text)?;
    let secs =
        parse_duration(text).map_err(|e| anyhow!("{flag} \"{text}\": {e}; {DURATION_FORM}"))?;
    Ok(secs)
}

const DURATION_FORM: &str = "give a positive duration such as 30s, 10m or 1h30m";

/// Refuses a negative duration (`--every -5m`) before it is parsed with the rest of a
/// schedule, whose own message would only say the text is not a duration.
pub(super) fn not_negative(flag: &str, text: &str) -> Result<()> {
    if text.trim_start().starts_with('-') {
        bail!("{flag} \"{text}\": a duration cannot be negative; {DURATION_FORM}");
    }
    Ok(())
}

/// A whole-number option (`--retries 3`) of type `T`, at least `min`; `what` names the value
/// in messages ("a count", "a priority").
pub(super) fn number<T>(flag: &str, text: &str, what: &str, min: T) -> Result<T>
where
    T: FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let t = text.trim();
    let form = format!("give a whole number of {min} or more");
    if t.starts_with('-') {
        bail!("{flag} \"{text}\": {what} cannot be negative; {form}");
    }
    let n: T = t
        .parse()
        .map_err(|_| anyhow!("{flag} \"{text}\" is not {what}; {form}"))?;
    if n < min {
        bail!("{flag} \"{text}\": {what} must be at least {min}");
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_name_the_flag_and_the_form() {
        assert_eq!(duration("--timeout", "1h30m").unwrap(), 5400);
        let e = duration("--timeout", "-5s").unwrap_err().to_string();
        assert_eq!(
            e,
            "--timeout \"-5s\": a duration cannot be negative; give a positive duration such as \
             30s, 10m or 1h30m"
        );
        let e = duration("--for", "soon").unwrap_err().to_string();
        assert!(e.starts_with("--for \"soon\": "), "{e}");
        assert!(duration("--timeout", "0s").is_err());
    }

    #[test]
    fn numbers_name_the_flag_and_the_form() {
        assert_eq!(number::<u32>("--retries", "3", "a count", 0).unwrap(), 3);
        let e = number::<u32>("--retries", "-1", "a count", 0)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--retries \"-1\": a count cannot be negative; give a whole number of 0 or more"
        );
        let e = number::<usize>("--limit", "0", "a count", 1)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--limit \"0\": a count must be at least 1");
        let e = number::<u16>("--priority", "high", "a priority", 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--priority \"high\" is not a priority"),
            "{e}"
        );
    }
}
