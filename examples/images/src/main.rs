//! `images prepare DIR [TRAIN VAL]` writes a folder of images; `images fit|validate|test`
//! trains the ResNet on one (`--data.root=DIR`).

use std::path::PathBuf;
use std::process::ExitCode;

use images::prepare::{TRAIN_IMAGES, VAL_IMAGES, prepare};

/// `images prepare DIR [TRAIN VAL]`: exit 2 on bad arguments, 1 when writing fails.
fn prepare_command(args: &[String]) -> ExitCode {
    let count = |at: usize, default: usize| match args.get(at) {
        None => Some(default),
        Some(text) => text.parse().ok(),
    };
    let (Some(dir), Some(train), Some(val)) =
        (args.first(), count(1, TRAIN_IMAGES), count(2, VAL_IMAGES))
    else {
        eprintln!("usage: images prepare DIR [TRAIN VAL] (counts of images, integers)");
        return ExitCode::from(2);
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
