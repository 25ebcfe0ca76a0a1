//! The corpus, its characters as tokens, and windows of it as samples.
//!
//! The shipped corpus (`data/corpus.txt`) is this project's own documentation — README.md and
//! docs/*.md as they were when the example was written — under the project's licence (MIT OR
//! Apache-2.0). Each character is a token: newline and the 95 printable ASCII characters; any
//! other character reads as `?`. The text is split by position: the first part trains, the
//! rest validates, and each is cut into windows of `context + 1` tokens (a window's first
//! `context` tokens are the input, its last `context` the targets).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset, InMemDataset};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use ember::{DataModule, FlagError, Loader, Stage};

use crate::shards;
use serde::{Deserialize, Serialize};

/// Tokens in the vocabulary: newline and the printable ASCII characters.
pub const VOCAB: usize = 96;

/// The shipped corpus, compiled in so the example runs from any directory.
static SHIPPED: &str = include_str!("../data/corpus.txt");

/// The shipped corpus's text.
pub fn shipped() -> &'static str {
    SHIPPED
}

/// The token of a character (unknown characters read as `?`).
pub fn token(c: char) -> u8 {
    match c {
        '\n' => 0,
        ' '..='~' => c as u8 - b' ' + 1,
        _ => b'?' - b' ' + 1,
    }
}

/// The character of a token.
pub fn character(token: u8) -> char {
    match token {
        0 => '\n',
        t => char::from(t - 1 + b' '),
    }
}

/// The tokens of a text.
pub fn encode(text: &str) -> Vec<u8> {
    text.chars().map(token).collect()
}

/// The `data` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// A UTF-8 text file to train on; the shipped corpus when unset.
    pub path: Option<PathBuf>,
    /// A folder of token shards to stream instead (`train/*.bin`, `val/*.bin`: little-endian
    /// `u16` ids); `transformer shards DIR` writes one.
    pub shards: Option<PathBuf>,
    /// Threads making batches ahead of the step.
    pub num_workers: usize,
    /// Windows per training batch.
    pub batch_size: usize,
    /// Tokens the model sees at once.
    pub context: usize,
    /// Share of the text, at its end, held out for validation.
    pub val_fraction: f64,
    /// Texts `predict` continues, one prediction each.
    pub prompts: Vec<String>,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            path: None,
            shards: None,
            num_workers: 0,
            batch_size: 32,
            context: 64,
            val_fraction: 0.1,
            prompts: vec!["The Trainer ".into()],
        }
    }
}

impl DataConfig {
    /// Refuses a batch size or context of 0, by flag.
    fn check(&self) -> Result<(), FlagError> {
        for (key, value) in [("batch_size", self.batch_size), ("context", self.context)] {
            if value == 0 {
                return Err(FlagError::new(
                    format!("--data.{key}"),
                    "0",
                    "an integer > 0",
                ));
            }
        }
        Ok(())
    }

    /// The training and validation windows this config describes.
    pub fn load(&self) -> anyhow::Result<(Vec<Window>, Vec<Window>)> {
        self.check()?;
        if !(self.val_fraction > 0.0 && self.val_fraction < 1.0) {
            let value = self.val_fraction.to_string();
            return Err(FlagError::new("--data.val_fraction", value, "a share in (0, 1)").into());
        }
        let text = match &self.path {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
            None => SHIPPED.to_owned(),
        };
        let tokens = encode(&text);
        let cut = ((1.0 - self.val_fraction) * tokens.len() as f64) as usize;
        let (train, val) = (
            windows(&tokens[..cut], self.context),
            windows(&tokens[cut..], self.context),
        );
        anyhow::ensure!(
            !train.is_empty() && !val.is_empty(),
            "the text ({} characters) is too short for windows of {} on both sides of the split",
            tokens.len(),
            self.context + 1
        );
        Ok((train, val))
    }
}

/// `context + 1` consecutive tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Window(pub Vec<u8>);

/// The non-overlapping windows of `context + 1` tokens in `tokens` (each starts where the
/// previous one's targets end).
fn windows(tokens: &[u8], context: usize) -> Vec<Window> {
    (0..tokens.len().saturating_sub(context))
        .step_by(context)
        .map(|start| Window(tokens[start..start + context + 1].to_vec()))
        .collect()
}

/// Inputs `[n, context]` and targets `[n, context]` (the inputs shifted by one).
#[derive(Debug, Clone)]
pub struct TokenBatch<B: Backend> {
    /// Token ids.
    pub inputs: Tensor<B, 2, Int>,
    /// The next token after each input position.
    pub targets: Tensor<B, 2, Int>,
}

/// Stacks windows into a [`TokenBatch`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenBatcher;

impl<B: Backend> Batcher<B, Window, TokenBatch<B>> for TokenBatcher {
    fn batch(&self, items: Vec<Window>, device: &B::Device) -> TokenBatch<B> {
        let n = items.len();
        let context = items.first().map_or(0, |w| w.0.len() - 1);
        let (mut inputs, mut targets) = (
            Vec::with_capacity(n * context),
            Vec::with_capacity(n * context),
        );
        for Window(tokens) in &items {
            inputs.extend(tokens[..context].iter().map(|&t| i64::from(t)));
            targets.extend(tokens[1..].iter().map(|&t| i64::from(t)));
        }
        TokenBatch {
            inputs: Tensor::from_data(TensorData::new(inputs, [n, context]), device),
            targets: Tensor::from_data(TensorData::new(targets, [n, context]), device),
        }
    }
}

/// The corpus as a data module: the text file's (or shipped corpus's) windows, or windows
/// streamed from token shards. Validation on the text is one batch of every held-out window,
/// so the logged `val_loss` is the mean over all of them and `val_ppl` its exponential. `predict`
/// continues each prompt of the config (a window of the prompt's tokens). The `data` section
/// of the config is its [`DataConfig`]; the windows it loads in `setup` are not part of it.
#[derive(Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CorpusData {
    config: DataConfig,
    #[serde(skip)]
    train: Option<Arc<InMemDataset<Window>>>,
    #[serde(skip)]
    val: Option<Arc<InMemDataset<Window>>>,
}

impl CorpusData {
    /// A data module for this config (nothing is read before `setup`).
    pub fn new(config: DataConfig) -> Self {
        Self {
            config,
            train: None,
            val: None,
        }
    }
}

impl DataModule for CorpusData {
    type Item = Window;
    type Batcher = TokenBatcher;

    fn setup(&mut self, _stage: Stage) -> anyhow::Result<()> {
        self.config.check()?;
        if self.train.is_none() && self.config.shards.is_none() {
            let (train, val) = self.config.load()?;
            self.train = Some(Arc::new(InMemDataset::new(train)));
            self.val = Some(Arc::new(InMemDataset::new(val)));
        }
        Ok(())
    }

    fn train_loader(&self) -> anyhow::Result<Option<Loader<Window>>> {
        let config = &self.config;
        let loader = match (&config.shards, &self.train) {
            (Some(dir), _) => {
                shards::loader(&dir.join("train"), config.context, config.batch_size)?
            }
            (None, Some(set)) => Loader::new(Arc::clone(set), config.batch_size),
            (None, None) => return Ok(None),
        };
        Ok(Some(loader.shuffled().num_workers(config.num_workers)))
    }

    fn val_loader(&self) -> anyhow::Result<Option<Loader<Window>>> {
        let config = &self.config;
        let loader = match (&config.shards, &self.val) {
            (Some(dir), _) if dir.join("val").is_dir() => {
                shards::loader(&dir.join("val"), config.context, config.batch_size)?
            }
            (None, Some(set)) => Loader::new(Arc::clone(set), set.len()),
            _ => return Ok(None),
        };
        Ok(Some(loader.num_workers(config.num_workers)))
    }

    fn test_loader(&self) -> anyhow::Result<Option<Loader<Window>>> {
        self.val_loader()
    }

    fn predict_loader(&self) -> anyhow::Result<Option<Loader<Window>>> {
        // A prompt's tokens plus one (the batcher's inputs drop a window's last token).
        let prompts: Vec<Window> = self
            .config
            .prompts
            .iter()
            .map(|p| Window(encode(p).into_iter().chain([0]).collect()))
            .collect();
        Ok(Some(Loader::new(InMemDataset::new(prompts), 1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_round_trip_and_others_read_as_a_question_mark() {
        let text = "Hello, world!\n~ {x}";
        assert_eq!(
            encode(text).into_iter().map(character).collect::<String>(),
            text
        );
        assert!(encode(text).iter().all(|&t| (t as usize) < VOCAB));
        assert_eq!(encode("a≥b"), encode("a?b"));
    }

    #[test]
    fn the_split_is_by_position_into_windows_that_overlap_by_one() {
        let config = DataConfig {
            context: 8,
            ..DataConfig::default()
        };
        let (train, val) = config.load().unwrap();
        let tokens = encode(SHIPPED);
        let cut = (0.9 * tokens.len() as f64) as usize;
        assert_eq!(train[0].0, tokens[..9]);
        assert_eq!(train[1].0, tokens[8..17]);
        assert_eq!(val[0].0, tokens[cut..cut + 9]);
        assert_eq!(train.len(), (cut - 1) / 8);
        assert!(train.iter().chain(&val).all(|w| w.0.len() == 9));
    }
}
