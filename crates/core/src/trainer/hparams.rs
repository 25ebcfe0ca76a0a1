//! The run's hyperparameters, as `configure_optimizers` reads them (Lightning's `self.hparams`).

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A read-only view of the run's hyperparameters: the CLI's merged config (`trainer`,
/// `model`, `data` sections and the plan), or what `Trainer::with_hparams` was given.
#[derive(Debug, Clone, Copy)]
pub struct Hparams<'a>(&'a Value);

impl<'a> Hparams<'a> {
    /// A view of `value`.
    pub fn new(value: &'a Value) -> Self {
        Self(value)
    }

    /// Everything, as JSON.
    pub fn value(&self) -> &'a Value {
        self.0
    }

    /// The `model` section as the application's config type. Where there is no `model`
    /// section (a Trainer given no hyperparameters), `T` is read from an empty table, so a
    /// config with `#[serde(default)]` gets its defaults.
    pub fn model<T: DeserializeOwned>(&self) -> anyhow::Result<T> {
        self.section("model")
    }

    /// The section `name` (`model`, `data`, `trainer`) as `T`; an empty table where missing.
    pub fn section<T: DeserializeOwned>(&self, name: &str) -> anyhow::Result<T> {
        let empty = Value::Object(Default::default());
        let value = self.0.get(name).unwrap_or(&empty);
        T::deserialize(value).with_context(|| format!("reading the `{name}` hyperparameters"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(default)]
    struct Config {
        lr: f64,
    }

    impl Default for Config {
        fn default() -> Self {
            Self { lr: 0.5 }
        }
    }

    #[test]
    fn sections_are_typed_and_default_when_missing() {
        let value = json!({"model": {"lr": 0.01}});
        assert_eq!(
            Hparams::new(&value).model::<Config>().unwrap(),
            Config { lr: 0.01 }
        );
        let none = Value::Null;
        assert_eq!(Hparams::new(&none).model::<Config>().unwrap().lr, 0.5);
        let bad = json!({"model": {"lr": "fast"}});
        let err = Hparams::new(&bad).model::<Config>().unwrap_err();
        assert!(format!("{err:#}").contains("reading the `model` hyperparameters"));
    }
}
