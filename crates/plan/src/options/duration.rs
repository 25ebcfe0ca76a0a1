//! Wall-clock budgets (`--trainer.max_time`, the Timer callback's `duration`), in Lightning's
//! forms: `"DD:HH:MM:SS"` (days of any length, then two digits each for hours, minutes and
//! seconds) or a table of `days`, `hours`, `minutes` and `seconds`.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::values::Kind;

/// What a budget may be written as, for errors.
const ALLOWED: &str =
    "DD:HH:MM:SS (e.g. 00:12:00:00), or a table of days, hours, minutes and seconds (numbers >= 0)";

/// Reads a budget in either form.
pub fn parse_duration(value: &Value) -> Result<Duration, String> {
    match value {
        Value::String(text) => from_text(text.trim()).ok_or_else(|| ALLOWED.to_owned()),
        Value::Object(table) => from_table(table),
        _ => Err(ALLOWED.to_owned()),
    }
}

/// `DD:HH:MM:SS`, each field digits only, the last three exactly two.
fn from_text(text: &str) -> Option<Duration> {
    let fields: Vec<&str> = text.split(':').collect();
    let [days, rest @ ..] = fields.as_slice() else {
        return None;
    };
    let digits = |f: &str| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit());
    if rest.len() != 3 || !digits(days) || !rest.iter().all(|f| f.len() == 2 && digits(f)) {
        return None;
    }
    let days: u64 = days.parse().ok()?;
    let [h, m, s] = [rest[0], rest[1], rest[2]].map(|f| f.parse::<u64>().unwrap_or(0));
    let seconds = days
        .checked_mul(86_400)?
        .checked_add(h * 3600 + m * 60 + s)?;
    Some(Duration::from_secs(seconds))
}

/// A table of `days`, `hours`, `minutes`, `seconds` (each optional, a number >= 0).
fn from_table(table: &Map<String, Value>) -> Result<Duration, String> {
    let mut seconds = 0.0;
    for (key, value) in table {
        let unit = match key.as_str() {
            "days" => 86_400.0,
            "hours" => 3600.0,
            "minutes" => 60.0,
            "seconds" => 1.0,
            other => return Err(format!("{ALLOWED}; `{other}` is not one of those keys")),
        };
        match value.as_f64() {
            Some(n) if n >= 0.0 && n.is_finite() => seconds += n * unit,
            _ => return Err(ALLOWED.to_owned()),
        }
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| ALLOWED.to_owned())
}

/// A budget as a config value: `DD:HH:MM:SS` when it is whole seconds, else `{seconds: S}`.
pub fn write_duration(duration: &Duration) -> Value {
    match duration.subsec_nanos() {
        0 => json!(duration_text(*duration)),
        _ => json!({ "seconds": duration.as_secs_f64() }),
    }
}

/// `DD:HH:MM:SS` of the whole seconds of `duration`.
pub fn duration_text(duration: Duration) -> String {
    let s = duration.as_secs();
    let (days, hours, minutes, seconds) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    format!("{days:02}:{hours:02}:{minutes:02}:{seconds:02}")
}

/// `max_time`: a budget, or null for none.
pub struct MaxTime;

impl Kind for MaxTime {
    type Value = Option<Duration>;

    fn parse(value: &Value) -> Result<Option<Duration>, String> {
        match value {
            Value::Null => Ok(None),
            v => parse_duration(v)
                .map(Some)
                .map_err(|allowed| format!("{allowed}, or null")),
        }
    }

    fn write(value: &Option<Duration>) -> Value {
        value.as_ref().map_or(Value::Null, write_duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lightning_forms_read_as_lightning_reads_them() {
        let secs = |v: Value| parse_duration(&v).map(|d| d.as_secs_f64());
        assert_eq!(secs(json!("00:12:00:00")), Ok(12.0 * 3600.0));
        assert_eq!(secs(json!(" 1:00:00:05 ")), Ok(86_405.0));
        assert_eq!(secs(json!("123:00:01:00")), Ok(123.0 * 86_400.0 + 60.0));
        // Lightning's pattern allows two-digit fields past their clock range.
        assert_eq!(secs(json!("00:30:00:00")), Ok(30.0 * 3600.0));
        assert_eq!(secs(json!({"days": 1, "hours": 2})), Ok(93_600.0));
        assert_eq!(secs(json!({"seconds": 1.5})), Ok(1.5));
        assert_eq!(secs(json!({})), Ok(0.0));
        for bad in [
            json!("12:00:00"),
            json!("00:1:00:00"),
            json!("00:00:00:0a"),
            json!("-1:00:00:00"),
            json!("00:00:00:00:00"),
            json!(""),
            json!(60),
            json!({"weeks": 1}),
            json!({"hours": -1}),
            json!({"hours": "two"}),
        ] {
            assert!(parse_duration(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn max_time_writes_what_it_reads() {
        for v in [
            json!(null),
            json!("00:12:00:00"),
            json!("400:23:59:59"),
            json!({"seconds": 0.25}),
        ] {
            let parsed = MaxTime::parse(&v).unwrap();
            assert_eq!(MaxTime::write(&parsed), v);
        }
        let error = MaxTime::parse(&json!("soon")).unwrap_err();
        assert!(
            error.contains("DD:HH:MM:SS") && error.ends_with("or null"),
            "{error}"
        );
    }
}
