//! This machine's f32 peak, from what the CPU reports, and the floating-point work of an MLP's
//! training step: the limit a CPU benchmark's throughput is measured against.

/// Peak f32 throughput: cores × f32 lanes per FMA × FMA units × 2 flops × clock.
pub struct CpuPeak {
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// f32 lanes one FMA instruction computes per cycle.
    pub lanes: usize,
    /// FMA instructions issued per cycle per core (2 on every x86 server core since Haswell
    /// and Zen 2; an assumption, the CPU does not report it).
    pub fma_units: usize,
    /// The clock /proc/cpuinfo reports, in GHz.
    pub ghz: f64,
    /// The widest vector instructions found, and how they execute.
    pub isa: &'static str,
}

impl CpuPeak {
    /// Read from /proc/cpuinfo; `None` where it says nothing usable.
    pub fn of_this_machine() -> Option<Self> {
        let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
        let field = |key: &str| {
            info.lines()
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        };
        let flags = field("flags")?;
        let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
        // Zen 3 and Zen 4 (family 25) split a 512-bit FMA into two 256-bit halves.
        let zen4 = field("vendor_id")? == "AuthenticAMD" && field("cpu family")? == "25";
        let (lanes, isa) = if has("avx512f") && zen4 {
            (8, "AVX-512, executed as 2x256-bit")
        } else if has("avx512f") {
            (16, "AVX-512")
        } else if has("fma") {
            (8, "AVX2/FMA")
        } else {
            (4, "SSE, no FMA (counted as if fused)")
        };
        Some(Self {
            cores: std::thread::available_parallelism().ok()?.get(),
            lanes,
            fma_units: 2,
            ghz: field("cpu MHz")?.parse::<f64>().ok()? / 1e3,
            isa,
        })
    }

    /// GFLOP/s at peak.
    pub fn gflops(&self) -> f64 {
        (self.cores * self.lanes * self.fma_units * 2) as f64 * self.ghz
    }

    /// How the peak was computed.
    pub fn describe(&self) -> String {
        format!(
            "{} cores x {} f32 lanes ({}) x {} FMA units x 2 flops x {:.2} GHz",
            self.cores, self.lanes, self.isa, self.fma_units, self.ghz
        )
    }
}

/// Flops of one training step of an MLP with layer widths `widths` (input first) at `batch`:
/// per layer 2·batch·in·out for the forward product and as much for the weights' gradient,
/// and as much again for the input's gradient except at the first layer (the data needs
/// none). Elementwise work and the optimizer are left out (under 1% here).
pub fn mlp_step_flops(widths: &[usize], batch: usize) -> f64 {
    widths
        .windows(2)
        .enumerate()
        .map(|(i, w)| {
            let products = if i == 0 { 2.0 } else { 3.0 };
            products * 2.0 * (batch * w[0] * w[1]) as f64
        })
        .sum()
}
