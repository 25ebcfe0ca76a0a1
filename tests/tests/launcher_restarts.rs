//! `--trainer.max_restarts` on the local launcher's loop, with an engine whose ranks end with
//! scripted exit statuses (the real restart of killed ranks: examples/digits/tests/restarts.rs).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use ember::plugins::{Collective, Engine};
use ember::{Cli, CliOutcome, Plan};
use ember_acceptance::{WhoRuns, env, registry};

/// Ends each launch with the next of `codes`, and records the arguments it was given.
struct Scripted {
    codes: RefCell<Vec<i32>>,
    launches: Rc<RefCell<Vec<Vec<String>>>>,
}

impl Engine for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn launch(&self, _: &Plan, args: &[String]) -> anyhow::Result<i32> {
        self.launches.borrow_mut().push(args.to_vec());
        Ok(self.codes.borrow_mut().remove(0))
    }

    fn join(&self, _: &Plan, _: Duration) -> anyhow::Result<Rc<dyn Collective>> {
        anyhow::bail!("the scripted engine only launches")
    }
}

/// Runs `fit --trainer.devices=2 EXTRA` on cpu with ranks that end with `codes` in turn; the
/// exit status and the arguments of every launch.
fn run(extra: &[&str], codes: &[i32]) -> (u8, Vec<Vec<String>>) {
    let launches = Rc::new(RefCell::new(Vec::new()));
    let engine = Scripted {
        codes: RefCell::new(codes.to_vec()),
        launches: Rc::clone(&launches),
    };
    let registry = registry::<WhoRuns>().with_engine(engine);
    let argv = [
        "app",
        "fit",
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
    ]
    .iter()
    .chain(extra)
    .map(|a| (*a).to_owned());
    let cli = Cli::new("app", "", serde_json::json!({}), serde_json::json!({}));
    let outcome = cli.execute(argv, &env(&[]), &registry, |_| WhoRuns);
    let CliOutcome::Launched { code } = outcome else {
        panic!("expected a launch, got {outcome:?}");
    };
    (code, launches.take())
}

#[test]
fn without_max_restarts_a_failed_rank_ends_the_run() {
    let (code, launches) = run(&[], &[137]);
    assert_eq!((code, launches.len()), (137, 1));
}

#[test]
fn a_failed_run_restarts_from_the_last_checkpoint_until_it_succeeds() {
    let (code, launches) = run(&["--trainer.max_restarts=3"], &[137, 1, 0]);
    assert_eq!((code, launches.len()), (0, 3));
    let resume = |args: &Vec<String>| args.iter().any(|a| a == "--trainer.ckpt_path=last");
    assert!(!resume(&launches[0]), "{:?}", launches[0]);
    assert!(resume(&launches[1]) && resume(&launches[2]), "{launches:?}");
    // The flag is added once, after what the user gave (a later flag wins).
    assert_eq!(launches[2].last().unwrap(), "--trainer.ckpt_path=last");
    assert_eq!(launches[2].len(), launches[0].len() + 1);
}

#[test]
fn restarts_stop_at_max_restarts_with_the_last_failure() {
    let (code, launches) = run(&["--trainer.max_restarts=2"], &[137, 137, 9, 0]);
    assert_eq!((code, launches.len()), (9, 3));
}

#[test]
fn bad_input_is_not_restarted() {
    let (code, launches) = run(&["--trainer.max_restarts=2"], &[2, 0]);
    assert_eq!((code, launches.len()), (2, 1));
}

#[test]
fn a_negative_max_restarts_names_the_flag() {
    let registry = registry::<WhoRuns>();
    let argv = ["app", "fit", "--trainer.max_restarts=-1"].map(String::from);
    let cli = Cli::new("app", "", serde_json::json!({}), serde_json::json!({}));
    match cli.execute(argv, &env(&[]), &registry, |_| WhoRuns) {
        CliOutcome::Failed { code: 2, message } => {
            assert!(
                message.contains("--trainer.max_restarts") && message.contains("-1"),
                "{message}"
            );
        }
        other => panic!("expected exit 2, got {other:?}"),
    }
}
