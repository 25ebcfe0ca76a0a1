//! A corpus as token shards (`--data.shards=DIR`): `DIR/train/*.bin` and, when there is one,
//! `DIR/val/*.bin`, each a flat file of little-endian `u16` token ids (nanoGPT's format),
//! streamed in windows of `context + 1` tokens. `transformer shards DIR [FILES]` writes the
//! shipped corpus this way.

use std::path::Path;

use anyhow::Context;
use ember::{Loader, Shards, TokenWindows};

use crate::data::{VOCAB, Window, encode};

/// A loader streaming the windows of `context + 1` tokens (each starting where the previous
/// one's targets end) of the shards in `dir`; a token outside the vocabulary is an error
/// naming its window.
pub fn loader(dir: &Path, context: usize, batch_size: usize) -> anyhow::Result<Loader<Window>> {
    let format = TokenWindows::u16(context + 1).stride(context);
    let shards = Shards::in_dir(dir, ".bin", format)?;
    Ok(Loader::from_shards(shards, batch_size).map(|tokens, key| {
        let window = tokens
            .iter()
            .map(|&t| u8::try_from(t).ok().filter(|&t| (t as usize) < VOCAB));
        let window: Option<Vec<u8>> = window.collect();
        window.map(Window).with_context(|| {
            format!(
                "window {} holds a token ≥ {VOCAB}, outside the vocabulary",
                key.index
            )
        })
    }))
}

/// Writes `text`'s tokens as shards under `dir`: its first `1 - val_fraction` in `files`
/// files of about equal size under `train/`, the rest as `val/000.bin`.
pub fn write(text: &str, dir: &Path, files: usize, val_fraction: f64) -> anyhow::Result<()> {
    anyhow::ensure!(files > 0, "a corpus needs at least one training shard");
    let tokens = encode(text);
    let cut = ((1.0 - val_fraction) * tokens.len() as f64) as usize;
    let per_file = cut.div_ceil(files).max(1);
    let write = |path: &Path, tokens: &[u8]| {
        let bytes: Vec<u8> = tokens
            .iter()
            .flat_map(|&t| u16::from(t).to_le_bytes())
            .collect();
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    for (sub, part) in [("train", &tokens[..cut]), ("val", &tokens[cut..])] {
        let folder = dir.join(sub);
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("creating {}", folder.display()))?;
        let chunk = if sub == "train" {
            per_file
        } else {
            part.len().max(1)
        };
        for (i, tokens) in part.chunks(chunk).enumerate() {
            write(&folder.join(format!("{i:03}.bin")), tokens)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember::DataSource;

    #[test]
    fn written_shards_stream_back_the_text_s_windows() {
        let dir = tempfile::tempdir().unwrap();
        let text = "The quick brown fox jumps over the lazy dog.\n".repeat(20);
        write(&text, dir.path(), 3, 0.1).unwrap();
        let train = loader(&dir.path().join("train"), 8, 4).unwrap();
        let key = |index| ember::ItemKey {
            seed: 0,
            epoch: 0,
            index,
        };
        let first = train.dataset.get(key(0)).unwrap();
        assert_eq!(first.0, encode(&text[..9]));
        let val = loader(&dir.path().join("val"), 8, 4).unwrap();
        assert!(!val.dataset.is_empty());

        let bad = dir.path().join("bad");
        std::fs::create_dir(&bad).unwrap();
        std::fs::write(bad.join("0.bin"), [200, 0, 1, 0, 2, 0]).unwrap();
        let err = loader(&bad, 2, 1)
            .unwrap()
            .dataset
            .get(key(0))
            .err()
            .unwrap();
        assert!(
            format!("{err:#}").contains("outside the vocabulary"),
            "{err:#}"
        );
    }
}
