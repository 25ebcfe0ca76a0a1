//! Parsing, defaults and the docs table of the loop options.

use serde_json::json;

use super::*;

fn set(key: &str, value: Value) -> PlanResult<TrainerOptions> {
    let mut o = TrainerOptions::default();
    o.set(key, &value).map(|()| o)
}

#[test]
fn limits_are_counts_or_fractions() {
    assert_eq!(
        set("limit_train_batches", json!(5))
            .unwrap()
            .limit_train_batches,
        Limit::Batches(5)
    );
    assert_eq!(
        set("limit_train_batches", json!(0.25))
            .unwrap()
            .limit_train_batches,
        Limit::Fraction(0.25)
    );
    assert_eq!(
        set("limit_train_batches", json!("1.0"))
            .unwrap()
            .limit_train_batches,
        Limit::Fraction(1.0)
    );
    let e = set("limit_val_batches", json!(1.5)).unwrap_err();
    assert_eq!(e.flag, "--trainer.limit_val_batches");
    assert!(set("val_check_interval", json!(0)).is_err());
    assert_eq!(Limit::Fraction(0.01).of(20), 1);
    assert_eq!(Limit::Fraction(0.5).of(21), 10);
    assert_eq!(Limit::Batches(100).of(21), 21);
    assert_eq!(Limit::Fraction(0.0).of(21), 0);
}

#[test]
fn steps_and_sanity_accept_minus_one() {
    assert_eq!(set("max_steps", json!(-1)).unwrap().max_steps, None);
    assert_eq!(set("max_steps", json!(7)).unwrap().max_steps, Some(7));
    assert_eq!(set("max_steps", json!(0)).unwrap().max_steps, Some(0));
    assert!(set("max_steps", json!(-2)).is_err());
    assert_eq!(
        set("max_epochs", json!(-1)).unwrap().max_epochs,
        Some(u64::MAX)
    );
    assert_eq!(set("max_epochs", json!(0)).unwrap().max_epochs, Some(0));
    assert!(set("max_epochs", json!(-2)).is_err());
    assert_eq!(
        set("num_sanity_val_steps", json!(0))
            .unwrap()
            .num_sanity_val_steps,
        Some(0)
    );
    assert_eq!(
        set("num_sanity_val_steps", json!(-1))
            .unwrap()
            .num_sanity_val_steps,
        None
    );
    assert!(set("num_sanity_val_steps", json!(-2)).is_err());
}

#[test]
fn fast_dev_run_is_a_bool_or_a_count() {
    assert_eq!(set("fast_dev_run", json!(true)).unwrap().fast_dev_run, 1);
    assert_eq!(set("fast_dev_run", json!("false")).unwrap().fast_dev_run, 0);
    assert_eq!(set("fast_dev_run", json!(3)).unwrap().fast_dev_run, 3);
    assert!(set("fast_dev_run", json!("maybe")).is_err());
}

#[test]
fn loggers_and_callbacks_parse() {
    assert!(set("logger", json!(false)).unwrap().logger.is_empty());
    assert_eq!(
        set("logger", json!(["csv", "TensorBoard"])).unwrap().logger,
        vec!["csv", "tensorboard"]
    );
    // Another name is a registered logger's; ember-core checks it against the registry.
    assert_eq!(set("logger", json!("WandB")).unwrap().logger, vec!["wandb"]);
    assert!(set("logger", json!(3)).is_err());
    let o = set(
        "callbacks",
        json!(["LearningRateMonitor", {"class_path": "EarlyStopping", "init_args": {"monitor": "val_acc"}}]),
    )
    .unwrap();
    assert_eq!(o.callbacks.len(), 2);
    assert_eq!(o.callbacks[1].init_args["monitor"], "val_acc");
    let e = set(
        "callbacks",
        json!([{"class_path": "EarlyStopping", "args": {}}]),
    )
    .unwrap_err();
    assert!(e.message.contains("`args`"), "{e}");
}

#[test]
fn defaults_round_trip_through_config_values() {
    let defaults = TrainerOptions {
        max_epochs: Some(3),
        seed: Some(9),
        ..TrainerOptions::default()
    };
    let mut parsed = TrainerOptions::default();
    for (key, value) in defaults.to_value() {
        parsed.set(&key, &value).unwrap();
    }
    assert_eq!(parsed, defaults);
}

#[test]
fn epoch_limit_follows_lightning() {
    let mut o = TrainerOptions::default();
    assert_eq!(o.epoch_limit(), 1000);
    o.max_steps = Some(5);
    assert_eq!(o.epoch_limit(), u64::MAX);
    o.max_epochs = Some(2);
    assert_eq!(o.epoch_limit(), 2);
}

#[test]
fn the_docs_table_is_the_declared_one() {
    let docs = include_str!("../../../../docs/trainer.md");
    let table = TrainerOptions::markdown_table();
    assert!(
        docs.contains(&table),
        "docs/trainer.md's loop option table differs from the declarations; paste this:\n{table}"
    );
}

#[test]
fn help_lines_show_the_declared_defaults() {
    let line = |key: &str| help_lines().find(|(k, _)| *k == key).unwrap().1;
    assert!(line("max_steps").ends_with("[default: -1]"));
    assert!(line("limit_val_batches").ends_with("[default: 1.0]"));
    assert!(line("checkpoint_writes").ends_with("[default: async]"));
    assert!(line("max_epochs").ends_with("[default: the app's, else 1000]"));
}
