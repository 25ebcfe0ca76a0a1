//! Writes checkpoints into the directory given as its argument until it is killed: step N goes
//! to `step=N.ckpt` and `last.ckpt`, and `step=N-2.ckpt` is removed (a top-2 rotation). Prints
//! `saved N` after each complete save. Used by the checkpoint fault test; with
//! `EMBER_FAULT_DIRECT_WRITES=1` it writes files in place instead, pausing between chunks like a
//! slow disk (the test's control, which must be caught leaving torn files).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use ember::checkpoint::{Checkpoint, Progress};
use ember::plugins::{CheckpointIO, LocalCheckpointIO};
use ember_acceptance::fault::{DIRECT_WRITES, payload};

/// Bytes per `write` call of the direct writes.
const WRITE_CHUNK: usize = 1 << 20;

fn main() -> anyhow::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).expect("usage: ckpt_writer DIR"));
    let io = LocalCheckpointIO;
    let direct = std::env::var_os(DIRECT_WRITES).is_some();
    let save = |bytes: &[u8], name: String| -> anyhow::Result<()> {
        let path = dir.join(name);
        if direct {
            let mut file = std::fs::File::create(path)?;
            for chunk in bytes.chunks(WRITE_CHUNK) {
                file.write_all(chunk)?;
                // A slow disk: the file stays partial long enough for most kills to land in it.
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Ok(())
        } else {
            io.save(bytes, &path)
        }
    };
    let mut out = std::io::stdout();
    for step in 0u64.. {
        let bytes = Checkpoint::encode(
            Progress {
                epoch: step,
                global_step: step,
                ..Progress::default()
            },
            BTreeMap::new(),
            Vec::new(),
            vec![("model".into(), payload(step))],
        )?;
        save(&bytes, format!("step={step}.ckpt"))?;
        save(&bytes, "last.ckpt".into())?;
        if step >= 2 {
            io.remove(&dir.join(format!("step={}.ckpt", step - 2)))?;
        }
        writeln!(out, "saved {step}")?;
        out.flush()?;
    }
    Ok(())
}
