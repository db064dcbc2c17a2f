//! The times of log lines as elog.c prints them (get_formatted_log_time: `%m` in
//! `log_line_prefix` and the csvlog and jsonlog timestamps; `%t` without milliseconds), in
//! any log_timezone: UTC/GMT, a numeric offset, or an abbreviation of [`ZoneNames`]. And
//! a time printed back as `%m` does in UTC ([`format_ms`]).

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `ms` since the epoch as `%m` prints it in UTC (`2026-12-01 13:18:30.089 UTC`).
pub fn format_ms(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // civil_from_days (H. Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03} UTC",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// Time zone abbreviations a log may print (`CET`, `EST`…) with their offsets from UTC in
/// seconds, as the server knows them (its `log_timezone`'s own abbreviation, then
/// `pg_timezone_abbrevs`); the first entry of a name wins. UTC, GMT and numeric zones need
/// none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneNames(pub Vec<(String, i64)>);

impl ZoneNames {
    /// The offset of abbreviation `name` (seconds east of UTC), if known.
    pub fn offset(&self, name: &str) -> Option<i64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, o)| *o)
    }
}

/// A timestamp at the start of `s` as `%m`/`%t` print it (`2026-12-01 13:18:30.089 UTC`,
/// `… 13:18:30 +03`): milliseconds since the epoch and the rest of the line, or `None`
/// (no timestamp there, or a zone given by a name other than UTC/GMT:
/// [`leading_timestamp_in`] reads those).
pub fn leading_timestamp(s: &str) -> Option<(i64, &str)> {
    leading_timestamp_in(s, &ZoneNames::default())
}

/// [`leading_timestamp`], with the zone abbreviations of `zones` read too.
pub fn leading_timestamp_in<'a>(s: &'a str, zones: &ZoneNames) -> Option<(i64, &'a str)> {
    let b = s.as_bytes();
    if b.len() < 19 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())
            .flatten()
    };
    if b[4] != b'-' || b[7] != b'-' || b[10] != b' ' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut ms = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        let mut end = start;
        while end < b.len() && b[end].is_ascii_digit() {
            end += 1;
        }
        let frac = s.get(start..end)?;
        if frac.is_empty() {
            return None;
        }
        let digits: String = frac.chars().chain("000".chars()).take(3).collect();
        ms = digits.parse().ok()?;
        i = end;
    }
    if b.get(i) != Some(&b' ') {
        return None;
    }
    let rest = &s[i + 1..];
    let (zone, after) = rest.split_once(' ').unwrap_or((rest, ""));
    let offset_s: i64 = match zone {
        "UTC" | "GMT" | "Z" => 0,
        z if (z.starts_with('+') || z.starts_with('-')) && z.len() >= 3 => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let parts: Vec<&str> = z[1..].split(':').collect();
            let hh: i64 = parts.first()?.parse().ok()?;
            let mm: i64 = parts.get(1).map_or(Some(0), |p| p.parse().ok())?;
            sign * (hh * 3600 + mm * 60)
        }
        z => zones.offset(z)?,
    };
    let secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset_s;
    Some((secs * 1000 + ms, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(format_ms(1_796_131_110_089), "2026-12-01 13:18:30.089 UTC");
        assert_eq!(format_ms(500), "1970-01-01 00:00:00.500 UTC");
        let (t, rest) = leading_timestamp("2026-12-01 13:18:30.089 UTC [22976] LOG:  x").unwrap();
        assert_eq!(t, 1_796_131_110_089);
        assert_eq!(rest, "[22976] LOG:  x");
        assert_eq!(
            leading_timestamp("2026-12-01 13:18:30 GMT x").unwrap().0,
            1_796_131_110_000
        );
        assert_eq!(
            leading_timestamp("2026-12-01 16:18:30 +03 x").unwrap().0,
            1_796_131_110_000
        );
        assert_eq!(
            leading_timestamp("1970-01-01 00:00:00.5 UTC").unwrap().0,
            500
        );
        assert!(leading_timestamp("2026-12-01 13:18:30.089 CET x").is_none());
        // Named zones as the server's abbreviations give them.
        let zones = ZoneNames(vec![("CET".into(), 3600), ("CEST".into(), 7200)]);
        assert_eq!(
            leading_timestamp_in("2026-12-01 14:18:30.089 CET x", &zones).unwrap(),
            (1_796_131_110_089, "x")
        );
        assert_eq!(
            leading_timestamp_in("2026-07-01 15:00:00 CEST x", &zones)
                .unwrap()
                .0,
            leading_timestamp("2026-07-01 13:00:00 UTC").unwrap().0
        );
        assert!(leading_timestamp_in("2026-12-01 13:18:30 EST x", &zones).is_none());
        assert!(leading_timestamp("[22976] LOG:  x").is_none());
        assert!(leading_timestamp("2026-13-01 13:18:30 UTC").is_none());
    }
}
