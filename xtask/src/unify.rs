//! Whether the rows of the test matrix resolve their dependencies alike (`cargo xtask lint`).
//!
//! Cargo resolves features over the packages a command selects. A row that selects fewer
//! packages can turn a dependency's features down (a vendored crate's dev-dependency, an
//! accelerator crate's cubecl backend), and then builds that dependency and everything above
//! it, burn included, a second time. This check runs `cargo tree` for each row and names every
//! dependency a row would build with other features than the cpu row does.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::matrix::{Row, matrix};
use crate::root;

/// Each dependency (`name vX.Y.Z`, workspace members left out) with the feature sets it is
/// built with (normal, build and dev edges: a crate built for build scripts too has two).
type Resolved = BTreeMap<String, BTreeSet<String>>;

fn resolved(row: &Row) -> Option<Resolved> {
    let mut args = vec!["tree", "--edges", "normal,build,dev", "--prefix", "none"];
    args.extend(["--format", "{p} [{f}]"]);
    args.extend(row.selection());
    let out = Command::new("cargo")
        .args(&args)
        .current_dir(root())
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "xtask: cargo {}:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let mut deps = Resolved::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim_end_matches(" (*)");
        let Some((package, features)) = line.split_once(" [") else {
            continue;
        };
        // A workspace member prints its path: `name vX (/path)`.
        if !package.contains('(') {
            deps.entry(package.to_owned())
                .or_default()
                .insert(features.into());
        }
    }
    Some(deps)
}

/// The dependencies `row` builds with other features than `cpu` (both build them).
fn differences(cpu: &Resolved, row: &Resolved) -> Vec<String> {
    row.iter()
        .filter_map(|(package, features)| {
            let theirs = cpu.get(package)?;
            (theirs != features).then(|| format!("{package}: {features:?} (cpu: {theirs:?})"))
        })
        .collect()
}

/// True when every backend row but tch builds each dependency it shares with the cpu row
/// with the cpu row's features. The tch row is left out: LibTorch's build script brings a
/// download client whose build-time crates share a few host-side dependencies.
pub(crate) fn rows_share_dependency_builds() -> bool {
    let rows = matrix();
    let Some(cpu) = resolved(&rows[0]) else {
        return false;
    };
    let mut agree = true;
    for row in rows.iter().skip(1).filter(|r| !r.builds_libtorch()) {
        let Some(deps) = resolved(row) else {
            return false;
        };
        for difference in differences(&cpu, &deps) {
            eprintln!("xtask: the {} row builds {difference}", row.backend);
            agree = false;
        }
    }
    agree
}
