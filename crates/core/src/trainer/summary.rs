//! The model summary printed when `fit` starts (`--trainer.enable_model_summary`), as
//! Lightning's `ModelSummary` callback prints one: each top-level module's name, type and
//! parameter count (and how many of them are frozen, when some are), then trainable, frozen
//! and total counts and the parameters' size.

use std::fmt;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};

/// One top-level module of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRow {
    /// Its field name on the model.
    pub name: String,
    /// Its type (`Linear`, `Vec` ...); empty for a module that holds nothing.
    pub kind: String,
    /// Parameter elements inside it.
    pub params: usize,
    /// Of those, the elements that take no gradient (frozen floats, ints, bools).
    pub frozen: usize,
}

/// What [`summarize`] found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelSummary {
    /// Top-level modules, in the model's order.
    pub rows: Vec<SummaryRow>,
    /// Elements of float parameters that require gradients.
    pub trainable: usize,
    /// Elements of the other parameters (frozen floats, ints, bools).
    pub frozen: usize,
    /// Bytes of all parameters in the dtypes they are stored in.
    pub bytes: usize,
}

/// Counts `model`'s parameters per top-level module.
pub fn summarize<B: Backend, M: Module<B>>(model: &M) -> ModelSummary {
    let mut counter = Counter {
        depth: 0,
        summary: ModelSummary::default(),
    };
    model.visit(&mut counter);
    counter.summary
}

struct Counter {
    depth: usize,
    summary: ModelSummary,
}

impl Counter {
    fn count(&mut self, elements: usize, bytes: usize, trainable: bool) {
        if trainable {
            self.summary.trainable += elements;
        } else {
            self.summary.frozen += elements;
        }
        self.summary.bytes += bytes;
        if self.depth > 0
            && let Some(row) = self.summary.rows.last_mut()
        {
            row.params += elements;
            if !trainable {
                row.frozen += elements;
            }
        }
    }
}

impl<B: Backend> ModuleVisitor<B> for Counter {
    /// burn passes the type of the module that holds `name` (`Struct:Linear` when entering
    /// Linear's `weight`), so a top-level module's type comes with the first entry inside it.
    fn enter_module(&mut self, name: &str, container_type: &str) {
        match self.depth {
            0 => self.summary.rows.push(SummaryRow {
                name: name.to_owned(),
                kind: String::new(),
                params: 0,
                frozen: 0,
            }),
            1 => {
                if let Some(row) = self.summary.rows.last_mut().filter(|r| r.kind.is_empty()) {
                    let kind = container_type.rsplit(':').next().unwrap_or(container_type);
                    row.kind = kind.to_owned();
                }
            }
            _ => {}
        }
        self.depth += 1;
    }

    fn exit_module(&mut self, _: &str, _: &str) {
        self.depth -= 1;
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let tensor = param.val();
        let elements = tensor.shape().num_elements();
        let bytes = elements * tensor.dtype().size();
        self.count(elements, bytes, tensor.is_require_grad());
    }

    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        let tensor = param.val();
        let elements = tensor.shape().num_elements();
        self.count(elements, elements * tensor.dtype().size(), false);
    }

    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
        let elements = param.val().shape().num_elements();
        self.count(elements, elements, false);
    }
}

/// A count as Lightning shows it: `850`, `85.0 K`, `1.2 M`.
fn readable(count: usize) -> String {
    const UNITS: [&str; 4] = ["K", "M", "B", "T"];
    if count < 1000 {
        return count.to_string();
    }
    let mut value = count as f64 / 1000.0;
    let mut unit = 0;
    while value >= 999.95 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

impl fmt::Display for ModelSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let widest = |head: &str, cells: &mut dyn Iterator<Item = usize>| {
            cells.max().unwrap_or(0).max(head.len())
        };
        let name_w = widest("Name", &mut self.rows.iter().map(|r| r.name.len()));
        let kind_w = widest("Type", &mut self.rows.iter().map(|r| r.kind.len()));
        let index_w = self.rows.len().saturating_sub(1).to_string().len();
        // A column of frozen counts when some module holds frozen parameters.
        let frozen = self.rows.iter().any(|r| r.frozen > 0);
        let params_w = widest(
            "Params",
            &mut self.rows.iter().map(|r| readable(r.params).len()),
        );
        let mut header = format!(
            "{:index_w$} | {:name_w$} | {:kind_w$} | {:params_w$}",
            "", "Name", "Type", "Params"
        );
        if frozen {
            header.push_str(" | Frozen");
        }
        let header = header.trim_end().to_owned();
        let rule = "-".repeat(header.len() + 2);
        writeln!(f, "{header}")?;
        writeln!(f, "{rule}")?;
        for (i, row) in self.rows.iter().enumerate() {
            let mut line = format!(
                "{i:index_w$} | {:name_w$} | {:kind_w$} | {:params_w$}",
                row.name,
                row.kind,
                readable(row.params)
            );
            if frozen {
                line.push_str(&format!(" | {}", readable(row.frozen)));
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        writeln!(f, "{rule}")?;
        writeln!(f, "{:<10}Trainable params", readable(self.trainable))?;
        writeln!(f, "{:<10}Non-trainable params", readable(self.frozen))?;
        writeln!(
            f,
            "{:<10}Total params",
            readable(self.trainable + self.frozen)
        )?;
        write!(
            f,
            "{:<10.3}Total estimated model params size (MB)",
            self.bytes as f64 / 1e6
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{SummaryRow, readable, summarize};
    use crate::trainer::freezing::freeze;
    use burn::module::Module;
    use burn::nn::{BatchNorm, BatchNormConfig, Embedding, EmbeddingConfig, Linear, LinearConfig};
    use burn::tensor::backend::Backend;
    use burn_autodiff::Autodiff;
    use burn_flex::{Flex, FlexDevice};

    type B = Autodiff<Flex>;

    #[derive(Module, Debug)]
    struct Net<B: Backend> {
        embed: Embedding<B>,
        head: Linear<B>,
        layers: Vec<Linear<B>>,
        norm: BatchNorm<B>,
    }

    fn row(name: &str, kind: &str, params: usize, frozen: usize) -> SummaryRow {
        SummaryRow {
            name: name.into(),
            kind: kind.into(),
            params,
            frozen,
        }
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
            // Scale and shift (8) train; the running mean and variance (8) take no gradient.
            norm: BatchNormConfig::new(4).init(&device),
        };
        let summary = summarize(&net);
        assert_eq!(
            summary.rows,
            [
                row("embed", "Embedding", 800, 800),
                row("head", "Linear", 36, 0),
                row("layers", "Vec", 40, 0),
                row("norm", "BatchNorm", 16, 8)
            ]
        );
        assert_eq!((summary.trainable, summary.frozen), (84, 808));
        assert_eq!(summary.bytes, 892 * 4, "f32 parameters");
        let text = summary.to_string();
        for expected in [
            "0 | embed  | Embedding | 800    | 800",
            "2 | layers | Vec       | 40     | 0",
            "84        Trainable params",
            "808       Non-trainable params",
            "892       Total params",
            "0.004     Total estimated model params size (MB)",
        ] {
            assert!(text.contains(expected), "no `{expected}` in\n{text}");
        }

        // What `freeze` freezes is counted as frozen under its module.
        let (frozen, _) = freeze(net, "layers", false).unwrap();
        let summary = summarize(&frozen);
        assert_eq!(summary.rows[2], row("layers", "Vec", 40, 40));
        assert_eq!((summary.trainable, summary.frozen), (44, 848));
    }

    #[test]
    fn counts_read_like_lightnings() {
        assert_eq!(readable(0), "0");
        assert_eq!(readable(999), "999");
        assert_eq!(readable(1000), "1.0 K");
        assert_eq!(readable(85_002), "85.0 K");
        assert_eq!(readable(999_999), "1.0 M");
        assert_eq!(readable(1_234_567), "1.2 M");
        assert_eq!(readable(7_000_000_000), "7.0 B");
    }
}
