//! Callbacks by name: what builds one registered by name, and those built from a config's
//! specs held for the Trainer that takes them ([`BuiltCallbacks`]).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use serde_json::Value;

use super::Callback;

/// Builds a callback registered by name from its `init_args` (a table; `{}` when none).
pub type CallbackFactory = Arc<dyn Fn(&Value) -> anyhow::Result<Box<dyn Callback>>>;

/// Callbacks built from the trainer flags at plan time (where a bad one is refused), held for
/// the Trainer that runs the job: the first to [`take`](Self::take) them gets them, so each is
/// constructed once. Clones share them.
#[derive(Clone, Default)]
pub struct BuiltCallbacks(Rc<RefCell<Held>>);

/// What a [`BuiltCallbacks`] holds: the callbacks, until taken.
type Held = Option<Vec<Box<dyn Callback>>>;

impl BuiltCallbacks {
    /// Holds `callbacks` for the Trainer.
    pub fn new(callbacks: Vec<Box<dyn Callback>>) -> Self {
        Self(Rc::new(RefCell::new(Some(callbacks))))
    }

    /// The callbacks, unless a Trainer took them already.
    pub fn take(&self) -> Option<Vec<Box<dyn Callback>>> {
        self.0.borrow_mut().take()
    }
}

impl std::fmt::Debug for BuiltCallbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.0.borrow() {
            Some(callbacks) => write!(f, "BuiltCallbacks({} held)", callbacks.len()),
            None => write!(f, "BuiltCallbacks(taken)"),
        }
    }
}
