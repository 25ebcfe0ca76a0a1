//! Where ember finds a PJRT plugin: `EMBER_PJRT_PLUGIN`, else the cache dir `scripts/setup.sh`
//! fills, else the known wheel paths under the active Python's site-packages.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable naming a plugin file (a `.so` exporting `GetPjrtApi`).
pub const PLUGIN_VAR: &str = "EMBER_PJRT_PLUGIN";

/// The variable that moves the cache dir `scripts/setup.sh` puts the CPU plugin in.
pub const CACHE_VAR: &str = "EMBER_XLA_CACHE";

/// The file name setup.sh gives the pinned CPU plugin inside the cache dir.
pub const CACHED_PLUGIN: &str = "xla_cpu_pjrt.so";

/// Plugin files of known wheels, relative to a site-packages dir, best first. libtpu is not
/// here: it is only ever loaded where TPU hardware is visible (see [`tpu_plugin`]).
pub const WHEEL_PLUGINS: &[&str] = &[
    "jax_plugins/xla_cuda13/xla_cuda_plugin.so",
    "jax_plugins/xla_cuda12/xla_cuda_plugin.so",
    "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
    "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
];

/// The cache dir setup.sh fills: `$EMBER_XLA_CACHE`, else `~/.cache/ember-xla`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(CACHE_VAR) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/ember-xla"))
}

/// Where a plugin was looked for and not found: for the error message.
#[derive(Debug, Clone)]
pub struct NotFound {
    /// The cache path tried.
    pub cache: Option<PathBuf>,
    /// The site-packages dirs searched.
    pub site_packages: Vec<PathBuf>,
}

impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no PJRT plugin found: set {PLUGIN_VAR} to a plugin file, or run scripts/setup.sh \
             (it puts the CPU plugin at {}), or install a plugin wheel (xla-cpu-pjrt, \
             jax-cuda12-pjrt) into the active Python; searched ",
            self.cache.as_ref().map_or("<no HOME>".into(), |p| p
                .join(CACHED_PLUGIN)
                .display()
                .to_string())
        )?;
        if self.site_packages.is_empty() {
            write!(f, "no site-packages (no python3 on PATH)")
        } else {
            let dirs: Vec<String> = self
                .site_packages
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            write!(f, "{} for {}", dirs.join(", "), WHEEL_PLUGINS.join(", "))
        }
    }
}

impl std::error::Error for NotFound {}

/// The plugin to load, in the documented order of precedence.
pub fn find() -> Result<PathBuf, NotFound> {
    if let Some(path) = std::env::var_os(PLUGIN_VAR) {
        return Ok(PathBuf::from(path));
    }
    if let Some(libtpu) = tpu_plugin() {
        return Ok(libtpu);
    }
    let cache = cache_dir();
    if let Some(file) = cache.as_ref().map(|dir| dir.join(CACHED_PLUGIN))
        && file.is_file()
    {
        return Ok(file);
    }
    let site_packages = site_packages();
    site_packages
        .iter()
        .find_map(|dir| in_site_packages(dir))
        .ok_or(NotFound {
            cache,
            site_packages,
        })
}

fn in_site_packages(dir: &Path) -> Option<PathBuf> {
    WHEEL_PLUGINS
        .iter()
        .map(|rel| dir.join(rel))
        .find(|path| path.is_file())
}

/// The active Python's site-packages dirs (the first `python3` on PATH, which is the venv's
/// when one is active).
fn site_packages() -> Vec<PathBuf> {
    let script = "import site, sys; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))";
    let Ok(out) = Command::new("python3").args(["-c", script]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .collect()
}

/// libtpu's plugin, but only where TPU hardware is visible (`/dev/accel*` or `/dev/vfio`
/// devices) and the user opted in with `TPU_ACCELERATOR_TYPE` or `EMBER_PJRT_PLUGIN`: off a
/// TPU VM, libtpu's client creation waits on the cloud metadata service and hangs.
pub fn tpu_plugin() -> Option<PathBuf> {
    let visible = std::fs::read_dir("/dev").ok()?.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.starts_with("accel") || name == "vfio"
    });
    if !visible || std::env::var_os("TPU_ACCELERATOR_TYPE").is_none() {
        return None;
    }
    site_packages()
        .iter()
        .map(|dir| dir.join("libtpu/libtpu.so"))
        .find(|p| p.is_file())
}
