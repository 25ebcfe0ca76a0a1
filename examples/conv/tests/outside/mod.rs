//! The conv example built as a user builds a program of their own: a crate outside this
//! workspace, its `Cargo.toml` made from docs/getting-started.md's block (ember and digits by
//! path, nothing else of ember's: no `[patch]`), its sources the conv example's. The test of
//! that (tests/outside_workspace.rs) and the bench that times it against `examples/conv`
//! (benches/outside.rs) both make it here.

use std::path::{Path, PathBuf};
use std::process::Command;

/// This repository's root, with a trailing slash.
pub fn repo() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../").to_string()
}

/// The guide's `Cargo.toml` block, its `../ember` paths pointed at this repository and
/// `ember_features` (e.g. `, features = ["mpi"]`) added to its ember line.
pub fn guide_dependencies(ember_features: &str) -> String {
    let guide = include_str!("../../../../docs/getting-started.md");
    let block = guide
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```toml block in docs/getting-started.md");
    let line = "ember = { path = \"../ember/crates/ember\" }";
    assert!(
        block.contains(line),
        "the guide's ember line is not `{line}`:\n{block}"
    );
    block
        .replace(
            line,
            &format!("ember = {{ path = \"../ember/crates/ember\"{ember_features} }}"),
        )
        .replace("\"../ember/", &format!("\"{}", repo()))
}

/// Writes the crate into `dir`: the guide's dependencies plus the two the conv example's source
/// uses besides (its data, from the digits example, and serde), the example's `src/`, and this
/// workspace's `Cargo.lock` (so that it builds offline, on the crate versions the workspace
/// uses; cargo drops the entries it does not need).
pub fn make_crate(dir: &Path) {
    let manifest = format!(
        "[package]\nname = \"outside_conv\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [lib]\nname = \"convnet\"\npath = \"src/lib.rs\"\n\n\
         [[bin]]\nname = \"outside_conv\"\npath = \"src/main.rs\"\n\n\
         {}digits = {{ path = \"{}examples/digits\", default-features = false, features = [\"cpu\"] }}\n\
         serde = {{ version = \"1\", features = [\"derive\"] }}\n",
        guide_dependencies(""),
        repo()
    );
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    for file in ["lib.rs", "main.rs"] {
        let source = Path::new(&repo()).join("examples/conv/src").join(file);
        std::fs::copy(source, dir.join("src").join(file)).unwrap();
    }
    std::fs::copy(
        Path::new(&repo()).join("Cargo.lock"),
        dir.join("Cargo.lock"),
    )
    .unwrap();
}

/// The target directory the crate builds in: the one this workspace builds in, so that the
/// test's build and the bench's share their artifacts (a program of its own resolves burn's and
/// ember's features differently from the workspace, so the first build compiles those again).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // <target>/<profile>/deps/<test binary>
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// `cargo ARGS --offline` in `dir` with [`target_dir`]; its stdout, or its stderr on failure.
fn cargo(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(env!("CARGO"))
        .args(args)
        .arg("--offline")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .unwrap();
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// `cargo build --profile PROFILE` of the crate in `dir` (`dev`, cargo's default, nothing
/// optimised and the quickest build; or `release`); the path of its binary, or cargo's output
/// when the build fails.
pub fn build(dir: &Path, profile: &str) -> Result<PathBuf, String> {
    cargo(dir, &["build", "--profile", profile, "--quiet"])?;
    let out_dir = if profile == "dev" { "debug" } else { profile };
    Ok(target_dir().join(out_dir).join("outside_conv"))
}

/// The names of the packages a build of the crate in `dir` compiles for it (`cargo tree`).
pub fn packages(dir: &Path) -> Vec<String> {
    let args = "tree -e normal,build --prefix none --format {p}";
    let args: Vec<&str> = args.split(' ').collect();
    let tree = cargo(dir, &args).unwrap_or_else(|e| panic!("{e}"));
    tree.lines()
        .filter_map(|line| line.split(' ').next())
        .map(str::to_string)
        .collect()
}
