//! The option tables of docs/trainer.md (run options) and docs/cli.md (the plan's flags) list
//! exactly the `trainer` keys that `--print-config` prints, with the defaults it prints: a flag
//! added, renamed or removed, or a default changed, in the code fails here until the docs say
//! so.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The `trainer` section's keys and values, as `fit --print-config` prints them (a value in
/// YAML's flow form: `auto`, `1.0`, `[csv]`).
fn printed() -> BTreeMap<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_first_model"))
        .args(["fit", "--print-config"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).unwrap();
    let flow = |value: &serde_yaml::Value| match value {
        serde_yaml::Value::Sequence(items) => {
            let items: Vec<String> = items.iter().map(scalar).collect();
            format!("[{}]", items.join(", "))
        }
        value => scalar(value),
    };
    let trainer = config["trainer"].as_mapping().expect("a trainer section");
    (trainer.iter())
        .filter_map(|(key, value)| Some((key.as_str()?.to_owned(), flow(value))))
        .collect()
}

fn scalar(value: &serde_yaml::Value) -> String {
    serde_yaml::to_string(value).unwrap().trim().to_owned()
}

fn printed_keys() -> BTreeSet<String> {
    printed().into_keys().collect()
}

/// The first cells of a doc's table rows that name an option: `| \`key\` |` in trainer.md,
/// `| \`--trainer.key\` |` in cli.md.
fn table_keys(doc: &str, prefix: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|line| line.strip_prefix(&format!("| `{prefix}")))
        .filter_map(|rest| rest.split_once("` |"))
        .map(|(key, _)| key.to_owned())
        .filter(|key| key.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect()
}

#[test]
fn the_docs_option_tables_list_every_trainer_key() {
    let run_options = table_keys(include_str!("../../../docs/trainer.md"), "");
    let plan_flags = table_keys(include_str!("../../../docs/cli.md"), "--trainer.");
    let documented: BTreeSet<String> = run_options.union(&plan_flags).cloned().collect();
    let printed = printed_keys();
    assert!(printed.len() > 30, "{printed:?}");
    let undocumented: Vec<_> = printed.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/trainer.md or docs/cli.md: {undocumented:?}"
    );
    let stale: Vec<_> = plan_flags.difference(&printed).collect();
    assert!(
        stale.is_empty(),
        "docs/cli.md lists flags the CLI lacks: {stale:?}"
    );
}

/// A table row's default cell as a value: its first word without backticks (`null`: on for
/// cpu … → `null`), or `None` where the cell describes it (the app's, the working directory).
fn stated_default(cell: &str) -> Option<String> {
    let cell = cell.trim();
    if cell.starts_with("the ") {
        return None;
    }
    let value = cell.split([':', ' ']).next()?.trim_matches('`');
    Some(value.to_owned())
}

/// Each row's key and default cell (the last) of a doc's option table.
fn table_defaults(doc: &str, prefix: &str) -> BTreeMap<String, String> {
    doc.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&format!("| `{prefix}"))?;
            let (key, _) = rest.split_once("` |")?;
            let cells: Vec<&str> = line.trim_end_matches('|').split(" | ").collect();
            Some((key.to_owned(), cells.last()?.to_string()))
        })
        .collect()
}

#[test]
fn the_docs_option_tables_state_the_defaults_print_config_prints() {
    let printed = printed();
    let rows = [
        table_defaults(include_str!("../../../docs/trainer.md"), ""),
        table_defaults(include_str!("../../../docs/cli.md"), "--trainer."),
    ];
    let mut checked = 0;
    let mut differ = Vec::new();
    for (key, cell) in rows.iter().flatten() {
        let (Some(stated), Some(value)) = (stated_default(cell), printed.get(key)) else {
            continue;
        };
        if &stated != value {
            differ.push(format!(
                "{key}: the docs say `{}`, --print-config `{value}`",
                cell.trim()
            ));
        }
        checked += 1;
    }
    assert!(differ.is_empty(), "{differ:#?}");
    assert!(checked > 30, "{checked} defaults checked");
}
