//! The device inventory: how many devices of each accelerator this machine has.
//!
//! Normally probed from the hardware; `EMBER_INVENTORY=cuda=4,wgpu=1` replaces probing, to
//! test selection rules anywhere or to plan a cluster run from a laptop. The host CPU is always
//! there: `cpu` and every other accelerator of kind cpu (e.g. `tch-cpu`) have one device.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::accelerator::AcceleratorKind;
use crate::catalog::Catalog;
use crate::cluster::Env;
use crate::error::{FlagError, PlanResult};

/// The variable that injects an inventory.
pub const INVENTORY_VAR: &str = "EMBER_INVENTORY";
/// The accelerator that is always available.
pub const CPU: &str = "cpu";
/// Largest device count an injected inventory may name.
pub const MAX_INJECTED_DEVICES: usize = 4096;

/// Device counts per accelerator name.
///
/// A probed inventory asks an accelerator's driver only when that accelerator's count is first
/// needed, so `--trainer.accelerator=cpu` never loads the CUDA or Vulkan libraries.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    source: Source,
}

/// An accelerator's probe and its answer, once asked.
type Probe = (fn() -> usize, OnceLock<usize>);

#[derive(Debug, Clone)]
enum Source {
    Injected {
        counts: BTreeMap<String, usize>,
        spec: String,
    },
    Probed(BTreeMap<String, Probe>),
}

impl Default for Source {
    fn default() -> Self {
        Source::Probed(BTreeMap::new())
    }
}

impl Inventory {
    /// Uses `EMBER_INVENTORY` when it is set, else probes every registered accelerator.
    pub fn from_env(env: &Env, catalog: &Catalog) -> PlanResult<Self> {
        match env.get(INVENTORY_VAR) {
            Some(spec) => Self::parse(spec, catalog),
            None => Ok(Self::probe(catalog)),
        }
    }

    /// Asks the registered accelerators how many devices they see, each when first needed.
    pub fn probe(catalog: &Catalog) -> Self {
        let probes = catalog
            .accelerators
            .iter()
            .map(|a| (a.name.to_owned(), (a.probe, OnceLock::new())))
            .collect();
        Self {
            source: Source::Probed(probes),
        }
    }

    /// Parses an injected inventory such as `cuda=4,wgpu=1` (accelerators not named have none).
    pub fn parse(spec: &str, catalog: &Catalog) -> PlanResult<Self> {
        let err = |m: String| FlagError::new(INVENTORY_VAR, spec, m);
        // Host-CPU accelerators other than `cpu` (which `count` answers itself) have their one
        // device whatever the spec says.
        let mut counts: BTreeMap<String, usize> = catalog
            .accelerators
            .iter()
            .filter(|a| a.name != CPU && host_cpu(catalog, a.name))
            .map(|a| (a.name.to_owned(), 1))
            .collect();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, count) = entry.split_once('=').ok_or_else(|| {
                err(format!(
                    "entry `{entry}` is not NAME=COUNT (e.g. cuda=4,wgpu=1)"
                ))
            })?;
            let name = name.trim().to_ascii_lowercase();
            if name == CPU || host_cpu(catalog, &name) {
                return Err(err(format!(
                    "{name} runs on the host CPU, which is always available and takes no count; \
                     list only other accelerators"
                )));
            }
            if catalog.accelerator(&name).is_none() {
                let known: Vec<&str> = catalog
                    .accelerators
                    .iter()
                    .map(|a| a.name)
                    .filter(|n| *n != CPU && !host_cpu(catalog, n))
                    .collect();
                return Err(err(format!(
                    "`{name}` is not a registered accelerator; known: {}",
                    crate::error::list(known)
                )));
            }
            let count: usize = count
                .trim()
                .parse()
                .ok()
                .filter(|c| *c <= MAX_INJECTED_DEVICES)
                .ok_or_else(|| {
                    err(format!(
                        "count for `{name}` must be an integer in 0..={MAX_INJECTED_DEVICES}"
                    ))
                })?;
            if counts.insert(name.clone(), count).is_some() {
                return Err(err(format!("`{name}` is listed twice")));
            }
        }
        Ok(Self {
            source: Source::Injected {
                counts,
                spec: spec.to_owned(),
            },
        })
    }

    /// Devices of accelerator `name` (cpu: always 1).
    pub fn count(&self, name: &str) -> usize {
        if name == CPU {
            return 1;
        }
        match &self.source {
            Source::Injected { counts, .. } => counts.get(name).copied().unwrap_or(0),
            Source::Probed(probes) => probes
                .get(name)
                .map_or(0, |(probe, count)| *count.get_or_init(probe)),
        }
    }

    /// Whether accelerator `name` has at least one device.
    pub fn is_available(&self, name: &str) -> bool {
        self.count(name) > 0
    }

    /// The `EMBER_INVENTORY` text this inventory came from, if it was injected.
    pub fn injected_spec(&self) -> Option<&str> {
        match &self.source {
            Source::Injected { spec, .. } => Some(spec),
            Source::Probed(_) => None,
        }
    }
}

/// Whether accelerator `name` is registered and runs on the host CPU (always one device).
fn host_cpu(catalog: &Catalog, name: &str) -> bool {
    catalog
        .accelerator(name)
        .is_some_and(|a| a.kind == AcceleratorKind::Cpu)
}
