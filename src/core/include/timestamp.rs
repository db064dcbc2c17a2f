//! datatype/timestamp.h: PostgreSQL's `TimestampTz`, microseconds since 2000-01-01
//! 00:00 UTC (`POSTGRES_EPOCH_JDATE`), as `GetCurrentTimestamp` and the catalogs give it.

/// Seconds from the Unix epoch (1970-01-01) to PostgreSQL's (2000-01-01):
/// `(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY`.
pub const POSTGRES_EPOCH_UNIX_SECS: i64 = 946_684_800;

/// A Unix time in microseconds as a `TimestampTz`.
pub fn timestamp_from_unix_micros(us: i64) -> i64 {
    us.saturating_sub(POSTGRES_EPOCH_UNIX_SECS * 1_000_000)
}

/// A Unix time in milliseconds (a log line's time) as a `TimestampTz`.
pub fn timestamp_from_unix_ms(ms: i64) -> i64 {
    timestamp_from_unix_micros(ms.saturating_mul(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs() {
        assert_eq!(timestamp_from_unix_ms(946_684_800_000), 0);
        // 2026-12-03 21:37:15.412 UTC
        assert_eq!(
            timestamp_from_unix_ms(1_796_333_835_412),
            849_649_035_412_000
        );
    }
}
