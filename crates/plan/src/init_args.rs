//! Arguments of plugins chosen by name: `--trainer.strategy='{class_path: local_sgd, init_args:
//! {every: 8}}'`, the same table in a config file, and the same for `--trainer.precision` and
//! each entry of `--trainer.plugins`, as callbacks take theirs.
//!
//! The flags keep the name where a name was given and the arguments beside it ([`InitArgs`]);
//! the connector hands each to the plugin the plan runs ([`Plan::init_args`]) and, at plan time,
//! checks them against what the plugin declared ([`ArgsCheck`]): arguments for a plugin that
//! takes none, or arguments its type refuses, are errors of the flag that gave them.
//!
//! [`Plan::init_args`]: crate::Plan::init_args

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::error::{FlagError, PlanResult, render};

/// The flags that choose plugins by name, and so take `{class_path, init_args}` tables.
pub const CHOOSING: [&str; 4] = ["strategy", "precision", "cluster_environment", "plugins"];

/// The `init_args` given with plugins chosen by name, by the name given (lowercase); plugins
/// given without arguments have no entry.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InitArgs(BTreeMap<String, Value>);

impl InitArgs {
    /// The arguments given for `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(&key(name))
    }

    /// Every plugin name given with arguments, and its arguments.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Nothing of its own in the config's `trainer` section: the arguments are written inside
    /// the keys that name their plugins ([`with_tables`](Self::with_tables)).
    pub fn to_value(&self) -> Map<String, Value> {
        Map::new()
    }

    /// Takes the name out of a `{class_path, init_args}` table given for `flag`, keeping the
    /// arguments; a name (or anything else) comes back as it was.
    fn take(&mut self, flag: &str, value: &Value) -> PlanResult<Value> {
        let Value::Object(table) = value else {
            return Ok(value.clone());
        };
        let refused = |why: &str| FlagError::new(format!("--trainer.{flag}"), render(value), why);
        for field in table.keys() {
            if field != "class_path" && field != "init_args" {
                return Err(refused(&format!(
                    "a name or a {{class_path, init_args}} table (not a `{field}` field)"
                )));
            }
        }
        let Some(Value::String(name)) = table.get("class_path") else {
            return Err(refused(
                "a {class_path: NAME, init_args: {...}} table with a name",
            ));
        };
        match table.get("init_args") {
            None | Some(Value::Null) => {}
            Some(Value::Object(args)) if args.is_empty() => {}
            Some(args @ Value::Object(_)) => {
                self.0.insert(key(name), args.clone());
            }
            Some(_) => return Err(refused("init_args must be a table of arguments")),
        }
        Ok(Value::String(name.trim().to_owned()))
    }

    /// `value` of a flag that chooses plugins, with every `{class_path, init_args}` table
    /// replaced by its name and the arguments kept here.
    pub(crate) fn take_all(&mut self, flag: &str, value: &Value) -> PlanResult<Value> {
        match value {
            Value::Array(items) if flag == "plugins" => {
                let names = items.iter().map(|item| self.take(flag, item));
                Ok(Value::Array(names.collect::<PlanResult<_>>()?))
            }
            other => self.take(flag, other),
        }
    }

    /// The `trainer` section `section` with each plugin that has arguments written back as its
    /// `{class_path, init_args}` table (what `--print-config` prints, and reads back).
    pub fn with_tables(&self, mut section: Map<String, Value>) -> Map<String, Value> {
        let table = |name: &Value| match name.as_str().and_then(|n| self.get(n)) {
            Some(args) => json!({ "class_path": name, "init_args": args }),
            None => name.clone(),
        };
        for flag in CHOOSING {
            let written = match section.get(flag) {
                Some(Value::Array(names)) => Value::Array(names.iter().map(table).collect()),
                Some(name) => table(name),
                None => continue,
            };
            section.insert(flag.to_owned(), written);
        }
        section
    }
}

/// A plugin name as names are compared: trimmed, lowercase.
fn key(name: &str) -> String {
    name.trim().to_ascii_lowercase()
}

/// What a plugin declared about its `init_args` when it was registered: a check that they
/// deserialize into its arguments' type (`with_args::<T>()` on its info). A plugin without one
/// takes none.
#[derive(Clone, Copy)]
pub struct ArgsCheck(fn(&Value) -> Result<(), String>);

impl ArgsCheck {
    /// Arguments read as `T` (a serde type: `#[serde(deny_unknown_fields)]` refuses a
    /// misspelt one, a field without `#[serde(default)]` is required).
    pub fn of<T: DeserializeOwned>() -> Self {
        Self(|args| {
            serde_json::from_value::<T>(args.clone())
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }

    /// Checks `args`; the error is serde's, naming the argument.
    pub fn check(&self, args: &Value) -> Result<(), String> {
        (self.0)(args)
    }
}

/// Two checks are equal when they check the same type.
impl PartialEq for ArgsCheck {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::fn_addr_eq(self.0, other.0)
    }
}

impl Eq for ArgsCheck {}

impl fmt::Debug for ArgsCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ArgsCheck")
    }
}

/// The arguments `plan_args` holds for `name` (a plugin the plan runs), as `T`: what a plugin's
/// factory reads. No arguments read as an empty table, so a `T` whose fields all have defaults
/// comes back as its default.
pub fn read<T: DeserializeOwned>(
    plan_args: &BTreeMap<String, Value>,
    name: &str,
) -> anyhow::Result<T> {
    let args = plan_args
        .get(&key(name))
        .cloned()
        .unwrap_or_else(|| json!({}));
    serde_json::from_value(args).map_err(|e| anyhow::anyhow!("bad init_args for {name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_give_their_names_and_keep_their_arguments() {
        let mut args = InitArgs::default();
        let table = json!({"class_path": "Local_SGD", "init_args": {"every": 8}});
        assert_eq!(
            args.take_all("strategy", &table).unwrap(),
            json!("Local_SGD")
        );
        assert_eq!(args.get("local_sgd"), Some(&json!({"every": 8})));
        let plugins = json!(["mirror", {"class_path": "gzip", "init_args": {"level": 9}}, {"class_path": "plain"}]);
        assert_eq!(
            args.take_all("plugins", &plugins).unwrap(),
            json!(["mirror", "gzip", "plain"])
        );
        assert_eq!(args.get("gzip"), Some(&json!({"level": 9})));
        assert_eq!(args.get("plain"), None, "no arguments, no entry");
        let mut section = Map::new();
        section.insert("strategy".into(), json!("local_sgd"));
        section.insert("plugins".into(), json!(["mirror", "gzip"]));
        let written = args.with_tables(section);
        assert_eq!(
            written["strategy"],
            json!({"class_path": "local_sgd", "init_args": {"every": 8}})
        );
        assert_eq!(
            written["plugins"],
            json!(["mirror", {"class_path": "gzip", "init_args": {"level": 9}}])
        );
    }

    #[test]
    fn malformed_tables_name_the_flag() {
        let mut args = InitArgs::default();
        for bad in [
            json!({"class_path": "x", "args": {}}),
            json!({"init_args": {"a": 1}}),
            json!({"class_path": "x", "init_args": [1]}),
        ] {
            let e = args.take_all("strategy", &bad).unwrap_err();
            assert_eq!(e.flag, "--trainer.strategy", "{e}");
        }
    }

    #[test]
    fn a_declared_type_checks_and_reads_the_arguments() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        #[serde(deny_unknown_fields)]
        struct Every {
            #[serde(default)]
            every: u64,
        }
        let check = ArgsCheck::of::<Every>();
        assert!(check.check(&json!({"every": 3})).is_ok());
        let e = check.check(&json!({"evry": 3})).unwrap_err();
        assert!(e.contains("evry") && e.contains("every"), "{e}");
        let plan_args = BTreeMap::from([("local_sgd".to_owned(), json!({"every": 3}))]);
        assert_eq!(
            read::<Every>(&plan_args, "local_sgd").unwrap(),
            Every { every: 3 }
        );
        assert_eq!(
            read::<Every>(&plan_args, "other").unwrap(),
            Every { every: 0 }
        );
    }
}
