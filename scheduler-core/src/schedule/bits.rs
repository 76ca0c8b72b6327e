//! Bit-set helpers shared by the cron and calendar engines.
//!
//! Every cron field fits in one machine word (seconds and minutes in a `u64`, days in a `u32`),
//! so "the next allowed value at or after x" is one shift and one `trailing_zeros`.

/// The smallest set bit at or above `from`, if any.
#[inline]
pub(crate) fn next_bit(bits: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let m = bits >> from;
    if m == 0 {
        None
    } else {
        Some(from + m.trailing_zeros())
    }
}

/// The largest set bit at or below `from`, if any.
#[inline]
pub(crate) fn prev_bit(bits: u64, from: i32) -> Option<u32> {
    if from < 0 {
        return None;
    }
    let m = if from >= 63 {
        bits
    } else {
        bits & ((2u64 << from) - 1)
    };
    if m == 0 {
        None
    } else {
        Some(63 - m.leading_zeros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_and_prev_find_the_nearest_bit() {
        let b = (1 << 3) | (1 << 10) | (1 << 63);
        assert_eq!(next_bit(b, 0), Some(3));
        assert_eq!(next_bit(b, 3), Some(3));
        assert_eq!(next_bit(b, 4), Some(10));
        assert_eq!(next_bit(b, 11), Some(63));
        assert_eq!(next_bit(b, 64), None);
        assert_eq!(next_bit(0, 0), None);
        assert_eq!(prev_bit(b, 63), Some(63));
        assert_eq!(prev_bit(b, 62), Some(10));
        assert_eq!(prev_bit(b, 9), Some(3));
        assert_eq!(prev_bit(b, 2), None);
        assert_eq!(prev_bit(b, -1), None);
        assert_eq!(prev_bit(b, 200), Some(63));
    }
}
