//! A key-value store for the tests that hand one to a plugin: in memory, counting the calls
//! the plugin makes into it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ember_accel_tpu_xla::pjrt::KeyValueStore;
use ember_core::collective::LocalKeyValueStore;

/// A [`LocalKeyValueStore`] that counts its puts and gets.
#[derive(Default)]
pub struct CountedStore {
    store: LocalKeyValueStore,
    puts: AtomicUsize,
    gets: AtomicUsize,
}

impl CountedStore {
    /// The puts and the gets (waiting or not) made so far.
    pub fn calls(&self) -> (usize, usize) {
        let count = |n: &AtomicUsize| n.load(Ordering::SeqCst);
        (count(&self.puts), count(&self.gets))
    }
}

impl KeyValueStore for CountedStore {
    fn put(&self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        self.store.put(key, value)
    }
    fn get(&self, key: &str, timeout: Duration) -> anyhow::Result<Option<Vec<u8>>> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.store.get(key, timeout)
    }
    fn try_get(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.store.try_get(key)
    }
}
