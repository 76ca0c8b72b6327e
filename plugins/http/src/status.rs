//! Sets of HTTP statuses as jobs write them: `200`, `"404"`, `"5xx"`, `"200-299"`.

use serde_json::Value as Json;

/// A set of statuses, kept as the job wrote it for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet {
    ranges: Vec<(u16, u16)>,
    shown: Vec<String>,
}

impl StatusSet {
    /// `2xx`.
    pub fn default_success() -> StatusSet {
        StatusSet {
            ranges: vec![(200, 299)],
            shown: vec!["2xx".into()],
        }
    }

    /// `408, 429, 5xx`: a request timeout, rate limiting and server errors, where another
    /// attempt later may be answered (Polly's transient HTTP errors, plus 429).
    pub fn default_retry() -> StatusSet {
        StatusSet {
            ranges: vec![(408, 408), (429, 429), (500, 599)],
            shown: vec!["408".into(), "429".into(), "5xx".into()],
        }
    }

    /// Parses the job's list; the error names the bad item.
    pub fn parse(items: &[Json]) -> Result<StatusSet, String> {
        let mut set = StatusSet {
            ranges: Vec::with_capacity(items.len()),
            shown: Vec::with_capacity(items.len()),
        };
        for item in items {
            let (range, shown) = match item {
                Json::Number(n) => {
                    let code = n
                        .as_u64()
                        .and_then(|c| u16::try_from(c).ok())
                        .filter(|c| (100..=599).contains(c))
                        .ok_or_else(|| format!("{n} is not a status; statuses are 100 to 599"))?;
                    ((code, code), code.to_string())
                }
                Json::String(s) => (parse_text(s)?, s.trim().to_ascii_lowercase()),
                other => {
                    return Err(format!(
                        "{other} is not a status; write 404, \"4xx\" or \"400-499\""
                    ));
                }
            };
            set.ranges.push(range);
            set.shown.push(shown);
        }
        Ok(set)
    }

    /// Whether `code` is in the set.
    pub fn contains(&self, code: u16) -> bool {
        self.ranges.iter().any(|&(a, b)| (a..=b).contains(&code))
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The lowest status in both sets.
    pub fn first_shared_with(&self, other: &StatusSet) -> Option<u16> {
        (100..=599).find(|&c| self.contains(c) && other.contains(c))
    }

    /// This set without the statuses of `other` (a default retry set beside a job's own
    /// success statuses).
    pub fn without(&self, other: &StatusSet) -> StatusSet {
        let mut ranges = Vec::new();
        let mut start = None;
        for c in 100..=600u16 {
            let inside = c <= 599 && self.contains(c) && !other.contains(c);
            match (inside, start) {
                (true, None) => start = Some(c),
                (false, Some(s)) => {
                    ranges.push((s, c - 1));
                    start = None;
                }
                _ => {}
            }
        }
        if ranges == self.ranges {
            return self.clone();
        }
        let shown = ranges
            .iter()
            .map(|&(a, b)| match (a, b) {
                (a, b) if a == b => a.to_string(),
                (a, b) if a % 100 == 0 && b == a + 99 => format!("{}xx", a / 100),
                (a, b) => format!("{a}-{b}"),
            })
            .collect();
        StatusSet { ranges, shown }
    }
}

impl std::fmt::Display for StatusSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.shown.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&self.shown.join(", "))
        }
    }
}

fn parse_text(raw: &str) -> Result<(u16, u16), String> {
    let s = raw.trim().to_ascii_lowercase();
    let bad = || {
        format!(
            "\"{}\" is not a status; write 404, \"4xx\" or \"400-499\" (100 to 599)",
            raw.escape_debug()
        )
    };
    let code = |t: &str| {
        t.trim()
            .parse::<u16>()
            .ok()
            .filter(|c| (100..=599).contains(c))
    };
    if let Some(class) = s.strip_suffix("xx") {
        return match class.parse::<u16>() {
            Ok(d @ 1..=5) if class.len() == 1 => Ok((d * 100, d * 100 + 99)),
            _ => Err(bad()),
        };
    }
    if let Some((a, b)) = s.split_once('-') {
        return match (code(a), code(b)) {
            (Some(a), Some(b)) if a <= b => Ok((a, b)),
            _ => Err(bad()),
        };
    }
    code(&s).map(|c| (c, c)).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn forms() {
        let set = StatusSet::parse(&[json!(201), json!("4XX"), json!(" 300-302 ")]).unwrap();
        assert!(set.contains(201) && set.contains(404) && set.contains(302));
        assert!(!set.contains(200) && !set.contains(303));
        assert_eq!(set.to_string(), "201, 4xx, 300-302");
        for bad in [
            json!("6xx"),
            json!("0xx"),
            json!("12xx"),
            json!("a-b"),
            json!(true),
            json!(600),
        ] {
            assert!(
                StatusSet::parse(std::slice::from_ref(&bad)).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn without_keeps_what_is_left_readable() {
        let success = StatusSet::parse(&[json!("2xx"), json!(503)]).unwrap();
        let retry = StatusSet::default_retry().without(&success);
        assert_eq!(retry.to_string(), "408, 429, 500-502, 504-599");
        assert_eq!(
            StatusSet::default_retry()
                .without(&StatusSet::default_success())
                .to_string(),
            "408, 429, 5xx"
        );
        assert_eq!(retry.first_shared_with(&success), None);
        assert_eq!(
            StatusSet::default_retry().first_shared_with(&success),
            Some(503)
        );
    }
}
