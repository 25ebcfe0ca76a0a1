//! The stages a run can be: the CLI's subcommands and what the loops are told they run.

/// Which loop to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Train (and validate).
    Fit,
    /// One validation pass.
    Validate,
    /// One test pass.
    Test,
    /// Predictions.
    Predict,
}

impl Stage {
    /// Every stage, as subcommands.
    pub const ALL: [Stage; 4] = [Stage::Fit, Stage::Validate, Stage::Test, Stage::Predict];

    /// The subcommand name.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Fit => "fit",
            Stage::Validate => "validate",
            Stage::Test => "test",
            Stage::Predict => "predict",
        }
    }

    /// One line for `--help`.
    pub fn about(self) -> &'static str {
        match self {
            Stage::Fit => "Train the model (with validation as configured)",
            Stage::Validate => "Run one validation pass",
            Stage::Test => "Run one test pass",
            Stage::Predict => "Run predictions",
        }
    }
}
