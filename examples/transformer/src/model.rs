//! A decoder-only transformer over characters: token and position embeddings, pre-norm blocks
//! of causal multi-head self-attention and a GELU MLP, a final layer norm and logits (through
//! the token embedding's transpose when the weights are tied). The layer norms are ember's
//! (`ember::nn`): burn's layer, fused into one kernel each way on `cpu`.

use burn::nn::Initializer;
use burn::nn::attention::{
    MhaInput, MultiHeadAttention, MultiHeadAttentionConfig, generate_autoregressive_mask,
};
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig, Gelu, Linear, LinearConfig};
use burn::prelude::*;
use ember::nn::{LayerNorm, LayerNormConfig};
use serde::{Deserialize, Serialize};

use crate::data::VOCAB;

/// GPT-2's embedding initialisation: burn's default (a standard normal) gives tied logits of
/// standard deviation ~√d_model at the start, which stalls the first hundreds of steps.
const EMBEDDING_INIT: Initializer = Initializer::Normal {
    mean: 0.0,
    std: 0.02,
};

/// The `model` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LmConfig {
    /// Width of the embeddings and of every block.
    pub d_model: usize,
    /// Attention heads per block (`d_model` must be a multiple).
    pub heads: usize,
    /// Blocks.
    pub layers: usize,
    /// The MLP's hidden width as a multiple of `d_model`.
    pub mlp_ratio: usize,
    /// Dropout after the embeddings, on the attention weights and after each block's parts.
    pub dropout: f64,
    /// The longest input the position embedding covers (at least the data's `context`).
    pub max_context: usize,
    /// Logits through the token embedding's transpose instead of a separate output layer.
    pub tie_weights: bool,
    /// AdamW's peak learning rate.
    pub lr: f64,
    /// AdamW's weight decay.
    pub weight_decay: f64,
    /// Steps of linear warm-up to `lr`.
    pub warmup_steps: usize,
    /// Steps of cosine decay after the warm-up, down to `lr × min_lr_ratio`.
    pub decay_steps: usize,
    /// The floor of the decay as a share of `lr`.
    pub min_lr_ratio: f64,
    /// Characters `predict` adds to each prompt.
    pub sample_length: usize,
    /// Softmax temperature when sampling; 0 takes the most likely character.
    pub temperature: f64,
}

impl Default for LmConfig {
    fn default() -> Self {
        Self {
            d_model: 64,
            heads: 4,
            layers: 2,
            mlp_ratio: 4,
            dropout: 0.1,
            max_context: 128,
            tie_weights: true,
            lr: 3e-3,
            weight_decay: 0.01,
            warmup_steps: 30,
            decay_steps: 230,
            min_lr_ratio: 0.1,
            sample_length: 200,
            temperature: 0.8,
        }
    }
}

impl LmConfig {
    /// Multiply-adds of the forward pass over one window of `context` tokens, counted from
    /// the layer shapes: per token and block the four attention projections (4·d²), the
    /// scores and their weighted sum over the window (2·context·d: the masked half is computed
    /// too) and the MLP (2·mlp_ratio·d²), then the logits (VOCAB·d). Embeddings, norms and
    /// activations are element-wise and left out.
    pub fn forward_macs(&self, context: usize) -> u64 {
        let (d, t) = (self.d_model as u64, context as u64);
        let block = 4 * d * d + 2 * t * d + 2 * self.mlp_ratio as u64 * d * d;
        t * (self.layers as u64 * block + VOCAB as u64 * d)
    }
}

/// One pre-norm block: `x + attention(norm(x))`, then `x + mlp(norm(x))`.
#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    attention_norm: LayerNorm<B>,
    attention: MultiHeadAttention<B>,
    mlp_norm: LayerNorm<B>,
    expand: Linear<B>,
    contract: Linear<B>,
    activation: Gelu,
    dropout: Dropout,
}

impl<B: Backend> Block<B> {
    fn new(config: &LmConfig, device: &B::Device) -> Self {
        let (d, hidden) = (config.d_model, config.d_model * config.mlp_ratio);
        Self {
            attention_norm: LayerNormConfig::new(d).init(device),
            attention: MultiHeadAttentionConfig::new(d, config.heads)
                .with_dropout(config.dropout)
                .init(device),
            mlp_norm: LayerNormConfig::new(d).init(device),
            expand: LinearConfig::new(d, hidden).init(device),
            contract: LinearConfig::new(hidden, d).init(device),
            activation: Gelu::new(),
            dropout: DropoutConfig::new(config.dropout).init(),
        }
    }

    fn forward(&self, x: Tensor<B, 3>, causal: Tensor<B, 3, Bool>) -> Tensor<B, 3> {
        let input = MhaInput::self_attn(self.attention_norm.forward(x.clone())).mask_attn(causal);
        let x = x + self.dropout.forward(self.attention.forward(input).context);
        let hidden = self
            .activation
            .forward(self.expand.forward(self.mlp_norm.forward(x.clone())));
        x + self.dropout.forward(self.contract.forward(hidden))
    }
}

/// The character-level language model.
#[derive(Module, Debug)]
pub struct CharLm<B: Backend> {
    tokens: Embedding<B>,
    positions: Embedding<B>,
    blocks: Vec<Block<B>>,
    norm: LayerNorm<B>,
    /// The output layer; `None` when the logits use the token embedding.
    output: Option<Linear<B>>,
    dropout: Dropout,
    /// How `predict` samples.
    #[module(skip)]
    pub sampling: Sampling,
}

/// How `predict` continues a prompt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Characters to add.
    pub length: usize,
    /// Softmax temperature; 0 takes the most likely character.
    pub temperature: f64,
    /// The most characters the model sees (the position embedding's size).
    pub max_context: usize,
}

impl<B: Backend> CharLm<B> {
    /// A freshly initialised model.
    pub fn new(config: &LmConfig, device: &B::Device) -> Self {
        Self {
            tokens: EmbeddingConfig::new(VOCAB, config.d_model)
                .with_initializer(EMBEDDING_INIT)
                .init(device),
            positions: EmbeddingConfig::new(config.max_context, config.d_model)
                .with_initializer(EMBEDDING_INIT)
                .init(device),
            blocks: (0..config.layers)
                .map(|_| Block::new(config, device))
                .collect(),
            norm: LayerNormConfig::new(config.d_model).init(device),
            output: (!config.tie_weights)
                .then(|| LinearConfig::new(config.d_model, VOCAB).init(device)),
            dropout: DropoutConfig::new(config.dropout).init(),
            sampling: Sampling {
                length: config.sample_length,
                temperature: config.temperature,
                max_context: config.max_context,
            },
        }
    }

    /// Logits `[n, t, VOCAB]` for token ids `[n, t]` (`t` at most `max_context`).
    pub fn forward(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [n, t] = ids.dims();
        let device = ids.device();
        let positions = Tensor::<B, 1, Int>::arange(0..t as i64, &device).unsqueeze::<2>();
        let x = self.tokens.forward(ids) + self.positions.forward(positions);
        let causal = generate_autoregressive_mask::<B>(n, t, &device);
        // Under activation checkpointing every block but the last is recomputed in the backward
        // pass: the last one's activations are the first the backward pass uses, so keeping
        // them costs no more memory at the peak than recomputing it would.
        let last = self.blocks.len().saturating_sub(1);
        let x = (self.blocks.iter().enumerate()).fold(self.dropout.forward(x), |x, (i, block)| {
            let causal = causal.clone();
            match i < last {
                true => ember::nn::recompute(block, x, move |b, x| b.forward(x, causal.clone())),
                false => block.forward(x, causal),
            }
        });
        let x = self.norm.forward(x);
        match &self.output {
            Some(output) => output.forward(x),
            None => x.matmul(self.tokens.weight.val().transpose().unsqueeze::<3>()),
        }
    }

    /// The mean cross-entropy of predicting `targets` `[n, t]` from `inputs` `[n, t]`.
    pub fn loss(&self, inputs: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        let logits = self.forward(inputs);
        let [n, t, v] = logits.dims();
        ember::metrics::cross_entropy(logits.reshape([n * t, v]), targets.reshape([n * t]))
    }
}
