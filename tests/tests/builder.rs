//! `Trainer::builder(..).plugins([...])`: plugins given as values, as Lightning's
//! `Trainer(plugins=[...])` takes them.

use std::path::Path;
use std::sync::{Arc, Mutex};

use burn_autodiff::Autodiff;
use burn_flex::Flex;
use ember::Trainer;
use ember::cpu::CpuAccelerator;
use ember::options::CheckpointWrites;
use ember::plugins::PrecisionPlugin;
use ember::plugins::{CheckpointIO, LocalCheckpointIO};
use ember::{Plan, Plugin, Precision, TrainerOptions};

type B = Autodiff<Flex>;

/// 32-true under another name.
struct Renamed;

impl PrecisionPlugin for Renamed {
    fn name(&self) -> &str {
        "renamed-32"
    }
    fn precision(&self) -> Precision {
        Precision::F32True
    }
}

/// Records the thread each save runs on.
#[derive(Clone, Default)]
struct Threads(Arc<Mutex<Vec<std::thread::ThreadId>>>);

impl CheckpointIO for Threads {
    fn save(&self, bytes: &[u8], path: &Path) -> anyhow::Result<()> {
        self.0.lock().unwrap().push(std::thread::current().id());
        LocalCheckpointIO.save(bytes, path)
    }
    fn load(&self, path: &Path) -> anyhow::Result<Vec<u8>> {
        LocalCheckpointIO.load(path)
    }
    fn remove(&self, path: &Path) -> anyhow::Result<()> {
        LocalCheckpointIO.remove(path)
    }
}

#[test]
fn plugins_given_as_values_replace_the_plans_and_two_of_a_kind_are_refused() {
    let plan = Plan::local("cpu", Precision::F32True);
    let io = Threads::default();
    let trainer = Trainer::<B>::builder(&plan, TrainerOptions::default())
        .plugins([
            Plugin::precision(Renamed),
            Plugin::checkpoint_io(io.clone()),
        ])
        .build::<CpuAccelerator>()
        .unwrap();
    assert_eq!(trainer.precision().name(), "renamed-32");
    let dir = tempfile::tempdir().unwrap();
    let io_in_use = &trainer.strategy().parts().checkpoint_io;
    io_in_use.save(b"x", &dir.path().join("a.ckpt")).unwrap();
    io_in_use.wait().unwrap();
    assert_eq!(
        io.0.lock().unwrap().len(),
        1,
        "the given checkpoint IO is the one in use"
    );

    let twice = Trainer::<B>::builder(&plan, TrainerOptions::default())
        .precision(Renamed)
        .plugins([Plugin::precision(Renamed)])
        .build::<CpuAccelerator>();
    let message = format!(
        "{:#}",
        twice.err().expect("two precision plugins are refused")
    );
    assert!(message.contains("precision plugin twice"), "{message}");
}

/// Issue 32.5: `checkpoint_io` composes with a given IO instead of being ignored: `async`
/// calls it on a background thread, `sync` on the caller's.
#[test]
fn checkpoint_writes_compose_with_a_given_checkpoint_io() {
    let plan = Plan::local("cpu", Precision::F32True);
    let dir = tempfile::tempdir().unwrap();
    for writes in [CheckpointWrites::Async, CheckpointWrites::Sync] {
        let io = Threads::default();
        let options = TrainerOptions {
            checkpoint_writes: writes,
            ..TrainerOptions::default()
        };
        let trainer = Trainer::<B>::builder(&plan, options)
            .checkpoint_io(io.clone())
            .build::<CpuAccelerator>()
            .unwrap();
        let io_in_use = &trainer.strategy().parts().checkpoint_io;
        io_in_use.save(b"x", &dir.path().join("a.ckpt")).unwrap();
        io_in_use.wait().unwrap();
        let threads = io.0.lock().unwrap().clone();
        let here = std::thread::current().id();
        match writes {
            CheckpointWrites::Async => assert!(threads.len() == 1 && threads[0] != here),
            CheckpointWrites::Sync => assert_eq!(threads, [here]),
        }
    }
}

/// Builds the Trainer of its context and reports its strategy and precision plugin.
struct BuildsTrainer;

impl ember::Job for BuildsTrainer {
    type Output = (String, String);
    fn run<A: ember::Accelerator>(
        self,
        context: &ember::RunContext,
    ) -> anyhow::Result<Self::Output> {
        let trainer =
            Trainer::<A::Backend>::builder_for(context, TrainerOptions::default()).build::<A>()?;
        Ok((
            trainer.strategy().name().to_owned(),
            trainer.precision().name().to_owned(),
        ))
    }
}

/// Issue 32.6: a program that runs its own job through a registry (no CLI) gets what the plan
/// names by parameters alone: the registered precision plugin, the built-in strategy.
#[test]
fn a_job_run_outside_the_cli_builds_the_registered_plugins_the_plan_names() {
    let registry = ember_acceptance::registry::<BuildsTrainer>()
        .register_precision(
            ember::plugins::PrecisionInfo::new(
                "renamed-32",
                "32-true under another name",
                ember::Precision::F32True,
            ),
            |_| Ok(Renamed),
        )
        .unwrap();
    let env = ember_acceptance::injected("", &ember::plugins::Env::new());
    let flags = ember::TrainerFlags::default().plugins(vec!["renamed-32".to_owned()]);
    let plan = registry.plan(&flags, &env).unwrap();
    let args = [
        "fit",
        "--trainer.plugins=[renamed-32]",
        "--trainer.logger=false",
    ];
    let ember::CliOutcome::Ran((strategy, precision)) =
        ember_acceptance::execute(&registry, &args, &env, || BuildsTrainer)
    else {
        panic!("the run with the renamed plugin fails");
    };
    assert_eq!(
        (strategy.as_str(), precision.as_str()),
        ("single_device", "renamed-32")
    );

    // Without the registry's context the name means nothing, and the error says where it lives.
    let alone = Trainer::<B>::new::<CpuAccelerator>(&plan, TrainerOptions::default());
    let message = format!(
        "{:#}",
        alone.err().expect("an unregistered plugin is refused")
    );
    assert!(
        message.contains("renamed-32") && message.contains("Registry"),
        "{message}"
    );
}
