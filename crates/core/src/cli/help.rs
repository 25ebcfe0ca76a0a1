//! The `--help` epilogue: what is registered, by name, and the application's config keys.

use std::fmt::Write as _;

use serde_json::Value;

use crate::catalog::{Catalog, PluginKind};
use crate::error::list;

/// The `--help` epilogue: registered accelerators and strategies, and the app's config keys.
pub(super) fn names_help(catalog: &Catalog, defaults: &Value) -> String {
    let accelerators = [
        (
            "auto",
            "the best available one (xla on a TPU VM > cuda > wgpu > cpu)",
        ),
        (
            "gpu",
            "the best available GPU accelerator (cuda, else wgpu)",
        ),
    ]
    .into_iter()
    .chain(catalog.accelerators.iter().map(|a| (a.name, a.description)));
    let strategies = std::iter::once(("auto", "single_device for one process, else ddp")).chain(
        catalog
            .strategies
            .iter()
            .map(|s| (s.name.as_str(), s.description.as_str())),
    );
    let precisions = catalog.plugins.iter().filter_map(|p| match p.kind {
        PluginKind::Precision(_) => Some((p.name.as_str(), p.description.as_str())),
        PluginKind::CheckpointIo => None,
    });
    let environments = std::iter::once(("auto", "detect, in this order:")).chain(
        catalog
            .cluster_environments
            .iter()
            .map(|e| (e.name(), e.description())),
    );
    let checkpoint_ios = catalog
        .plugins
        .iter()
        .filter(|p| p.kind == PluginKind::CheckpointIo)
        .map(|p| (p.name.as_str(), p.description.as_str()));
    let mut text = String::new();
    for (title, rows) in [
        (
            "Accelerators (--trainer.accelerator):",
            accelerators.collect::<Vec<_>>(),
        ),
        ("Strategies (--trainer.strategy):", strategies.collect()),
        (
            "Precisions (--trainer.precision, or a plugin in --trainer.plugins):",
            precisions.collect(),
        ),
        (
            "Cluster environments (--trainer.cluster_environment, or --trainer.plugins):",
            environments.collect(),
        ),
        (
            "Checkpoint IO plugins (--trainer.plugins):",
            checkpoint_ios.collect(),
        ),
        (
            "Callbacks (--trainer.callbacks; settings as {class_path, init_args}):",
            catalog
                .callbacks
                .iter()
                .map(|(n, d)| (n.as_str(), d.as_str()))
                .collect(),
        ),
        (
            "Loggers (--trainer.logger; true is csv):",
            catalog
                .loggers
                .iter()
                .map(|(n, d)| (n.as_str(), d.as_str()))
                .collect(),
        ),
    ] {
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(text, "{title}");
        let width = rows
            .iter()
            .map(|(name, _)| name.len() + 1)
            .fold(14, usize::max);
        for (name, description) in rows {
            let _ = writeln!(text, "  {name:<width$}{description}");
        }
        text.push('\n');
    }
    for section in ["model", "data"] {
        let keys: Vec<&str> = defaults[section]
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "--{section}.KEY=VALUE sets the {section} section; keys: {}",
            list(keys)
        );
    }
    text.push_str("\nEMBER_INVENTORY=cuda=4,wgpu=1 replaces hardware probing (for --print-plan).");
    text
}
