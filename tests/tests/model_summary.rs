//! The model summary `fit` prints (`enable_model_summary`): counts per top-level module,
//! trainable and frozen totals, and the parameters' size in their stored dtypes.

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::backend::Backend;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember_core::trainer::summary::{SummaryRow, summarize};

type B = Autodiff<Flex>;

#[derive(Module, Debug)]
struct Net<B: Backend> {
    embed: Embedding<B>,
    head: Linear<B>,
    layers: Vec<Linear<B>>,
}

#[test]
fn counts_per_top_level_module_with_frozen_parameters_apart() {
    let device = FlexDevice;
    let net = Net::<B> {
        // Frozen: 100 x 8 = 800 elements.
        embed: EmbeddingConfig::new(100, 8).init(&device).no_grad(),
        // 8 x 4 + 4 = 36.
        head: LinearConfig::new(8, 4).init(&device),
        // Two of 4 x 4 + 4 = 20.
        layers: vec![
            LinearConfig::new(4, 4).init(&device),
            LinearConfig::new(4, 4).init(&device),
        ],
    };
    let summary = summarize(&net);
    let row = |name: &str, kind: &str, params, frozen| SummaryRow {
        name: name.into(),
        kind: kind.into(),
        params,
        frozen,
    };
    assert_eq!(
        summary.rows,
        [
            row("embed", "Embedding", 800, 800),
            row("head", "Linear", 36, 0),
            row("layers", "Vec", 40, 0)
        ]
    );
    assert_eq!((summary.trainable, summary.frozen), (76, 800));
    assert_eq!(summary.bytes, 876 * 4, "f32 parameters");
    let text = summary.to_string();
    for expected in [
        "0 | embed  | Embedding | 800    | 800",
        "2 | layers | Vec       | 40     | 0",
        "76        Trainable params",
        "800       Non-trainable params",
        "876       Total params",
        "0.004     Total estimated model params size (MB)",
    ] {
        assert!(text.contains(expected), "no `{expected}` in\n{text}");
    }
}
