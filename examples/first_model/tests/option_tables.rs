//! The option tables of docs/trainer.md (run options) and docs/cli.md (the plan's flags) list
//! exactly the `trainer` keys that `--print-config` prints: a flag added, renamed or removed in
//! the code fails here until the docs say so.

use std::collections::BTreeSet;
use std::process::Command;

/// The `trainer` section's keys, as `fit --print-config` prints them.
fn printed_keys() -> BTreeSet<String> {
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
    config["trainer"]
        .as_mapping()
        .expect("a trainer section")
        .keys()
        .filter_map(|key| key.as_str().map(str::to_owned))
        .collect()
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
