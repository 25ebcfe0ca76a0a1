//! `cargo xtask fuzz [CASES] [--seed N]`: the suite's fuzz tests at more cases and another
//! seed — mutated checkpoints (ember-core) and random config files (the acceptance suite's
//! properties) — so a longer search than the suite's is one command.

use crate::run;

/// The suite's fuzz tests, each with the number of cases the environment asks for.
const TESTS: [&[&str]; 2] = [
    &["test", "-p", "ember-core", "--lib", "checkpoint::fuzz"],
    &[
        "test",
        "-p",
        "ember-acceptance",
        "--test",
        "properties",
        "config_files",
    ],
];

/// The cases and the seed `args` ask for (20000 cases of seed 1 by default).
pub(crate) fn settings(args: &[&str]) -> Result<(u64, u64), String> {
    let mut cases = 20_000;
    let mut seed = 1;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let (what, value) = match *arg {
            "--seed" => ("--seed", rest.next().copied().unwrap_or("")),
            other => ("CASES", other),
        };
        let number = value
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("invalid {what} value `{value}`: an integer >= 1"))?;
        match what {
            "--seed" => seed = number,
            _ => cases = number,
        }
    }
    Ok((cases, seed))
}

/// Runs every fuzz test with `cases` cases from `seed`; true when none failed.
pub(crate) fn fuzz(cases: u64, seed: u64) -> bool {
    let (cases, seed) = (cases.to_string(), seed.to_string());
    let envs = [
        ("EMBER_FUZZ_CASES", cases.as_str()),
        ("EMBER_FUZZ_SEED", seed.as_str()),
    ];
    TESTS.iter().all(|args| run("cargo", args, &envs))
}

#[cfg(test)]
mod tests {
    use super::settings;

    #[test]
    fn cases_and_seed_are_read_and_bad_ones_named() {
        assert_eq!(settings(&[]), Ok((20_000, 1)));
        assert_eq!(settings(&["500", "--seed", "7"]), Ok((500, 7)));
        let e = settings(&["--seed", "x"]).unwrap_err();
        assert!(e.contains("--seed") && e.contains("`x`"), "{e}");
        let e = settings(&["0"]).unwrap_err();
        assert!(e.contains("CASES"), "{e}");
    }
}
