//! The embedded PTX modules and the names of the kernels in them, for projects that load the
//! kernels themselves.
//!
//! # How the PTX gets here
//!
//! This crate's build script compiles the device crate `kernels-gpu` (next to `host/` in the
//! repository) with rustc's `nvptx64-nvidia-cuda` target, once per architecture, and the two
//! modules are embedded as text with `include_str!`: [`PTX_SM80`] and [`PTX_SM90A`]. Nothing
//! is read from disk at run time, and no CUDA toolkit is involved: the driver JIT-compiles the
//! PTX when a module is loaded ([`Gpu::new`](crate::Gpu::new) does that for the module of its
//! architecture).
//!
//! # Kernel names
//!
//! [`entry_names`] lists the entry points of a module, straight from its text.
//! The forward-attention kernels are named
//! `flash_fwd_<dtype>_d<D>_<BM>x<BN>w<W>s<S>` (for example `flash_fwd_f16_d128_128x64w8s2`):
//! element type ([`DType::name`]) and the fields of the [`TileConfig`]
//! they are compiled for (padded head dimension, query rows per CTA, key/value rows per stage,
//! warps, pipeline stages). [`kernel_name`] builds the name of one,
//! [`forward_kernel_names`] lists them all (every entry of [`CONFIGS`] for f16 and bf16), and
//! both modules contain all of them. These are the `mma.sync` kernels ([`KernelPath::MmaSync`]).
//!
//! [`PTX_SM90A`] also holds the Hopper kernels of [`KernelPath::Wgmma`], named
//! `flash_fwd_sm90_<dtype>_d<D>_<BM>x<BN>s<S>...`: [`hopper::kernel_name`] and
//! [`hopper::kernel_names`] list them. The remaining entry points (`probe_*`) are tiny
//! instruction tests, not part of the interface.
//!
//! # Kernel ABI (`mma.sync` forward kernels)
//!
//! The simplest correct launch takes its numbers from [`AttentionParams::plan`], which is pure
//! host code (no GPU, no context): it validates the call and returns a [`LaunchPlan`] holding
//! everything below. Plan with [`KernelPath::MmaSync`] or [`KernelPath::Auto`] (whose
//! [`LaunchPlan::kernel`] is always the `mma.sync` kernel); a plan for which
//! [`LaunchPlan::is_wgmma`] is true describes a Hopper kernel, whose ABI differs (below). An
//! `mma.sync` forward kernel is launched with
//!
//! * **one parameter**: a [`FwdParams`] passed **by value** (`#[repr(C)]`, `size_of::<FwdParams>()`
//!   bytes, 8-byte aligned); with the driver API, `kernelParams` is a one-element array holding a pointer to
//!   it ([`LaunchPlan::params`]);
//! * **a 1-D grid** of `batch * heads_q * ceil(seqlen_q / block_m)` CTAs
//!   ([`LaunchPlan::grid`]; `FwdParams::m_blocks` is `ceil(seqlen_q / block_m)`); a call with
//!   no CTA must not be launched at all;
//! * **a 1-D block** of [`TileConfig::threads`] threads (`warps * 32`, [`LaunchPlan::block`]);
//! * **dynamic shared memory** of [`TileConfig::smem_bytes`] bytes ([`LaunchPlan::smem`]), which is
//!   above the default 48 KiB limit for most configurations: set the function's
//!   `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` to that size first (the opt-in), and
//!   check that the device's `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN` allows it.
//!   No static shared memory is used.
//!
//! The kernels trust `FwdParams` completely: they do no bounds checks of their own. Everything
//! [`AttentionParams::plan`] checks (head_dim a multiple of 8 no larger than the kernel's,
//! `group >= 1`, 16-byte aligned bases and strides, extents within the buffers, outputs not
//! overlapping anything else, 4-byte aligned `lse`) is a precondition of the launch. Building `FwdParams` by hand is possible (the field
//! docs say what each holds) but the plan is the supported way.
//!
//! Variable-length (`flash_fwd_varlen_*`, `flash_fwd_varlen_paged_*`) and split-KV
//! (`flash_fwd_split_*`) launches take the same single [`FwdParams`], with device pointers that
//! [`Gpu::launch_forward`] fills in per launch (`cu_seqlens_q`/`cu_seqlens_k` uploaded from the
//! plan's validated [`LaunchPlan::varlen_offsets`](crate::attention::LaunchPlan::varlen_offsets)
//! when the offsets are on the host; offsets already on the GPU are in the plan's parameters,
//! and the kernels clamp them, see `FwdParams`;
//! `split_counters` (zeroed) and `o_accum`/`lse_accum` in a stream-ordered workspace of
//! [`SplitPlan`](crate::attention::SplitPlan)'s sizes). Launch such plans through
//! [`Gpu::launch_forward`] rather than by hand.
//!
//! A sketch with another CUDA crate (cudarc-like pseudocode):
//!
//! ```text
//! let plan = params.plan(&bufs)?;                     // flashrs: validation + geometry
//! if !plan.is_empty() {
//!     let module = ctx.load_module(Ptx::from_src(flashrs::ptx::PTX_SM80))?;
//!     let f = module.load_function(&plan.kernel)?;
//!     f.set_attribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, plan.smem)?;
//!     let cfg = LaunchConfig { grid_dim: (plan.grid, 1, 1), block_dim: (plan.block, 1, 1),
//!                              shared_mem_bytes: plan.smem };
//!     stream.launch(&f, cfg, &[&plan.params])?;        // FwdParams by value
//! }
//! ```
//!
//! # Kernel ABI (Hopper kernels)
//!
//! The `flash_fwd_sm90_*` kernels take four parameters by value: three [`TensorMapParam`]s
//! for Q, K and V (a 128-byte `CUtensorMap` padded to 192 bytes so that it lands 64-byte
//! aligned in parameter space), then the same [`FwdParams`] (with `m_blocks` counted in the
//! Hopper tile height). The maps hold raw
//! device addresses, so they are encoded per launch with `cuTensorMapEncodeTiled`; the
//! geometry is in [`hopper::WgmmaPlan`] and the map layout in the [`hopper`] module docs.
//! Loading these kernels yourself means repeating that encoding: launching through
//! [`Gpu::launch_forward`] or [`Gpu::attention_forward_raw`] does it for you.
//!
//! Most projects do not need any of this: [`Gpu::attention_forward_raw`] takes raw device
//! pointers and a raw `CUstream` and does the validation, the opt-in, the kernel choice
//! (Hopper kernels on H100/H200 where they apply) and the launch.
//!
//! [`DType::name`]: crate::DType::name
//! [`TileConfig`]: crate::attention::TileConfig
//! [`TileConfig::threads`]: crate::attention::TileConfig::threads
//! [`TileConfig::smem_bytes`]: crate::attention::TileConfig::smem_bytes
//! [`CONFIGS`]: crate::attention::config::CONFIGS
//! [`kernel_name`]: crate::attention::kernel_name
//! [`forward_kernel_names`]: crate::attention::forward_kernel_names
//! [`AttentionParams::plan`]: crate::AttentionParams::plan
//! [`LaunchPlan`]: crate::attention::LaunchPlan
//! [`LaunchPlan::params`]: crate::attention::LaunchPlan::params
//! [`LaunchPlan::grid`]: crate::attention::LaunchPlan::grid
//! [`LaunchPlan::block`]: crate::attention::LaunchPlan::block
//! [`LaunchPlan::smem`]: crate::attention::LaunchPlan::smem
//! [`FwdParams`]: crate::attention::FwdParams
//! [`Gpu::attention_forward_raw`]: crate::Gpu::attention_forward_raw
//! [`Gpu::launch_forward`]: crate::Gpu::launch_forward
//! [`KernelPath::MmaSync`]: crate::KernelPath::MmaSync
//! [`KernelPath::Auto`]: crate::KernelPath::Auto
//! [`KernelPath::Wgmma`]: crate::KernelPath::Wgmma
//! [`LaunchPlan::kernel`]: crate::attention::LaunchPlan::kernel
//! [`LaunchPlan::is_wgmma`]: crate::attention::LaunchPlan::is_wgmma
//! [`hopper`]: crate::hopper
//! [`hopper::kernel_name`]: crate::hopper::kernel_name
//! [`hopper::kernel_names`]: crate::hopper::kernel_names
//! [`hopper::WgmmaPlan`]: crate::hopper::WgmmaPlan
//! [`TensorMapParam`]: crate::tensor_map::TensorMapParam

/// PTX for sm_80 and newer (mma.sync path). Built from `kernels-gpu` by this crate's build script.
///
/// `.target sm_80`: it loads on every GPU of compute capability 8.0 or newer (Ampere, Ada,
/// Hopper, Blackwell), which JIT-compile it for themselves.
pub const PTX_SM80: &str = include_str!(concat!(env!("OUT_DIR"), "/sm_80.ptx"));

/// PTX for sm_90a (H100/H200): everything in [`PTX_SM80`] plus the Hopper-only kernels.
///
/// `.target sm_90a`: architecture-specific, it loads on compute capability 9.0 only.
pub const PTX_SM90A: &str = include_str!(concat!(env!("OUT_DIR"), "/sm_90a.ptx"));

/// The kernel entry points (`.entry` directives) of a PTX module, in the module's order.
///
/// ```
/// let names = flashrs::ptx::entry_names(flashrs::ptx::PTX_SM80);
/// assert!(names.iter().any(|n| n.starts_with("flash_fwd_f16_")));
/// ```
pub fn entry_names(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace().skip_while(|w| *w != ".entry");
            words.next()?;
            let name = words.next()?;
            Some(name.split('(').next().unwrap_or(name))
        })
        .filter(|name| !name.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::forward_kernel_names;

    #[test]
    fn every_forward_kernel_is_in_both_modules() {
        for (arch, ptx) in [("sm_80", PTX_SM80), ("sm_90a", PTX_SM90A)] {
            let entries = entry_names(ptx);
            for name in forward_kernel_names() {
                assert!(entries.contains(&name.as_str()), "{name} missing from the {arch} module");
            }
        }
    }

    #[test]
    fn entry_names_parses_entry_directives() {
        let ptx = ".version 8.0\n.visible .entry foo(\n\t.param .u64 foo_param_0\n)\n.entry bar()\n.func baz()\n";
        assert_eq!(entry_names(ptx), ["foo", "bar"]);
    }
}
