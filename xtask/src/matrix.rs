//! The test matrix: one `cargo test` a backend (`cargo xtask test [--row NAME]`).

use std::time::Instant;

use crate::leftovers::Watch;
use crate::{VENDORED, run_in, torch_env};

/// The workspace packages whose tests do not change with a backend row's features: the cpu row
/// runs them; a backend row would build and run them again unchanged (they see the backend
/// only as one more registered accelerator, and run on cpu).
const FEATURE_INDEPENDENT: [&str; 12] = [
    "ember-plan",
    "ember-core",
    "ember-derive",
    "ember-mpi",
    "first_model",
    "gan",
    "transformer",
    "custom_accelerator",
    "custom_plugins",
    "convnet",
    "images",
    "xtask",
];

/// One row of the backend matrix: a name, the features its `cargo test` runs with, and the
/// feature-independent packages it tests anyway (conv has an xla feature of its own).
///
/// Every row names the whole workspace (`--workspace`, leaving packages out with `--exclude`)
/// and keeps every accelerator crate, so that dependencies resolve to the same features in
/// each row and burn is built once, not once per row (`cargo xtask lint` checks it; see
/// [`crate::unify`]): selecting packages with `-p` instead, or leaving the other accelerator
/// crates out, turns cubecl's and burn's features down and rebuilt them (measured: 4 m 26 s
/// for the cuda row's packages). The cpu row tests everything but ember-accel-tch, whose build
/// needs the torch venv; a backend row tests ember, the acceptance suite, digits and the
/// accelerator crates (the tests that change with its features; the accelerator crates' are
/// the cpu row's builds again, a few seconds).
pub(crate) struct Row {
    pub(crate) backend: &'static str,
    what: &'static str,
    features: Option<&'static str>,
    keeps: &'static [&'static str],
    pub(crate) envs: Vec<(&'static str, &'static str)>,
}

impl Row {
    /// Whether the row builds LibTorch (the tch row; its build needs the torch venv).
    pub(crate) fn builds_libtorch(&self) -> bool {
        self.backend == "tch"
    }

    /// The variables the row's cargo needs beyond its own: LibTorch's for the tch row.
    pub(crate) fn more_env(&self) -> Vec<(String, String)> {
        match self.builds_libtorch() {
            true => torch_env(),
            false => Vec::new(),
        }
    }

    /// [`more_env`](Self::more_env) and the variables of `watch`, which sees what the row
    /// leaves behind.
    pub(crate) fn watched_env(&self, watch: &Watch) -> Vec<(String, String)> {
        let mut env = self.more_env();
        env.extend(watch.env());
        env
    }

    /// The packages the row leaves out of the workspace.
    fn left_out(&self) -> Vec<&'static str> {
        // Its build needs the torch venv, which only the tch row sets up.
        let tch = (!self.builds_libtorch()).then_some("ember-accel-tch");
        if self.backend == "cpu" {
            return tch.into_iter().collect();
        }
        // The vendored crates' own suites do not depend on the row's features either.
        let independent = (FEATURE_INDEPENDENT.iter()).filter(|p| !self.keeps.contains(p));
        VENDORED
            .into_iter()
            .chain(independent.copied())
            .chain(tch)
            .collect()
    }

    /// The row's package selection and features, as `cargo test` and `cargo tree` take them.
    pub(crate) fn selection(&self) -> Vec<&'static str> {
        let mut args = vec!["--workspace"];
        for package in self.left_out() {
            args.extend(["--exclude", package]);
        }
        if let Some(features) = self.features {
            args.extend(["--features", features]);
        }
        args
    }

    /// The row's `cargo` arguments.
    pub(crate) fn args(&self) -> Vec<&'static str> {
        let mut args = vec!["test", "--no-fail-fast"];
        args.extend(self.selection());
        args
    }
}

pub(crate) fn matrix() -> Vec<Row> {
    vec![
        Row {
            backend: "cpu",
            what: "build + all tests",
            features: None,
            keeps: &[],
            envs: vec![],
        },
        Row {
            backend: "cuda",
            what: "build + unit, acceptance and digits tests (no GPU needed)",
            features: Some("ember-acceptance/cuda,digits/cuda"),
            keeps: &[],
            envs: vec![],
        },
        Row {
            backend: "wgpu",
            what: "build + unit, acceptance and digits tests (lavapipe when no GPU)",
            features: Some("ember-acceptance/wgpu,digits/wgpu"),
            keeps: &[],
            envs: vec![("EMBER_WGPU_SOFTWARE", "1")],
        },
        Row {
            backend: "xla",
            what: "build + unit, acceptance, digits and conv tests on XLA's CPU plugin",
            features: Some("ember-acceptance/tpu-xla,digits/tpu-xla,convnet/tpu-xla"),
            keeps: &["convnet"],
            envs: vec![],
        },
        Row {
            backend: "tch",
            what: "build + unit, acceptance and digits tests on LibTorch's CPU",
            features: Some("ember-acceptance/tch,digits/tch"),
            keeps: &[],
            envs: vec![],
        },
    ]
}

/// The rows `--row NAME` picks from `args` (every row without it); `None` for a name that is
/// not a row, or a `--row` without one (the message says which rows there are).
pub(crate) fn selected_rows(args: &[&str]) -> Option<Vec<Row>> {
    let rows = matrix();
    let Some(at) = args.iter().position(|a| *a == "--row") else {
        return Some(rows);
    };
    let names: Vec<&str> = rows.iter().map(|r| r.backend).collect();
    let wanted = args.get(at + 1).copied().unwrap_or("");
    let picked: Vec<Row> = rows.into_iter().filter(|r| r.backend == wanted).collect();
    if picked.is_empty() {
        eprintln!(
            "xtask: invalid --row value `{wanted}`: expected one of {}",
            names.join(", ")
        );
        return None;
    }
    Some(picked)
}

pub(crate) fn test_matrix(rows: Vec<Row>) -> bool {
    let mut results = Vec::new();
    for row in rows {
        let start = Instant::now();
        let watch = Watch::start(row.backend);
        let ok = run_in("cargo", &row.args(), &row.envs, &row.watched_env(&watch));
        let clean = watch.finish();
        results.push((
            row.backend,
            row.what,
            ok && clean,
            start.elapsed().as_secs(),
        ));
    }
    println!(
        "\n{:<8} {:<58} {:<6} {:>6}",
        "backend", "what", "result", "secs"
    );
    for (backend, what, ok, secs) in &results {
        println!(
            "{backend:<8} {what:<58} {:<6} {secs:>6}",
            if *ok { "pass" } else { "FAIL" }
        );
    }
    let passed = results.iter().filter(|r| r.2).count();
    println!(
        "test-matrix: {passed} passed, {} failed",
        results.len() - passed
    );
    passed == results.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::root;

    const ACCELERATORS_EVERY_ROW_KEEPS: [&str; 4] = [
        "ember-accel-cpu",
        "ember-accel-cuda",
        "ember-accel-wgpu",
        "ember-accel-tpu-xla",
    ];

    /// The workspace's package names, from each member's Cargo.toml.
    fn workspace_packages() -> Vec<String> {
        let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
        let members = manifest
            .split("members = [")
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap();
        members
            .split('"')
            .skip(1)
            .step_by(2)
            .map(|member| {
                let toml = std::fs::read_to_string(root().join(member).join("Cargo.toml")).unwrap();
                let name = toml.split("name = \"").nth(1).unwrap();
                name.split('"').next().unwrap().to_owned()
            })
            .collect()
    }

    #[test]
    fn backend_rows_leave_out_only_workspace_packages_and_keep_their_own() {
        let packages = workspace_packages();
        for row in matrix() {
            let args = row.args();
            let excluded: Vec<&str> = args
                .windows(2)
                .filter(|w| w[0] == "--exclude")
                .map(|w| w[1])
                .collect();
            for name in &excluded {
                assert!(
                    packages.iter().any(|p| p == name),
                    "{}: {name} is not a workspace package",
                    row.backend
                );
            }
            for kept in ["ember", "ember-acceptance", "digits"] {
                assert!(
                    !excluded.contains(&kept),
                    "{} leaves out {kept}",
                    row.backend
                );
            }
            for accelerator in ACCELERATORS_EVERY_ROW_KEEPS {
                assert!(
                    !excluded.contains(&accelerator),
                    "{} leaves out {accelerator}",
                    row.backend
                );
            }
            assert_eq!(
                excluded.contains(&"ember-accel-tch"),
                row.backend != "tch",
                "{}: ember-accel-tch is built in the tch row only",
                row.backend
            );
        }
        let cpu = &matrix()[0];
        assert_eq!(
            cpu.args().iter().filter(|a| **a == "--exclude").count(),
            1,
            "the cpu row tests all but tch"
        );
    }
}
