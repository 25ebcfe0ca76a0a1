//! The values logged with `prog_bar`, read from the device only when something looks at them.
//!
//! Lightning reads its progress-bar metrics when the bar redraws, not at every step: a step's
//! loss stays on the device until then, so a run without a bar never waits for the device to
//! report a step. [`ProgressBarMetrics`] does the same for ember: the progress bar (at its
//! refresh rate) or a callback that calls [`get`](ProgressBarMetrics::get) reads a value,
//! once, and it is kept.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// A logged number: known, or how to read it from the device; read at most once.
#[derive(Clone)]
pub struct LazyValue(Rc<RefCell<Slot>>);

enum Slot {
    Read(f64),
    Unread(Box<dyn FnOnce() -> f64>),
}

impl LazyValue {
    /// A value already on the host.
    pub fn ready(x: f64) -> Self {
        LazyValue(Rc::new(RefCell::new(Slot::Read(x))))
    }

    /// A value `read` fetches when it is first asked for.
    pub fn unread(read: impl FnOnce() -> f64 + 'static) -> Self {
        LazyValue(Rc::new(RefCell::new(Slot::Unread(Box::new(read)))))
    }

    /// The value, read now if it was not yet.
    pub fn get(&self) -> f64 {
        let mut slot = self.0.borrow_mut();
        let x = match std::mem::replace(&mut *slot, Slot::Read(f64::NAN)) {
            Slot::Read(x) => x,
            Slot::Unread(read) => read(),
        };
        *slot = Slot::Read(x);
        x
    }
}

impl std::fmt::Debug for LazyValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self.0.borrow() {
            Slot::Read(x) => write!(f, "{x}"),
            Slot::Unread(_) => write!(f, "<unread>"),
        }
    }
}

/// The latest value of each name logged with `prog_bar` (step values, and the epoch values the
/// loops publish), read from the device when first looked at.
#[derive(Debug, Clone, Default)]
pub struct ProgressBarMetrics(BTreeMap<String, LazyValue>);

impl ProgressBarMetrics {
    /// The value logged as `name`, read now if it was not yet.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.0.get(name).map(LazyValue::get)
    }

    /// Every value by name, each read now if it was not yet.
    pub fn values(&self) -> BTreeMap<String, f64> {
        (self.0.iter())
            .map(|(name, value)| (name.clone(), value.get()))
            .collect()
    }

    /// The names, without reading anything.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Whether nothing was logged with `prog_bar`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Takes the values a step logged (moving them out of `step`).
    pub(crate) fn append(&mut self, step: &mut BTreeMap<String, LazyValue>) {
        self.0.append(step);
    }

    /// Adds values already on the host (epoch values).
    pub(crate) fn extend(&mut self, values: &BTreeMap<String, f64>) {
        (self.0).extend(
            values
                .iter()
                .map(|(n, x)| (n.clone(), LazyValue::ready(*x))),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_value_is_read_when_first_asked_for_and_only_once() {
        let reads = Rc::new(Cell::new(0));
        let counted = Rc::clone(&reads);
        let mut metrics = ProgressBarMetrics::default();
        let mut step = BTreeMap::from([(
            "loss".to_owned(),
            LazyValue::unread(move || {
                counted.set(counted.get() + 1);
                0.5
            }),
        )]);
        metrics.append(&mut step);
        metrics.extend(&BTreeMap::from([("val_acc".to_owned(), 0.9)]));
        assert_eq!(reads.get(), 0, "nothing read before anyone looks");
        assert_eq!(metrics.names().collect::<Vec<_>>(), ["loss", "val_acc"]);
        assert_eq!(
            format!("{metrics:?}"),
            r#"ProgressBarMetrics({"loss": <unread>, "val_acc": 0.9})"#
        );
        assert_eq!(metrics.get("loss"), Some(0.5));
        assert_eq!(metrics.values()["loss"], 0.5);
        assert_eq!(metrics.clone().get("loss"), Some(0.5));
        assert_eq!(reads.get(), 1);
        assert_eq!(metrics.get("missing"), None);
    }
}
