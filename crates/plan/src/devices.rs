//! The `--trainer.devices` flag and the device rules accelerators share.
//!
//! The flag arrives as a count, a list of ids, or a string (`"auto"`, `"3"`, `"1, 3"`,
//! `"[1,3]"`). [`DevicesFlag::from_value`] turns any of these into one of three shapes; the
//! rules below turn a shape plus the number of devices that exist into device ids. Each rule
//! returns a message saying what is allowed; the connector adds the flag and the value.

use std::fmt;

use serde_json::Value;

/// Most processes `devices=N` may ask for on a CPU: a guard against typos like `devices=1e9`.
pub const MAX_CPU_PROCESSES: i64 = 1024;

/// What the user asked for with `--trainer.devices`, before any accelerator rule applies.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DevicesFlag {
    /// `auto`: the accelerator's default (1 process on cpu, every device elsewhere).
    #[default]
    Auto,
    /// A bare number: a count of devices (`-1` means all).
    Count(i64),
    /// A list (or a string with a comma): explicit device ids.
    Ids(Vec<i64>),
}

impl DevicesFlag {
    /// Reads the flag from a config value: a number, a list of numbers, or a string.
    ///
    /// The error is a message for `--trainer.devices`.
    pub fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Number(n) => n
                .as_i64()
                .map(DevicesFlag::Count)
                .ok_or_else(not_an_integer),
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::Number(n) => n.as_i64().ok_or_else(not_an_integer),
                    Value::String(s) => parse_int(s),
                    _ => Err(not_an_integer()),
                })
                .collect::<Result<_, _>>()
                .map(DevicesFlag::Ids),
            Value::String(s) => Self::parse(s),
            _ => Err(ALLOWED_FORMS.to_owned()),
        }
    }

    /// Parses the string form: `auto`, a count, `[1,3]`, or a comma-separated list of ids.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(DevicesFlag::Auto);
        }
        let bracketed = t.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
        if let Some(inner) = bracketed {
            return split_ids(inner).map(DevicesFlag::Ids);
        }
        if t.contains(',') {
            return split_ids(t).map(DevicesFlag::Ids);
        }
        parse_int(t).map(DevicesFlag::Count)
    }
}

impl fmt::Display for DevicesFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DevicesFlag::Auto => f.write_str("auto"),
            DevicesFlag::Count(n) => write!(f, "{n}"),
            DevicesFlag::Ids(ids) => {
                let parts: Vec<String> = ids.iter().map(i64::to_string).collect();
                write!(f, "[{}]", parts.join(","))
            }
        }
    }
}

const ALLOWED_FORMS: &str = "expected `auto`, a number of devices, -1 for all, or a list of device ids such as [0,2] or \"0, 2\"";

fn not_an_integer() -> String {
    format!("not an integer; {ALLOWED_FORMS}")
}

fn parse_int(s: &str) -> Result<i64, String> {
    s.trim().parse::<i64>().map_err(|_| not_an_integer())
}

fn split_ids(s: &str) -> Result<Vec<i64>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(parse_int)
        .collect()
}

fn invalid_count() -> String {
    format!("not a valid number of devices; {ALLOWED_FORMS}")
}

/// CPU rule: `devices` is a number of processes, an integer > 0 (`auto` means 1).
pub fn cpu_devices(flag: &DevicesFlag) -> Result<Vec<usize>, String> {
    if flag.is_empty_request() {
        return Err(invalid_count());
    }
    match flag {
        DevicesFlag::Auto => Ok(vec![0]),
        DevicesFlag::Count(n) if (1..=MAX_CPU_PROCESSES).contains(n) => {
            Ok((0..*n as usize).collect())
        }
        _ => Err(format!(
            "on cpu, devices must be an integer > 0 (a number of processes, at most {MAX_CPU_PROCESSES}) or `auto`"
        )),
    }
}

/// GPU rule (cuda, wgpu and most custom accelerators), given how many devices exist.
///
/// A number is a count (`3` → `[0,1,2]`, `-1` → all); a list names ids, which must be unique
/// and exist.
pub fn gpu_devices(flag: &DevicesFlag, available: usize) -> Result<Vec<usize>, String> {
    if flag.is_empty_request() {
        return Err(invalid_count());
    }
    let all = || -> Result<Vec<usize>, String> {
        if available == 0 {
            Err("no devices of this accelerator exist".to_owned())
        } else {
            Ok((0..available).collect())
        }
    };
    match flag {
        DevicesFlag::Auto | DevicesFlag::Count(-1) => all(),
        DevicesFlag::Count(n) if *n > 0 => {
            if (*n as u64) <= available as u64 {
                Ok((0..*n as usize).collect())
            } else {
                Err(format!("asks for {n} devices but only {available} exist"))
            }
        }
        DevicesFlag::Count(_) => Err(format!(
            "a count must be an integer > 0 or -1 for all; {ALLOWED_FORMS}"
        )),
        DevicesFlag::Ids(ids) => {
            let mut seen = Vec::with_capacity(ids.len());
            for &id in ids {
                if id < 0 || id as u64 >= available as u64 {
                    return Err(format!(
                        "device id {id} does not exist; {available} devices exist (ids 0..={})",
                        available.saturating_sub(1)
                    ));
                }
                let id = id as usize;
                if seen.contains(&id) {
                    return Err(format!("device ids must be unique; {id} appears twice"));
                }
                seen.push(id);
            }
            Ok(seen)
        }
    }
}

/// TPU rule: `auto`, `1`, the full count, or a one-element list `[i]`.
pub fn tpu_devices(flag: &DevicesFlag, available: usize) -> Result<Vec<usize>, String> {
    if flag.is_empty_request() {
        return Err(invalid_count());
    }
    let forms = || {
        format!(
            "tpu devices must be `auto`, 1, {available} (all of them), or a one-element list [i] with i < {available}"
        )
    };
    if available == 0 {
        return Err("no devices of this accelerator exist".to_owned());
    }
    match flag {
        DevicesFlag::Auto => Ok((0..available).collect()),
        DevicesFlag::Count(1) => Ok(vec![0]),
        DevicesFlag::Count(n) if *n > 0 && *n as u64 == available as u64 => {
            Ok((0..available).collect())
        }
        DevicesFlag::Ids(ids)
            if ids.len() == 1 && ids[0] >= 0 && (ids[0] as u64) < available as u64 =>
        {
            Ok(vec![ids[0] as usize])
        }
        _ => Err(forms()),
    }
}

impl DevicesFlag {
    /// `0`, `"0"` and `[]`: a request for no devices at all.
    fn is_empty_request(&self) -> bool {
        matches!(self, DevicesFlag::Count(0))
            || matches!(self, DevicesFlag::Ids(ids) if ids.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_forms() {
        assert_eq!(DevicesFlag::parse("3"), Ok(DevicesFlag::Count(3)));
        assert_eq!(DevicesFlag::parse("1, 3"), Ok(DevicesFlag::Ids(vec![1, 3])));
        assert_eq!(
            DevicesFlag::parse("[1,3]"),
            Ok(DevicesFlag::Ids(vec![1, 3]))
        );
        assert_eq!(DevicesFlag::parse("[]"), Ok(DevicesFlag::Ids(vec![])));
        assert_eq!(DevicesFlag::parse("2,"), Ok(DevicesFlag::Ids(vec![2])));
        assert_eq!(DevicesFlag::parse("AUTO"), Ok(DevicesFlag::Auto));
        assert!(DevicesFlag::parse("two").is_err());
        assert!(DevicesFlag::parse("99999999999999999999999").is_err());
    }

    #[test]
    fn value_forms() {
        assert_eq!(
            DevicesFlag::from_value(&json!(2)),
            Ok(DevicesFlag::Count(2))
        );
        assert_eq!(
            DevicesFlag::from_value(&json!([0, 1])),
            Ok(DevicesFlag::Ids(vec![0, 1]))
        );
        assert!(DevicesFlag::from_value(&json!(1.5)).is_err());
        assert!(DevicesFlag::from_value(&json!(null)).is_err());
        assert!(DevicesFlag::from_value(&json!({"a": 1})).is_err());
    }

    #[test]
    fn huge_cpu_counts_are_refused_without_allocating() {
        assert!(cpu_devices(&DevicesFlag::Count(i64::MAX)).is_err());
        assert!(gpu_devices(&DevicesFlag::Count(i64::MAX), 4).is_err());
    }
}
