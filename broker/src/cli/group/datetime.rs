//! `--to-datetime`: epoch milliseconds or an ISO-8601 date and time, to
//! epoch milliseconds.

use anyhow::Context;

/// Parses `--to-datetime`: epoch milliseconds or ISO-8601
/// `YYYY-MM-DDTHH:MM:SS[.mmm]` with an optional zone (`Z`, `±HH:MM`,
/// `±HHMM`, `±HH`; none: UTC).
pub fn parse_datetime(text: &str) -> anyhow::Result<i64> {
    let text = text.trim();
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
        return text.parse().context("timestamp out of range");
    }
    let bad = || {
        anyhow::anyhow!(
            "expected milliseconds or YYYY-MM-DDTHH:MM:SS[.mmm][Z|±HH:MM], got {text:?}"
        )
    };
    let (date, time) = text.split_once('T').ok_or_else(bad)?;
    // The zone: Z, ±HH:MM, ±HHMM or ±HH (none: UTC); minutes east of UTC.
    let (time, zone_minutes) = if let Some(time) = time.strip_suffix('Z') {
        (time, 0)
    } else if let Some(at) = time.find(['+', '-']) {
        let (time, zone) = time.split_at(at);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let digits: String = zone[1..].chars().filter(|c| *c != ':').collect();
        if !matches!(digits.len(), 2 | 4) || !digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        let hours: i64 = digits[..2].parse().map_err(|_| bad())?;
        let minutes: i64 = digits[2..].parse().unwrap_or(0);
        if hours > 18 || minutes > 59 {
            return Err(bad());
        }
        (time, sign * (hours * 60 + minutes))
    } else {
        (time, 0)
    };
    let date: Vec<&str> = date.split('-').collect();
    let (time, millis) = match time.split_once('.') {
        Some((time, fraction)) => {
            if fraction.is_empty()
                || fraction.len() > 3
                || !fraction.chars().all(|c| c.is_ascii_digit())
            {
                return Err(bad());
            }
            let padded = format!("{fraction:0<3}");
            (time, padded.parse::<i64>().map_err(|_| bad())?)
        }
        None => (time, 0),
    };
    let time: Vec<&str> = time.split(':').collect();
    if date.len() != 3 || time.len() != 3 {
        return Err(bad());
    }
    let number = |s: &str| s.parse::<i64>().map_err(|_| bad());
    let (year, month, day) = (number(date[0])?, number(date[1])?, number(date[2])?);
    let (hour, minute, second) = (number(time[0])?, number(time[1])?, number(time[2])?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    // Days from the civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(((days * 24 + hour) * 60 + minute - zone_minutes) * 60_000 + second * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_parse_as_utc() {
        assert_eq!(parse_datetime("0").unwrap(), 0);
        assert_eq!(parse_datetime("1700000000000").unwrap(), 1_700_000_000_000);
        assert_eq!(parse_datetime("1970-01-01T00:00:00").unwrap(), 0);
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20Z").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20.5").unwrap(),
            1_700_000_000_500
        );
        assert_eq!(
            parse_datetime("2000-03-01T00:00:00.123").unwrap(),
            951_868_800_123
        );
        assert_eq!(
            parse_datetime("2023-11-15T00:13:20+02:00").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2023-11-14T17:13:20.000-0500").unwrap(),
            1_700_000_000_000
        );
        for bad in [
            "",
            "yesterday",
            "2023-13-01T00:00:00",
            "2023-11-14 22:13:20",
            "2023-11-14T22:13:20.1234",
            "2023-11-14T22:13:20+2",
            "2023-11-14T22:13:20+02:xx",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
    }
}
