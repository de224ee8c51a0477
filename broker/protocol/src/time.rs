//! Wall-clock time as RocketMQ uses it: milliseconds since the Unix epoch, and the UTC civil
//! date behind index-file names (`yyyyMMddHHmmssSSS`) and the month part of message ids.

/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

/// Current wall-clock time in ms since the Unix epoch (RocketMQ's timestamps); 0 if the clock
/// is before the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A UTC calendar date and time of day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CivilTime {
    /// Year (proleptic Gregorian).
    pub year: i64,
    /// Month, 1-12.
    pub month: u32,
    /// Day of month, 1-31.
    pub day: u32,
    /// Hour, 0-23.
    pub hour: u32,
    /// Minute, 0-59.
    pub minute: u32,
    /// Second, 0-59.
    pub second: u32,
    /// Millisecond, 0-999.
    pub millis: u32,
}

/// (year, month, day) of a day count since 1970-01-01, proleptic Gregorian calendar (Howard
/// Hinnant's civil-from-days algorithm).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl CivilTime {
    /// The UTC date and time of `ms` since the epoch.
    pub fn from_ms(ms: i64) -> Self {
        let days = ms.div_euclid(DAY_MS);
        let rem = ms.rem_euclid(DAY_MS);
        let (year, month, day) = civil_from_days(days);
        Self {
            year,
            month,
            day,
            hour: (rem / 3_600_000) as u32,
            minute: (rem / 60_000 % 60) as u32,
            second: (rem / 1000 % 60) as u32,
            millis: (rem % 1000) as u32,
        }
    }
}

/// Start (ms since the epoch, UTC) of the calendar month containing `ms`.
pub fn month_start_ms(ms: i64) -> i64 {
    let days = ms.div_euclid(DAY_MS);
    let (_, _, day) = civil_from_days(days);
    (days - (i64::from(day) - 1)) * DAY_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        // 2024-02-29 (leap day) is day 19782.
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        let t = CivilTime::from_ms(1_710_506_096_789);
        assert_eq!(
            t,
            CivilTime {
                year: 2024,
                month: 3,
                day: 15,
                hour: 12,
                minute: 34,
                second: 56,
                millis: 789
            }
        );
        assert_eq!(month_start_ms(1_710_506_096_789), 1_709_251_200_000);
    }
}
