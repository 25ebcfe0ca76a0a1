//! The config tree (`trainer`, `model`, `data`, `optimizer`, `lr_scheduler`) of a run, as `--print-config`, the defaults
//! overrides merge into, and `hparams.yaml` show it.

use serde::Serialize;
use serde_json::{Value, json};

use crate::flags::TrainerFlags;
use crate::optim::OptimizerSections;

/// The sections of a run's config (`optimizer` and `lr_scheduler` null where not chosen).
pub(crate) fn config_tree<M: Serialize, D: Serialize>(
    trainer: &TrainerFlags,
    model: &M,
    data: &D,
    optimizers: &OptimizerSections,
) -> Value {
    let mut tree = json!({
        "trainer": trainer.to_config(),
        "model": json_of(model),
        "data": json_of(data),
    });
    for (name, section) in optimizer_sections(optimizers) {
        tree[name] = section;
    }
    tree
}

/// The `optimizer` and `lr_scheduler` sections as the config shows them: each class with all
/// of its arguments, or null.
pub(crate) fn optimizer_sections(optimizers: &OptimizerSections) -> [(&'static str, Value); 2] {
    [
        ("optimizer", json_of(&optimizers.optimizer)),
        ("lr_scheduler", json_of(&optimizers.lr_scheduler)),
    ]
}

/// `value` as JSON with each float as its own type prints it: `serde_json::to_value` widens an
/// f32 to f64, so a 0.1 would show as 0.10000000149011612; through JSON text it stays 0.1.
fn json_of<T: Serialize>(value: &T) -> Value {
    serde_json::to_string(value)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_f32_keeps_its_short_form() {
        #[derive(Serialize)]
        struct Section {
            lr: f32,
            dropout: f64,
            widths: Vec<usize>,
        }
        let section = Section {
            lr: 0.1,
            dropout: 0.25,
            widths: vec![64, 32],
        };
        assert_eq!(
            json_of(&section),
            json!({"lr": 0.1, "dropout": 0.25, "widths": [64, 32]})
        );
        assert_eq!(
            serde_yaml::to_string(&json_of(&section.lr)).unwrap(),
            "0.1\n"
        );
    }
}
