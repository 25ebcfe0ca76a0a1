//! The PJRT clients an xla device's programs run on, and where on them.

use std::collections::HashMap;
use std::sync::Mutex;

use super::device::XlaDevice;
use crate::pjrt::{Api, Client, OptionValue};

/// The clients of the process's plugin.
pub enum Clients {
    /// One client, whose devices an [`XlaDevice`] names by index (libtpu, XLA's CUDA plugin).
    Shared(Client),
    /// XLA's CPU plugin, whose devices all run on the same cores: each device span gets a
    /// client of exactly that many devices (`cpu_device_count`), made on first use. A process
    /// that drives one device then runs no threads for three idle ones, which cost a one-device
    /// fit 7–10% on two cores even when a client of four sits unused beside it. Clients live as
    /// long as the process, as the runtime does.
    Cpu {
        /// The plugin, to make clients with.
        api: &'static Api,
        /// The devices the plugin makes when not asked for a count: what ember reports.
        default_count: usize,
        /// The clients made so far, by their device count.
        by_span: Mutex<HashMap<usize, &'static Client>>,
    },
}

/// Where a device's programs run: on `client`, from its device `first` on.
#[derive(Clone, Copy)]
pub struct Placement {
    /// The client the device's buffers and programs live on.
    pub client: &'static Client,
    /// The client's index of the device's first device.
    pub first: usize,
}

impl Clients {
    /// The clients of `api`'s plugin. A CPU plugin's first client, made to learn the platform
    /// and its device count, is closed again: the clients programs run on are made per span.
    pub fn new(api: &'static Api) -> Result<Clients, String> {
        let client = Client::new(api).map_err(|e| e.to_string())?;
        if client.platform() != "cpu" {
            return Ok(Clients::Shared(client));
        }
        Ok(Clients::Cpu {
            api,
            default_count: client.device_count(),
            by_span: Mutex::new(HashMap::new()),
        })
    }

    /// The platform's name, e.g. `cpu`, `cuda`, `tpu`.
    pub fn platform(&self) -> &str {
        match self {
            Clients::Shared(client) => client.platform(),
            Clients::Cpu { .. } => "cpu",
        }
    }

    /// The devices the plugin offers this process.
    pub fn device_count(&self) -> usize {
        match self {
            Clients::Shared(client) => client.device_count(),
            Clients::Cpu { default_count, .. } => *default_count,
        }
    }

    /// The client that runs programs over `span` devices.
    pub fn for_span(&'static self, span: usize) -> Result<&'static Client, String> {
        let (api, by_span) = match self {
            Clients::Shared(client) => return Ok(client),
            Clients::Cpu { api, by_span, .. } => (*api, by_span),
        };
        let mut by_span = by_span.lock().expect("clients lock");
        if let Some(&client) = by_span.get(&span) {
            return Ok(client);
        }
        let count = OptionValue::Int(span as i64);
        let made =
            ember_core::quiet::stderr(|| Client::with_options(api, &[("cpu_device_count", count)]));
        let made = made.map_err(|e| e.to_string())?;
        if made.device_count() < span {
            return Err(format!(
                "XLA's CPU plugin made {} device(s) when asked for {span} (cpu_device_count)",
                made.device_count()
            ));
        }
        let client: &'static Client = Box::leak(Box::new(made));
        tracing::debug!(devices = span, "xla: CPU client made");
        by_span.insert(span, client);
        Ok(client)
    }

    /// Where `device`'s programs run: its own indices on a shared client; on the CPU plugin,
    /// the first devices of the client of its span (every CPU device is the same cores).
    pub fn placement(&'static self, device: &XlaDevice) -> Result<Placement, String> {
        let first = match self {
            Clients::Shared(_) => device.index,
            Clients::Cpu { .. } => 0,
        };
        let client = self.for_span(device.span)?;
        Ok(Placement { client, first })
    }
}
