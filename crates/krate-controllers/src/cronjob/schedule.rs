//! Cron schedules as upstream reads them (robfig/cron's standard parser): five fields
//! (minute hour day-of-month month day-of-week) with lists, ranges, steps and names, or
//! a descriptor (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly,
//! @every <duration>). Next times are found in the CronJob's time zone by robfig's
//! walk: field by field in wall-clock time, so a time skipped by a DST gap is skipped
//! and one repeated by a DST fold runs in both.

use std::time::Duration;

use k8s_openapi::jiff::civil::date;
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{Span, Timestamp, Zoned};

#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    Cron(Fields),
    Every(Duration),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Fields {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    /// Day-of-month or day-of-week was "*" or "?": then both must match, else either.
    dom_star: bool,
    dow_star: bool,
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Schedule {
    pub fn parse(spec: &str) -> Result<Schedule, String> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err("empty spec string".into());
        }
        if let Some(descriptor) = spec.strip_prefix('@') {
            let fields = match descriptor {
                "yearly" | "annually" => "0 0 1 1 *",
                "monthly" => "0 0 1 * *",
                "weekly" => "0 0 * * 0",
                "daily" | "midnight" => "0 0 * * *",
                "hourly" => "0 * * * *",
                _ => {
                    if let Some(every) = descriptor.strip_prefix("every ") {
                        let d = parse_go_duration(every.trim())
                            .ok_or_else(|| format!("failed to parse duration {spec}"))?;
                        return Ok(Schedule::Every(d.max(Duration::from_secs(1))));
                    }
                    return Err(format!("unrecognized descriptor: {spec}"));
                }
            };
            return Schedule::parse(fields);
        }
        let parts: Vec<&str> = spec.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(format!("expected exactly 5 fields, found {}: {spec}", parts.len()));
        }
        let star = |f: &str| f == "*" || f == "?";
        Ok(Schedule::Cron(Fields {
            minute: field(parts[0], 0, 59, &[])?,
            hour: field(parts[1], 0, 23, &[])?,
            dom: field(parts[2], 1, 31, &[])?,
            month: field(parts[3], 1, 12, &MONTHS)?,
            dow: field(parts[4], 0, 6, &DAYS)?,
            dom_star: star(parts[2]),
            dow_star: star(parts[4]),
        }))
    }

    /// The first time strictly after `after`, or None if there is none within five years.
    pub fn next(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let whole = Timestamp::from_second(after.as_second() + 1).ok()?;
        match self {
            Schedule::Every(d) => Timestamp::from_second(after.as_second() + d.as_secs() as i64).ok(),
            Schedule::Cron(f) => f.next(whole.to_zoned(tz.clone())),
        }
    }
}

fn bit(set: u64, n: i64) -> bool {
    (0..64).contains(&n) && set & (1 << n) != 0
}

impl Fields {
    fn day_matches(&self, t: &Zoned) -> bool {
        let dom = bit(self.dom, t.day() as i64);
        let dow = bit(self.dow, t.weekday().to_sunday_zero_offset() as i64);
        if self.dom_star || self.dow_star { dom && dow } else { dom || dow }
    }

    fn next(&self, start: Zoned) -> Option<Timestamp> {
        let tz = start.time_zone().clone();
        let at = |y: i16, mo: i8, d: i8, h: i8| date(y, mo, d).at(h, 0, 0, 0).to_zoned(tz.clone()).ok();
        let mut t = start;
        let limit = t.year() + 5;
        let mut added = false;
        'wrap: loop {
            if t.year() > limit {
                return None;
            }
            while !bit(self.month, t.month() as i64) {
                if !added {
                    added = true;
                    t = at(t.year(), t.month(), 1, 0)?;
                }
                t = t.checked_add(Span::new().months(1)).ok()?;
                if t.month() == 1 {
                    continue 'wrap;
                }
            }
            while !self.day_matches(&t) {
                if !added {
                    added = true;
                    t = at(t.year(), t.month(), t.day(), 0)?;
                }
                t = t.checked_add(Span::new().days(1)).ok()?;
                // A DST change can move midnight: back to it.
                let h = t.hour() as i64;
                if h != 0 {
                    let shift = if h > 12 { 24 - h } else { -h };
                    t = t.checked_add(Span::new().hours(shift)).ok()?;
                }
                if t.day() == 1 {
                    continue 'wrap;
                }
            }
            while !bit(self.hour, t.hour() as i64) {
                if !added {
                    added = true;
                    t = at(t.year(), t.month(), t.day(), t.hour())?;
                }
                t = t.checked_add(Span::new().hours(1)).ok()?;
                if t.hour() == 0 {
                    continue 'wrap;
                }
            }
            while !bit(self.minute, t.minute() as i64) {
                if !added {
                    added = true;
                    let s = t.timestamp().as_second();
                    t = Timestamp::from_second(s - s.rem_euclid(60)).ok()?.to_zoned(tz.clone());
                }
                t = t.checked_add(Span::new().minutes(1)).ok()?;
                if t.minute() == 0 {
                    continue 'wrap;
                }
            }
            while t.second() != 0 {
                if !added {
                    added = true;
                }
                t = t.checked_add(Span::new().seconds(1)).ok()?;
                if t.second() == 0 {
                    continue 'wrap;
                }
            }
            return Some(t.timestamp());
        }
    }
}

/// One field: comma-separated ranges `*`, `?`, `N`, `N-M`, each with an optional `/step`.
fn field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, Some(number(s, &[], 0)?)),
            None => (part, None),
        };
        let (start, end) = if range == "*" || range == "?" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (number(a, names, min)?, number(b, names, min)?)
        } else {
            let n = number(range, names, min)?;
            // "N/step" means "N-max/step".
            (n, if step.is_some() { max } else { n })
        };
        if start < min {
            return Err(format!("beginning of range ({start}) below minimum ({min}): {part}"));
        }
        if end > max {
            return Err(format!("end of range ({end}) above maximum ({max}): {part}"));
        }
        if start > end {
            return Err(format!("beginning of range ({start}) beyond end of range ({end}): {part}"));
        }
        let step = step.unwrap_or(1);
        if step == 0 {
            return Err(format!("step of range should be a positive number: {part}"));
        }
        bits |= (start..=end).step_by(step as usize).fold(0u64, |b, i| b | 1 << i);
    }
    Ok(bits)
}

fn number(text: &str, names: &[&str], base: u32) -> Result<u32, String> {
    if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
        return Ok(i as u32 + base);
    }
    text.parse::<u32>().map_err(|_| format!("failed to parse int from {text}"))
}

/// Go's time.ParseDuration (krate-api's), whole seconds as robfig/cron's @every keeps.
fn parse_go_duration(s: &str) -> Option<Duration> {
    let nanos = krate_api::protobuf::transcode::parse_go_duration(s).ok()?;
    let nanos = u64::try_from(nanos).ok()?;
    Some(Duration::from_secs(Duration::from_nanos(nanos).as_secs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next_in(spec: &str, tz: &str, after: &str) -> String {
        let tz = TimeZone::get(tz).unwrap();
        let t = Schedule::parse(spec).unwrap().next(after.parse().unwrap(), &tz).unwrap();
        t.to_zoned(tz).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
    }

    #[test]
    fn fields_descriptors_and_names() {
        assert_eq!(next_in("*/15 * * * *", "UTC", "2026-03-01T10:07:00Z"), "2026-03-01T10:15:00+00:00");
        assert_eq!(next_in("@hourly", "UTC", "2026-03-01T10:00:00Z"), "2026-03-01T11:00:00+00:00");
        assert_eq!(next_in("@weekly", "UTC", "2026-03-04T10:00:00Z"), "2026-03-08T00:00:00+00:00");
        assert_eq!(next_in("0 9 * jan-mar mon-fri", "UTC", "2026-03-31T10:00:00Z"), "2027-01-01T09:00:00+00:00");
        // Day of month and day of week both restricted: either matches.
        assert_eq!(next_in("0 0 13 * 5", "UTC", "2026-03-01T00:00:00Z"), "2026-03-06T00:00:00+00:00");
        assert_eq!(next_in("@every 90s", "UTC", "2026-03-01T00:00:00Z"), "2026-03-01T00:01:30+00:00");
        assert!(Schedule::parse("61 * * * *").is_err());
        assert!(Schedule::parse("* * *").is_err());
        assert!(Schedule::parse("@fortnightly").is_err());
        assert!(
            Schedule::parse("0 0 30 2 *")
                .unwrap()
                .next("2026-01-01T00:00:00Z".parse().unwrap(), &TimeZone::UTC)
                .is_none()
        );
    }

    #[test]
    fn time_zones_and_daylight_saving() {
        // 09:00 in New York is 14:00 UTC in winter and 13:00 UTC in summer.
        assert_eq!(next_in("0 9 * * *", "America/New_York", "2026-03-07T15:00:00Z"), "2026-03-08T09:00:00-04:00");
        // 02:30 does not exist on 8 March 2026 in New York: skipped that day.
        assert_eq!(next_in("30 2 * * *", "America/New_York", "2026-03-08T05:00:00Z"), "2026-03-09T02:30:00-04:00");
        // 01:30 happens twice on 1 November 2026: both run.
        let first = next_in("30 1 * * *", "America/New_York", "2026-11-01T04:00:00Z");
        assert_eq!(first, "2026-11-01T01:30:00-04:00");
        assert_eq!(next_in("30 1 * * *", "America/New_York", "2026-11-01T05:30:00Z"), "2026-11-01T01:30:00-05:00");
        // Daily at midnight keeps to midnight across the change.
        assert_eq!(next_in("0 0 * * *", "Europe/Paris", "2026-03-28T23:30:00Z"), "2026-03-30T00:00:00+02:00");
    }
}
