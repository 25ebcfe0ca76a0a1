//! `transformer fit|validate|test|predict`: the transformer example's command line;
//! `transformer shards DIR [FILES]` writes the shipped corpus as token shards to stream
//! (`--data.shards=DIR`).

use std::path::Path;
use std::process::ExitCode;

/// `transformer shards DIR [FILES]`: exit 2 on bad arguments, 1 when writing fails.
fn shards_command(args: &[String]) -> ExitCode {
    let (Some(dir), files) = (args.first(), args.get(1).map(|f| f.parse::<usize>())) else {
        eprintln!("usage: transformer shards DIR [FILES]");
        return ExitCode::from(2);
    };
    let files = match files {
        None => 8,
        Some(Ok(files)) if files > 0 => files,
        Some(_) => {
            eprintln!(
                "transformer shards: FILES is `{}`; it takes an integer > 0",
                args[1]
            );
            return ExitCode::from(2);
        }
    };
    let written =
        transformer::shards::write(transformer::data::shipped(), Path::new(dir), files, 0.1);
    match written {
        Ok(()) => {
            println!(
                "wrote the corpus as {files} training shards and 1 validation shard under {dir}"
            );
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
    if args.first().map(String::as_str) == Some("shards") {
        return shards_command(&args[1..]);
    }
    ember::run::<transformer::CharLmApp>()
}
