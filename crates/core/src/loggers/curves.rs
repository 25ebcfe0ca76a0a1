//! `curves.png`: a run's `metrics.csv` drawn as one panel per metric family (loss, accuracy,
//! learning rate, then any other metric), train and validation values on the same axes, x in
//! optimizer steps. Written beside metrics.csv when `fit` ends; drawn with plotters, so no
//! Python is needed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, bail};
use plotters::prelude::*;

use super::csv_logger::{METRICS_FILE, read_rows};

/// Name of the picture.
pub const CURVES_FILE: &str = "curves.png";
/// The panels that come first, in this order.
const FIRST_FAMILIES: [&str; 3] = ["loss", "accuracy", "learning rate"];
/// Pixels per panel.
const PANEL: (u32, u32) = (900, 320);

/// Fonts tried in turn for the labels (Debian's, Fedora's and macOS's usual sans-serif).
const FONT_PATHS: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// One metric's values by step.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

/// The panel a metric belongs to: `train_loss_step` and `val_loss` both go to `loss`.
fn family(name: &str) -> String {
    let base = ["train_", "val_", "test_"]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    let base = ["_step", "_epoch"]
        .iter()
        .find_map(|s| base.strip_suffix(s))
        .unwrap_or(base);
    if base.contains("loss") {
        "loss".into()
    } else if base.contains("acc") {
        "accuracy".into()
    } else if base.starts_with("lr") || base.contains("learning_rate") {
        "learning rate".into()
    } else {
        base.into()
    }
}

/// Reads metrics.csv into series, by name (the `epoch` column is not a curve; non-finite
/// values are left out).
fn read_series(csv_path: &Path) -> anyhow::Result<Vec<Series>> {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (step, metrics) in read_rows(csv_path)? {
        for (name, value) in metrics.into_iter().filter(|(_, v)| v.is_finite()) {
            series.entry(name).or_default().push((step as f64, value));
        }
    }
    Ok(series
        .into_iter()
        .filter(|(name, _)| name != "epoch")
        .map(|(name, points)| Series { name, points })
        .collect())
}

/// Registers the first font found as plotters' `sans-serif`; false when there is none.
pub(crate) fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        FONT_PATHS.iter().any(|path| {
            std::fs::read(path).is_ok_and(|bytes| {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
            })
        })
    })
}

/// A range that contains `values` with a margin, and is never empty.
pub(crate) fn padded(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(f64::NEG_INFINITY, f64::max);
    let pad = if hi > lo {
        (hi - lo) * 0.05
    } else if lo != 0.0 {
        lo.abs() * 0.1
    } else {
        1.0
    };
    (lo - pad, hi + pad)
}

/// Draws `<log_dir>/metrics.csv` into `<log_dir>/curves.png`.
pub fn write(log_dir: &Path) -> anyhow::Result<()> {
    let series = read_series(&log_dir.join(METRICS_FILE))?;
    if series.is_empty() {
        bail!("{} holds no metric to draw", METRICS_FILE);
    }
    if !font_ready() {
        bail!(
            "no font for the labels (looked for {}; Debian's fonts-dejavu-core has one)",
            FONT_PATHS[0]
        );
    }
    // Loss, accuracy and learning rate first, then the other families by name.
    let mut panels: BTreeMap<(usize, String), Vec<&Series>> = BTreeMap::new();
    for s in &series {
        let name = family(&s.name);
        let rank = FIRST_FAMILIES
            .iter()
            .position(|f| *f == name)
            .unwrap_or(FIRST_FAMILIES.len());
        panels.entry((rank, name)).or_default().push(s);
    }
    let path = log_dir.join(CURVES_FILE);
    let size = (PANEL.0, PANEL.1 * panels.len() as u32);
    let root = BitMapBackend::new(&path, size).into_drawing_area();
    root.fill(&WHITE)?;
    for (area, ((_, title), members)) in root.split_evenly((panels.len(), 1)).iter().zip(&panels) {
        draw_panel(area, title, members)?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    members: &[&Series],
) -> anyhow::Result<()> {
    let all = members.iter().flat_map(|s| s.points.iter());
    let (x0, x1) = padded(all.clone().map(|p| p.0));
    let (y0, y1) = padded(all.map(|p| p.1));
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(76)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    chart.configure_mesh().x_desc("step").draw()?;
    for (i, s) in members.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        // Single values (one validation pass) show as dots.
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::family;

    #[test]
    fn train_and_val_metrics_share_a_family() {
        assert_eq!(family("train_loss_step"), "loss");
        assert_eq!(family("val_loss"), "loss");
        assert_eq!(family("val_acc"), "accuracy");
        assert_eq!(family("train_accuracy_epoch"), "accuracy");
        assert_eq!(family("lr-Adam"), "learning rate");
        assert_eq!(family("grad_norm"), "grad_norm");
    }
}
