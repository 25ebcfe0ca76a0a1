//! The optimizer and scheduler chosen on the command line, as LightningCLI's `--optimizer` and
//! `--lr_scheduler` are (torch's class names and arguments): they train, `--print-config`
//! shows them whole and reads back, bad ones exit 2 naming the flag, and a fit resumes
//! bitwise with them and refuses a checkpoint of another optimizer.

use std::path::Path;
use std::process::Output;

use ember_acceptance::checkpoints;

/// Runs `digits` in `dir` with a CPU-only inventory.
fn digits_in(dir: &Path, args: &[&str]) -> Output {
    ember_acceptance::run_cpu_only(env!("CARGO_BIN_EXE_digits"), dir, args)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// SGD with momentum at 0.1, halved every epoch.
const SGD_HALVED: [&str; 6] = [
    "--optimizer=SGD",
    "--optimizer.lr=0.1",
    "--optimizer.momentum=0.9",
    "--lr_scheduler=StepLR",
    "--lr_scheduler.step_size=1",
    "--lr_scheduler.gamma=0.5",
];

#[test]
fn a_configured_optimizer_and_scheduler_train_and_print_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["fit", "--trainer.max_epochs=3"];
    args.extend(SGD_HALVED);
    args.push("--trainer.callbacks=LearningRateMonitor");
    let out = digits_in(dir.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let metrics = std::fs::read_to_string(dir.path().join("lightning_logs/version_0/metrics.csv"));
    let metrics = metrics.unwrap();
    let header: Vec<&str> = metrics.lines().next().unwrap().split(',').collect();
    let lr = header.iter().position(|c| *c == "lr").unwrap();
    let rates: Vec<f64> = (metrics.lines().skip(1))
        .filter_map(|row| row.split(',').nth(lr)?.parse().ok())
        .collect();
    // Step 49 is in the third epoch (23 steps an epoch): 0.1 halved twice.
    assert_eq!(rates, [0.025], "{metrics}");

    // --print-config shows every argument, and reads back as the same config.
    args[0] = "fit";
    args.retain(|a| !a.starts_with("--trainer.callbacks"));
    args.push("--print-config");
    let printed = digits_in(dir.path(), &args);
    assert!(printed.status.success(), "{}", stderr(&printed));
    let yaml = String::from_utf8(printed.stdout).unwrap();
    let config: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
    let sgd = &config["optimizer"]["init_args"];
    assert_eq!(config["optimizer"]["class_path"], "SGD");
    assert_eq!(
        (sgd["lr"].as_f64(), sgd["momentum"].as_f64()),
        (Some(0.1), Some(0.9))
    );
    assert_eq!(sgd["nesterov"].as_bool(), Some(false));
    assert_eq!(config["lr_scheduler"]["interval"], "epoch");
    std::fs::write(dir.path().join("c.yaml"), &yaml).unwrap();
    let again = digits_in(dir.path(), &["fit", "--config", "c.yaml", "--print-config"]);
    assert_eq!(String::from_utf8(again.stdout).unwrap(), yaml);
}

#[test]
fn bad_optimizer_and_scheduler_flags_exit_2_naming_them() {
    for (args, flag, needle) in [
        (
            vec!["--optimizer=Nadam"],
            "--optimizer",
            "expected one of `Adam`, `AdamW`, `SGD`",
        ),
        (
            vec!["--optimizer.lr=0.1"],
            "--optimizer",
            "name the class first",
        ),
        (
            vec!["--optimizer=Adam", "--optimizer.betas=[0.9, 1.5]"],
            "--optimizer.init_args.betas",
            "two numbers in [0, 1)",
        ),
        (
            vec!["--optimizer=AdamW", "--optimizer.decay=1"],
            "--optimizer",
            "unknown field `decay`",
        ),
        (
            vec!["--lr_scheduler=StepLR"],
            "--lr_scheduler",
            "missing field `step_size`",
        ),
        (
            vec!["--lr_scheduler=ExponentialLR", "--lr_scheduler.gamma=2"],
            "--lr_scheduler",
            "Gamma",
        ),
        (
            vec![
                "--lr_scheduler=StepLR",
                "--lr_scheduler.step_size=2",
                "--lr_scheduler.interval=batch",
            ],
            "--lr_scheduler",
            "unknown variant `batch`",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut all = vec!["fit"];
        all.extend(args.iter().copied());
        let out = digits_in(dir.path(), &all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{flag} value")) && err.contains(needle),
            "{args:?}: {err}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{args:?} wrote {left:?}");
    }
}

#[test]
fn a_fit_with_a_configured_optimizer_resumes_bitwise_and_refuses_another_optimizers_checkpoint() {
    let whole = tempfile::tempdir().unwrap();
    let mut args = vec!["fit", "--trainer.max_epochs=4"];
    args.extend(SGD_HALVED);
    let out = digits_in(whole.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));

    let cut = tempfile::tempdir().unwrap();
    args[1] = "--trainer.max_epochs=2";
    let out = digits_in(cut.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let ckpt = checkpoints::newest(&cut.path().join("lightning_logs/version_0/checkpoints"));
    let resume = format!("--trainer.ckpt_path={}", ckpt.display());
    args[1] = "--trainer.max_epochs=4";
    args.push(&resume);
    let out = digits_in(cut.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let ends = |dir: &Path, version: usize| {
        let dir = dir.join(format!("lightning_logs/version_{version}/checkpoints"));
        checkpoints::tensors(&checkpoints::newest(&dir))
    };
    let (uninterrupted, resumed) = (ends(whole.path(), 0), ends(cut.path(), 1));
    assert!(
        uninterrupted.keys().any(|k| k.contains("velocity")),
        "SGD's momentum is saved"
    );
    assert_eq!(
        uninterrupted, resumed,
        "weights and optimizer state, bitwise"
    );

    // The same checkpoint under Adam: refused, naming both.
    let out = digits_in(
        cut.path(),
        &["fit", "--trainer.max_epochs=4", "--optimizer=Adam", &resume],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("holds sgd optimizer state") && err.contains("is adam"),
        "{err}"
    );
}
