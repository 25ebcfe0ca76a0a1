//! ember's developer tasks. Run `cargo xtask help`.
//!
//! Every task calls `scripts/setup.sh` first (quick when everything is installed) and runs
//! cargo with one shared target directory outside the clone
//! (`CARGO_TARGET_DIR`, default `~/.cache/ember-target`), `CARGO_BUILD_JOBS=2` and
//! `CARGO_INCREMENTAL=0` (each unless already set).

mod doclinks;
mod fuzz;
mod layering;
mod leftovers;
mod matrix;
mod packaging;
mod repeat;
mod snippets;
mod unify;
mod wording;

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

use matrix::{matrix, selected_rows, test_matrix};

const HELP: &str = "\
cargo xtask <task>

  digits [ARGS]      train the digits example on CPU (release build): digits fit ARGS
  test [--row NAME] [--repeat N]
                     every test: the acceptance suite once per backend (see test-matrix);
                     --row cpu|cuda|wgpu|xla|tch runs that row alone; --repeat N runs the
                     rows N times over and counts each failing test's failures
  test-matrix        cpu: all tests; the backend rows build the workspace with their feature
                     and run the tests that change with it (ember, the acceptance suite,
                     digits, the accelerator crates; conv on xla): cuda (no GPU
                     needed); wgpu (lavapipe when no GPU); tch: LibTorch's CPU (the pinned
                     torch venv); xla: XLA's CPU PJRT plugin (setup.sh caches it); prints
                     backend x result
  bench cpu-backends [ROUNDS]   Flex vs NdArray on the digits model
  bench overhead [ROUNDS]       the Trainer vs a hand-written burn loop (digits, cpu)
  bench precision [ROUNDS] [--accelerator cpu|cuda|wgpu] [--hidden W,..] [--batch N]
                     [--steps N]   steps/s of a wide MLP at each precision the
                     accelerator runs (cuda/wgpu are built in when named)
  bench ddp [ROUNDS]            samples/s of 1 and 2 ddp ranks (wide MLP, cpu, OpenMPI)
  bench long-run [ROUNDS]       digits for 300 epochs with and without flush_denormal
  bench sharded [ROUNDS]        ddp_sharded vs ddp: optimizer state, peak RSS, samples/s (2 ranks)
  bench vs-lightning [ROUNDS]   digits by ember (flex, LibTorch), a burn loop, a torch loop and
                     Lightning; a matmul-bound MLP against the CPU's peak (the torch venv)
  bench profiler [ROUNDS]       what --trainer.profiler=simple|advanced costs on the MLP and the CNN
  bench checkpointing [ROUNDS]  --trainer.activation_checkpointing on the larger transformer:
                     peak RSS and steps/s, on and off, alternating
  bench outside [ROUNDS]        the conv example built as a crate outside the workspace from
                     the getting-started manifest vs examples/conv: steps/s, alternating
  bench models [ROUNDS] [--model mlp,cnn,transformer,resnet,transformer-l]
                     those models (all by default) by ember (cpu, tch-cpu, xla), a burn loop, a
                     torch loop and Lightning, with each Trainer's defaults and bare (no
                     loggers, checkpoints, summary); ember(cpu)/Lightning and the large
                     models' peak shares (the torch venv)
  bench convs [ROUNDS]          each convolution of the ResNet alone, forward and backward, on
                     burn-flex and on PyTorch (the torch venv); last line ember/PyTorch
  bench xla [ROUNDS]            the xla accelerator (XLA's CPU plugin) vs cpu and vs jax (the
                     pinned jax venv) on digits and a wide MLP: steps/s, compiles, cache
                     hits, host overhead per step; last line xla/jax
  bench xla-devices [ROUNDS]    one process on XLA's 4 CPU devices (strategy xla, SPMD) vs 4
                     ddp processes (OpenMPI): samples/s, digits and a wide MLP; last line xla/ddp
  fault checkpoint [--runs N]   SIGKILL a checkpoint writer N times (default 100); prints
                     'N runs, M loadable'
  fuzz [CASES] [--seed N]       mutated checkpoints and random config files, CASES of each
                     (default 20000, seed 1; the suite runs a fixed seed's few hundred)
  lint               layering (no module cycle in ember-plan/ember-core, files <= 500
                     lines, no burn under ember-plan), no words about how the work is
                     organised in README, docs/ and the examples' sources, every path the
                     docs name exists, every Rust block of the docs compiled (a doc test or
                     code a crate, example or test holds), the test rows resolve dependencies
                     alike (cargo tree), the crates for users package (cargo package,
                     licence files; the rest publish = false), fmt --check, clippy -D warnings
  ci                 lint, then test
  setup              install system packages the tests need (scripts/setup.sh), and the
                     pinned torch venv (scripts/setup.sh --torch)
";

/// The workspace root, from the manifest directory `cargo run` sets at run time (this
/// checkout's, even where the shared target dir holds an xtask built in another one), else the
/// one it was built in.
fn root() -> PathBuf {
    let xtask = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    xtask.join("..")
}

fn target_dir() -> String {
    std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/tmp".into());
        format!("{home}/.cache/ember-target")
    })
}

/// Runs a command in the repository root with the shared cargo settings; true on success.
fn run(program: &str, args: &[&str], envs: &[(&str, &str)]) -> bool {
    run_in(program, args, envs, &[])
}

/// [`run`] with more variables, e.g. [`torch_env`].
fn run_in(program: &str, args: &[&str], envs: &[(&str, &str)], more: &[(String, String)]) -> bool {
    let status = command(program, args, envs, more).status();
    match status {
        Ok(s) => s.success(),
        Err(e) => {
            eprintln!("xtask: cannot run {program}: {e}");
            false
        }
    }
}

/// `program args` in the repository root with the shared cargo settings and the variables
/// `envs` and `more`, announced on stderr.
fn command(
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    more: &[(String, String)],
) -> Command {
    eprintln!("xtask: {program} {}", args.join(" "));
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(root())
        .env("CARGO_TARGET_DIR", target_dir())
        .env(
            "CARGO_BUILD_JOBS",
            std::env::var("CARGO_BUILD_JOBS").unwrap_or_else(|_| "2".into()),
        )
        // Incremental caches add tens of GB across the three backend rows; CI rebuilds
        // only what changed anyway.
        .env(
            "CARGO_INCREMENTAL",
            std::env::var("CARGO_INCREMENTAL").unwrap_or_else(|_| "0".into()),
        )
        .envs(envs.iter().copied())
        .envs(more.iter().map(|(k, v)| (k, v)));
    command
}

/// `cargo bench` of the digits bench `bench` with the xla accelerator built in, passing it
/// `args`.
fn digits_xla_bench<'a>(bench: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut cargo = vec![
        "bench",
        "-p",
        "digits",
        "--features",
        "tpu-xla",
        "--bench",
        bench,
    ];
    cargo.push("--");
    cargo.extend(args);
    cargo
}

/// The value of `--accelerator NAME` or `--accelerator=NAME` among benchmark arguments.
fn accelerator_flag<'a>(args: &[&'a str]) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(i, arg)| match *arg {
        "--accelerator" => args.get(i + 1).copied(),
        _ => arg.strip_prefix("--accelerator="),
    })
}

/// Installs what the tests need; with `torch`, also the pinned torch venv (4 GB the first time)
/// that LibTorch's build, the tch row and the benchmark against Lightning use.
fn setup(torch: bool) -> bool {
    let args: &[&str] = if torch {
        &["scripts/setup.sh", "--torch"]
    } else {
        &["scripts/setup.sh"]
    };
    run("bash", args, &[])
}

/// The pinned torch venv (scripts/setup.sh --torch installs it at the same default path).
fn torch_venv() -> PathBuf {
    std::env::var_os("EMBER_TORCH_VENV").map_or_else(
        || {
            let home = std::env::var("HOME").unwrap_or_else(|_| "/tmp".into());
            PathBuf::from(home).join(".cache/ember-torch/venv")
        },
        PathBuf::from,
    )
}

/// What a cargo command that builds or runs LibTorch code needs: burn-tch's build takes the
/// headers and libraries from the venv's torch (`LIBTORCH_USE_PYTORCH` with the venv's python
/// first on PATH), and binaries find torch's libraries at run time.
fn torch_env() -> Vec<(String, String)> {
    let venv = torch_venv();
    let site = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|python| python.path().join("site-packages"))
        .find(|site| site.join("torch").is_dir())
        .unwrap_or_else(|| venv.join("lib/python3/site-packages"));
    let path = std::env::var("PATH").unwrap_or_default();
    let libs = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    vec![
        ("VIRTUAL_ENV".into(), venv.display().to_string()),
        ("PATH".into(), format!("{}/bin:{path}", venv.display())),
        ("LIBTORCH_USE_PYTORCH".into(), "1".into()),
        (
            "LD_LIBRARY_PATH".into(),
            format!("{}/torch/lib:{libs}", site.display()),
        ),
    ]
}

fn lint() -> bool {
    let mut workspace = vec!["clippy", "--workspace"];
    for package in VENDORED {
        workspace.extend(["--exclude", package]);
    }
    workspace.extend(["--all-targets", "--all-features", "--", "-D", "warnings"]);
    let cpu_row_tests = "clippy -p digits -p ember-acceptance --tests -- -D warnings";
    let cpu_row_tests: Vec<&str> = cpu_row_tests.split(' ').collect();
    layering::check(&root())
        && wording::check(&root())
        && doclinks::check(&root())
        && snippets::check(&root())
        && unify::rows_share_dependency_builds()
        && packaging::check(&root())
        && run("cargo", &["fmt", "--all", "--", "--check"], &[])
        && run_in("cargo", &workspace, &[], &torch_env())
        // The test files a backend feature compiles out (the cpu row's alone), as the cpu row
        // builds them.
        && run("cargo", &cpu_row_tests, &[])
        // The public crates' docs: every link resolves, nothing private is linked.
        && run_in("cargo", &PUBLIC_DOCS, &[("RUSTDOCFLAGS", "-D warnings")], &torch_env())
        // The vendored crates: their libraries (our patches live there) under the same bar;
        // their upstream tests are burn's code, left as published.
        && VENDORED.iter().all(|package| {
            run(
                "cargo",
                &["clippy", "-p", package, "--lib", "--", "-D", "warnings"],
                &[],
            )
        })
}

/// `cargo doc` over the crates a user depends on (ember and what it re-exports).
const PUBLIC_DOCS: [&str; 23] = [
    "doc",
    "--no-deps",
    "--all-features",
    "-p",
    "ember",
    "-p",
    "ember-core",
    "-p",
    "ember-plan",
    "-p",
    "ember-derive",
    "-p",
    "ember-mpi",
    "-p",
    "ember-accel-cpu",
    "-p",
    "ember-accel-cuda",
    "-p",
    "ember-accel-wgpu",
    "-p",
    "ember-accel-tch",
    "-p",
    "ember-accel-tpu-xla",
];

/// The package names of burn's crates patched in vendor/ (each has a PATCHES.md).
const VENDORED: [&str; 2] = ["ember-burn-flex", "ember-burn-autodiff"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let ok = match args.first().map(String::as_str) {
        Some("setup") => setup(true),
        Some("digits") => {
            let mut cargo = vec!["run", "--release", "-p", "digits", "--", "fit"];
            cargo.extend(&rest);
            setup(false) && run("cargo", &cargo, &[])
        }
        Some("test") | Some("test-matrix") => match (selected_rows(&rest), repeat::count(&rest)) {
            (Some(rows), Ok(None)) => setup(true) && test_matrix(rows),
            (Some(rows), Ok(Some(runs))) => setup(true) && repeat::repeat(&rows, runs),
            (_, Err(message)) => {
                eprintln!("xtask: {message}");
                return ExitCode::from(2);
            }
            (None, _) => return ExitCode::from(2),
        },
        Some("fault") => match rest.first() {
            Some(&"checkpoint") => {
                let mut cargo = vec![
                    "run",
                    "--release",
                    "-p",
                    "ember-acceptance",
                    "--bin",
                    "ckpt_fault",
                    "--",
                ];
                cargo.extend(&rest[1..]);
                run(
                    "cargo",
                    &["build", "--release", "-p", "ember-acceptance", "--bins"],
                    &[],
                ) && run("cargo", &cargo, &[])
            }
            other => {
                eprintln!("xtask: unknown fault test {other:?}; available: checkpoint");
                false
            }
        },
        Some("bench") => match rest.first() {
            Some(&name @ ("cpu-backends" | "overhead" | "precision" | "ddp" | "long-run")) => {
                let bench = name.replace('-', "_");
                let mut cargo = vec!["bench", "-p", "digits", "--bench", &bench];
                // `--accelerator cuda|wgpu` needs that accelerator built in (the bench itself
                // names what is allowed for anything else).
                let feature =
                    accelerator_flag(&rest[1..]).filter(|a| matches!(*a, "cuda" | "wgpu"));
                if let Some(feature) = feature {
                    cargo.extend(["--features", feature]);
                }
                cargo.push("--");
                cargo.extend(&rest[1..]);
                run("cargo", &cargo, &[])
            }
            Some(&"vs-lightning") => {
                let mut cargo = vec![
                    "bench",
                    "-p",
                    "digits",
                    "--features",
                    "tch",
                    "--bench",
                    "vs_lightning",
                    "--",
                ];
                cargo.extend(&rest[1..]);
                setup(true) && run_in("cargo", &cargo, &[], &torch_env())
            }
            Some(&"models") => {
                // Every CPU-capable accelerator built in: tch-cpu (the torch venv) and xla.
                let mut cargo = vec![
                    "bench",
                    "-p",
                    "convnet",
                    "--features",
                    "tch,tpu-xla",
                    "--bench",
                    "models",
                    "--",
                ];
                cargo.extend(&rest[1..]);
                setup(true) && run_in("cargo", &cargo, &[], &torch_env())
            }
            Some(&"convs") => {
                // PyTorch's side runs in the pinned torch venv (scripts/setup.sh --torch).
                let mut cargo = vec!["bench", "-p", "convnet", "--bench", "convs", "--"];
                cargo.extend(&rest[1..]);
                setup(true) && run_in("cargo", &cargo, &[], &torch_env())
            }
            Some(&"data") => {
                // torchvision's side runs in the pinned torch venv (scripts/setup.sh --torch).
                let mut cargo = vec!["bench", "-p", "images", "--bench", "data", "--"];
                cargo.extend(&rest[1..]);
                setup(true) && run_in("cargo", &cargo, &[], &torch_env())
            }
            Some(&"xla") => {
                run("bash", &["scripts/setup.sh", "--jax"], &[])
                    && run("cargo", &digits_xla_bench("xla", &rest[1..]), &[])
            }
            Some(&"xla-devices") => {
                setup(false) && run("cargo", &digits_xla_bench("xla_devices", &rest[1..]), &[])
            }
            Some(&"checkpointing") => {
                let mut cargo = vec!["bench", "-p", "transformer", "--bench", "checkpointing"];
                cargo.push("--");
                cargo.extend(&rest[1..]);
                run("cargo", &cargo, &[])
            }
            Some(&name @ ("profiler" | "outside")) => {
                let mut cargo = vec!["bench", "-p", "convnet", "--bench", name, "--"];
                cargo.extend(&rest[1..]);
                run("cargo", &cargo, &[])
            }
            Some(&"sharded") => {
                let mut cargo = vec![
                    "bench",
                    "-p",
                    "ember-acceptance",
                    "--bench",
                    "sharded",
                    "--",
                ];
                cargo.extend(&rest[1..]);
                run("cargo", &cargo, &[])
            }
            other => {
                eprintln!(
                    "xtask: unknown benchmark {other:?}; available: cpu-backends, overhead, precision, ddp, long-run, sharded, vs-lightning, xla, xla-devices, models, convs, data, profiler, outside, checkpointing"
                );
                false
            }
        },
        Some("fuzz") => match fuzz::settings(&rest) {
            Ok((cases, seed)) => fuzz::fuzz(cases, seed),
            Err(message) => {
                eprintln!("xtask: {message}");
                return ExitCode::from(2);
            }
        },
        Some("lint") => setup(true) && lint(),
        Some("ci") => {
            let start = Instant::now();
            let ok = setup(true) && lint() && test_matrix(matrix());
            println!(
                "ci: {} in {} s",
                if ok { "green" } else { "FAILED" },
                start.elapsed().as_secs()
            );
            ok
        }
        Some("help") | None => {
            print!("{HELP}");
            true
        }
        Some(other) => {
            eprintln!("xtask: unknown task `{other}`\n\n{HELP}");
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
