//! `images prepare DIR [TRAIN VAL]` writes a folder of images; `images fit|validate|test`
//! trains the ResNet on one (`--data.root=DIR`).

use std::path::PathBuf;
use std::process::ExitCode;

use images::prepare::{TRAIN_IMAGES, VAL_IMAGES, prepare};

/// `images prepare DIR [TRAIN VAL]`: exit 2 on bad arguments, 1 when writing fails.
fn prepare_command(args: &[String]) -> ExitCode {
    let Some(dir) = args.first() else {
        eprintln!("usage: images prepare DIR [TRAIN VAL]");
        return ExitCode::from(2);
    };
    let count = |at: usize, name: &str, default: usize| match args.get(at) {
        None => Ok(default),
        Some(text) => text.parse().map_err(|_| {
            format!(
                "images prepare: {name} is `{text}`; it takes a count of images (an integer ≥ 0)"
            )
        }),
    };
    let (train, val) = match (count(1, "TRAIN", TRAIN_IMAGES), count(2, "VAL", VAL_IMAGES)) {
        (Ok(train), Ok(val)) => (train, val),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match prepare(&PathBuf::from(dir), train, val) {
        Ok(()) => {
            println!("wrote {train} training and {val} validation images under {dir}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("prepare") {
        return prepare_command(&args[1..]);
    }
    ember::run::<images::Images>()
}
