//! The GPU a plan is made for: which PTX module it runs and the limits kernel selection must
//! respect. Planning needs no GPU: [`Target`] has presets for the architectures the build
//! knows, and [`crate::Gpu::target`] reads a real one.

/// Which PTX module a GPU runs.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Ampere and newer without Hopper's architecture-specific features: the `mma.sync`
    /// kernels.
    Sm80,
    /// Hopper (compute capability 9.0): the `mma.sync` kernels and the wgmma/TMA ones.
    Sm90a,
}

impl Arch {
    /// The module a GPU of compute capability `major.minor` runs: sm_90a code runs on 9.0
    /// only, later GPUs compile the portable module.
    pub fn for_compute_capability(major: u32, minor: u32) -> Arch {
        if (major, minor) == (9, 0) { Arch::Sm90a } else { Arch::Sm80 }
    }
}

/// A GPU as kernel selection sees it: a preset, [`Target::sm`], or [`crate::Gpu::target`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The module it runs.
    pub arch: Arch,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Streaming multiprocessors: split-KV fills their CTA slots, persistent launches take one
    /// CTA each.
    pub sm_count: u32,
    /// The most dynamic shared memory one CTA may opt in to, bytes: every chosen kernel fits.
    pub max_smem_per_block: u32,
    /// Shared memory per SM, bytes (for the CTAs-per-SM estimate when no GPU is at hand).
    pub smem_per_sm: u32,
}

impl Target {
    /// A100 (sm_80): 108 SMs, 163 KB per CTA.
    pub const A100: Target = Target::sm(8, 0, 108);
    /// A10 (sm_86): 72 SMs, 99 KB per CTA (as the RTX 30 series).
    pub const A10: Target = Target::sm(8, 6, 72);
    /// L4 (sm_89): 58 SMs, 99 KB per CTA (as the L40 and the RTX 40 series).
    pub const L4: Target = Target::sm(8, 9, 58);
    /// H100 SXM (sm_90a): 132 SMs, 227 KB per CTA.
    pub const H100: Target = Target::sm(9, 0, 132);
    /// The presets, one per shared-memory class the build knows.
    pub const PRESETS: [Target; 4] = [Target::A100, Target::A10, Target::L4, Target::H100];

    /// A GPU of compute capability `major.minor` with `sm_count` SMs, its shared memory limits
    /// from NVIDIA's tables (a real GPU's come from the driver: [`crate::Gpu::target`]).
    pub const fn sm(major: u32, minor: u32, sm_count: u32) -> Target {
        // KB per CTA (opt-in) and per SM; the driver keeps 1 KB of each SM's for itself.
        let (per_block_kb, per_sm_kb) = match (major, minor) {
            (8, 0) | (8, 7) => (163, 164),
            (9, 0) | (10, _) => (227, 228),
            (8, _) | (12, _) => (99, 100),
            _ => (48, 64),
        };
        let arch = if major == 9 && minor == 0 { Arch::Sm90a } else { Arch::Sm80 };
        Target { arch, compute_capability: (major, minor), sm_count, max_smem_per_block: per_block_kb * 1024, smem_per_sm: per_sm_kb * 1024 }
    }

    /// CTAs of a kernel with `threads` threads and `smem` bytes of dynamic shared memory that
    /// one SM holds at once, estimated without the GPU (its occupancy calculator also knows
    /// the registers): shared memory allows `smem_per_sm / (smem + 1 KB)`, and registers (the
    /// kernels use more than 128 per thread) at most `65536 / (threads * 256)`.
    pub fn resident_ctas(&self, threads: usize, smem: usize) -> usize {
        let by_smem = self.smem_per_sm as usize / (smem + 1024);
        let by_regs = 65536 / (threads * 256).max(1);
        by_smem.min(by_regs).max(1)
    }
}
