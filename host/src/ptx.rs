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
//! Every kernel entry point is a [`Kernel`]: family (`mma.sync` or Hopper), [`Variant`],
//! element type and tile configuration. Its name is derived from it in one place (its
//! `Display`: `flash_fwd_[<variant>_]<dtype>_d<D>_<BM>x<BN>w<W>s<S>` for `mma.sync` kernels,
//! `flash_fwd_sm90_[varlen_]<dtype>_d<D>_<BM>x<BN>s<S>[_serial]` for Hopper ones), and
//! [`Kernel::all`] lists them: both modules hold every `mma.sync` kernel, [`PTX_SM90A`] also the
//! Hopper ones. The build checks each entry against the configuration it instantiates (a
//! marker in its body, see [`flashrs_abi::kernel`]). [`entry_names`] lists a module's entry
//! points; the others (`probe_*`, `upload_i32`, `bench_spin`) are not part of the interface.
//!
//! # Kernel ABI (`mma.sync` forward kernels)
//!
//! The simplest correct launch takes its numbers from [`AttentionParams::plan`], which is pure
//! host code: it validates the call and returns a [`LaunchPlan`] holding everything below. An
//! `mma.sync` forward kernel is launched with
//!
//! * **one parameter**: a [`FwdParams`] passed **by value** (`#[repr(C)]`,
//!   `size_of::<FwdParams>()` bytes, 8-byte aligned); with the driver API, `kernelParams` is a
//!   one-element array holding a pointer to it ([`LaunchPlan::params`]);
//! * **a 1-D grid** of [`LaunchPlan::grid`] CTAs (`batch * heads_q * ceil(seqlen_q / block_m)`
//!   times the splits); a call with no CTA must not be launched at all;
//! * **a 1-D block** of [`LaunchPlan::block`] threads;
//! * **dynamic shared memory** of [`LaunchPlan::smem`] bytes, which is above the default 48
//!   KiB limit for most configurations: set the function's
//!   `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` to that size first (the opt-in).
//!
//! The kernels trust `FwdParams` completely: they do no bounds checks of their own. Everything
//! the planner checks (head_dim a multiple of 8 no larger than the kernel's, `group >= 1`,
//! 16-byte aligned bases and strides, extents within the buffers, outputs not overlapping
//! anything else, 4-byte aligned `lse`) is a precondition of the launch.
//!
//! Plans with a workspace (split-KV, variable-length with host offsets, persistent Hopper
//! launches: [`LaunchPlan::workspace`], [`LaunchPlan::upload`]) need device memory the launch
//! fills into the parameters; launch those through [`Gpu::launch`] rather than by hand.
//!
//! A sketch with another CUDA crate (cudarc-like pseudocode):
//!
//! ```text
//! let plan = params.plan(&bufs, &Target::A100)?;      // flashrs: validation + kernel + geometry
//! if !plan.is_empty() {
//!     let module = ctx.load_module(Ptx::from_src(flashrs::ptx::PTX_SM80))?;
//!     let f = module.load_function(&plan.kernel.to_string())?;
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
//! Hopper tile height). The maps hold raw device addresses, so they are encoded per launch with
//! `cuTensorMapEncodeTiled` (see [`crate::launch`] for their layout). Launching through
//! [`Gpu::launch`] or [`Gpu::attention_forward_raw`] does it for you.
//!
//! [`Kernel`]: crate::Kernel
//! [`Kernel::all`]: crate::Kernel::all
//! [`Variant`]: crate::Variant
//! [`AttentionParams::plan`]: crate::AttentionParams::plan
//! [`LaunchPlan`]: crate::LaunchPlan
//! [`LaunchPlan::params`]: crate::LaunchPlan::params
//! [`LaunchPlan::grid`]: crate::LaunchPlan::grid
//! [`LaunchPlan::block`]: crate::LaunchPlan::block
//! [`LaunchPlan::smem`]: crate::LaunchPlan::smem
//! [`LaunchPlan::workspace`]: crate::LaunchPlan::workspace
//! [`LaunchPlan::upload`]: crate::LaunchPlan::upload
//! [`FwdParams`]: crate::FwdParams
//! [`Gpu::attention_forward_raw`]: crate::Gpu::attention_forward_raw
//! [`Gpu::launch`]: crate::Gpu::launch
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
    use crate::Kernel;

    #[test]
    fn every_kernel_is_in_the_modules_it_belongs_to() {
        let (sm80, sm90) = (entry_names(PTX_SM80), entry_names(PTX_SM90A));
        for k in Kernel::all() {
            let name = k.to_string();
            assert!(sm90.contains(&name.as_str()), "{name} missing from the sm_90a module");
            assert_eq!(sm80.contains(&name.as_str()), !k.needs_sm90a(), "{name} in the sm_80 module");
        }
        // Hopper kernels carry the register budget setmaxnreg needs at entry (xtask adds it).
        for k in Kernel::all().filter(Kernel::needs_sm90a) {
            let name = k.to_string();
            let header = PTX_SM90A.split(&format!(".entry {name}(")).nth(1).and_then(|r| r.split('{').next()).unwrap();
            assert!(header.contains(&format!(".maxntid {}, 1, 1", k.threads())), "{name}: {header}");
        }
    }

    #[test]
    fn entry_names_parses_entry_directives() {
        let ptx = ".version 8.0\n.visible .entry foo(\n\t.param .u64 foo_param_0\n)\n.entry bar()\n.func baz()\n";
        assert_eq!(entry_names(ptx), ["foo", "bar"]);
    }
}
