//! Small English helpers shared by the schedule descriptions.

/// Weekday names, index 0 = Sunday (the cron numbering).
pub(crate) const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// The English name of month 1..=12.
pub(crate) fn month_name(m: u32) -> &'static str {
    MONTHS[(m as usize).clamp(1, 12) - 1]
}

/// "first", "second", … for 1..=5.
pub(crate) fn ordinal(k: u32) -> &'static str {
    match k {
        1 => "first",
        2 => "second",
        3 => "third",
        4 => "fourth",
        _ => "fifth",
    }
}

/// "a", "a and b", "a, b and c".
pub(crate) fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_lists_in_english() {
        let s = |v: &[&str]| join_and(&v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(s(&[]), "");
        assert_eq!(s(&["a"]), "a");
        assert_eq!(s(&["a", "b"]), "a and b");
        assert_eq!(s(&["a", "b", "c"]), "a, b and c");
        assert_eq!(month_name(1), "January");
        assert_eq!(ordinal(3), "third");
    }
}
