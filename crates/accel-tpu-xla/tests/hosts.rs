//! Several hosts' bootstrap on a plugin that has a distributed runtime (XLA's GPU plugin): two
//! clients, made at once by two threads standing in for two processes, swap their devices
//! through ember's key-value store, as PJRT's distributed runtime does between hosts. It needs
//! the GPU plugin (jax's CUDA plugin on a GPU machine: `scripts/gpu-check.sh` runs this test
//! there); with the CPU plugin it skips, and `tests/pjrt.rs` shows what stops that plugin.

mod store;

use std::sync::Arc;

use ember_accel_tpu_xla::pjrt::{Api, Client, KeyValueStore, OptionValue, plugin};
use store::CountedStore;

#[test]
fn the_gpu_plugin_bootstraps_two_nodes_through_a_key_value_store() {
    let path = match plugin::find() {
        Ok(path) => path,
        Err(e) => {
            eprintln!("skip: {e}");
            return;
        }
    };
    let api = Api::load(&path).expect("load plugin");
    let platform = Client::new(api).expect("a client").platform().to_owned();
    if platform == "cpu" {
        eprintln!(
            "skip: {} is XLA's CPU plugin, which has no distributed runtime (tests/pjrt.rs); \
             this test needs XLA's GPU plugin",
            path.display()
        );
        return;
    }
    let store = Arc::new(CountedStore::default());
    let clients: Vec<Client> = std::thread::scope(|scope| {
        let making: Vec<_> = (0..2)
            .map(|node| {
                let store: Arc<dyn KeyValueStore> = store.clone();
                scope.spawn(move || {
                    let options = [
                        ("num_nodes", OptionValue::Int(2)),
                        ("node_id", OptionValue::Int(node)),
                        // Two clients of one GPU in one process: neither takes its memory up front.
                        ("preallocate", OptionValue::Bool(false)),
                    ];
                    Client::with_store(api, &options, store)
                })
            })
            .collect();
        let made = making.into_iter().map(|t| t.join().expect("no panic"));
        made.map(|c| c.expect("a client of two nodes")).collect()
    });
    let (puts, gets) = store.calls();
    eprintln!("{platform}: the bootstrap made {puts} puts and {gets} gets");
    assert!(puts >= 2 && gets >= 1, "{puts} puts, {gets} gets");
    for client in &clients {
        let local = client.device_count();
        assert_eq!(client.global_device_count().unwrap(), 2 * local);
    }
}
