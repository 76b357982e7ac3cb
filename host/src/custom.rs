//! Kernels of the caller's own device crate: the forward kernel bodies and the backward's main
//! kernel body of `kernels-gpu` instantiated with the caller's own score modification or mask
//! (a learned relative-position bias, a document mask read from memory), launched by this
//! library's planner in place of the shipped kernels of the same identity.
//!
//! # From a trait implementation to a launch
//!
//! 1. **Device crate.** A `no_std` crate depends on `kernels-gpu` with `default-features =
//!    false` (so that it compiles none of the shipped entry points), implements
//!    `kernels_gpu::mods::ScoreMod` (what each score becomes, and its derivative) or
//!    `MaskMod` (which keys a row sees), and declares its entry points with
//!    `kernels_gpu::mma_forward_kernel!` (every GPU), `sm90_forward_kernel!` (sm_90a) and, for
//!    training, `mma_backward_kernel!` (the backward's main kernel, dQ in rows or, on sm_90a,
//!    in fragment order). Each names a configuration of the ABI's tables
//!    ([`flashrs_abi::Variant::configs_of`], [`flashrs_abi::sm90::CONFIGS`],
//!    [`flashrs_abi::bwd::BWD_MODS`]) and carries the marker of the [`Kernel`] it stands for
//!    ([`flashrs_abi::kernel`], [`Kernel::replaceable`]). Its modification reads its data from
//!    [`flashrs_abi::ModParams::user`].
//! 2. **Build.** `cargo xtask build-ptx --crate DIR` compiles it with the pinned nightly for
//!    sm_80 and sm_90a, with the checks the shipped kernels pass (no unresolved calls, no
//!    spills, markers naming kernels of the ABI's tables), into `target/ptx/<lib>/<arch>.ptx`.
//! 3. **Load.** [`Gpu::load_custom_kernels`] loads one of those modules and reads each entry's
//!    marker: entries are found by what they instantiate, not by their names.
//! 4. **Call.** A call passes the data with [`crate::AttentionParamsBuilder::user_data`] and goes
//!    through [`Gpu::attention_forward_custom`] (typed buffers) or [`Gpu::plan_forward`] and
//!    [`Gpu::launch_custom`] (the raw ABI); the backward through
//!    [`Gpu::attention_backward_custom`] or [`crate::AttentionParams::plan_backward`] and
//!    [`Gpu::launch_backward_custom`]. It is validated and planned as any call with
//!    modifications, so its window, softcap, ALiBi and sinks reach the caller's kernels too
//!    (which apply them if their modification composes `Builtin`); the launch takes the
//!    caller's entry for the planned [`Kernel`], and fails with [`Error::CustomKernels`] naming
//!    it where the module has none. A module without Hopper entries has its calls planned on
//!    `mma.sync` unless the call forces a path.
//!
//! The shipped kernels never read the user data: a call with it that reaches them
//! ([`Gpu::launch`], [`Gpu::attention_forward`], [`Gpu::launch_backward`]) is refused. The
//! backward's prep and dQ kernels are always the shipped ones (they apply no modification),
//! and its main kernel is an `mma.sync` one: the Hopper backward takes no modifications yet.
//!
//! `host/examples/relative_bias.rs` and its device crate `host/examples/relative_bias_kernels`
//! go through the four steps.
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::marker::PhantomData;

use flashrs_abi::Kernel;
use flashrs_abi::kernel::marked_entries;

use crate::device::{Functions, Gpu, LoadedModule};
use crate::driver::Handle;
use crate::error::{Error, Result};

/// A module of the caller's own kernels, loaded in a [`Gpu`]'s context, which it cannot
/// outlive (see the module docs). Unloaded on drop, on any thread.
pub struct CustomKernels<'g> {
    /// The entry name of each kernel the module stands in for.
    entries: HashMap<Kernel, CString>,
    functions: Functions,
    /// The context it was loaded in, as an address.
    context: usize,
    module: LoadedModule,
    gpu: PhantomData<&'g Gpu>,
}

impl std::fmt::Debug for CustomKernels<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomKernels").field("entries", &self.entries).finish_non_exhaustive()
    }
}

impl CustomKernels<'_> {
    /// The kernels the module stands in for.
    pub fn kernels(&self) -> impl Iterator<Item = Kernel> + '_ {
        self.entries.keys().copied()
    }

    /// The module's entry for `kernel`, by name.
    pub fn entry(&self, kernel: Kernel) -> Option<&str> {
        self.entries.get(&kernel).and_then(|n| n.to_str().ok())
    }

    /// True when the module has a Hopper (sm_90a) kernel.
    pub fn has_hopper(&self) -> bool {
        self.entries.keys().any(Kernel::needs_sm90a)
    }

    /// The function of the module's entry for `kernel`, opted in to `smem` bytes of dynamic
    /// shared memory, for a launch on `gpu`.
    pub(crate) fn function(&self, gpu: &Gpu, kernel: Kernel, smem: u32) -> Result<Handle> {
        if self.context != gpu.raw_context() as usize {
            return Err(Error::WrongContext("the custom kernels were loaded for another GPU's context".into()));
        }
        let name = self.entries.get(&kernel).ok_or_else(|| {
            let have: Vec<String> = self.entries.keys().map(Kernel::to_string).collect();
            Error::CustomKernels(format!("the call was planned for {kernel}, which the module does not stand in for (it has {})", have.join(", ")))
        })?;
        self.functions.get(gpu.driver, kernel, smem, || self.module.function(name))
    }
}

/// The kernels a module's entries stand in for (see [`CustomKernels`]), by their markers:
/// entries without one are skipped; one naming a kernel outside the ABI's tables, one no module
/// may stand in for ([`Kernel::replaceable`]) or a kernel twice is an error.
pub(crate) fn entries(ptx: &str) -> Result<HashMap<Kernel, CString>> {
    let mut entries = HashMap::new();
    for (name, kernel) in marked_entries(ptx) {
        let Some(kernel) = kernel else { continue };
        let bad = |why: &str| Error::CustomKernels(format!("entry {name} ({kernel:?}) {why}"));
        if !kernel.replaceable() {
            return Err(bad("is not a forward or backward main kernel of the ABI's tables"));
        }
        let name = CString::new(name).map_err(|_| bad("has a NUL in its name"))?;
        if entries.insert(kernel, name).is_some() {
            return Err(bad("stands for the same kernel as another entry"));
        }
    }
    if entries.is_empty() {
        return Err(Error::CustomKernels("the module has no entry declared with mma_forward_kernel!, sm90_forward_kernel! or mma_backward_kernel!".into()));
    }
    Ok(entries)
}

/// Refuses a launch on the shipped kernels (`custom` none) of a plan with user data (`user`, its
/// address in the parameters): only the caller's own kernels read it.
pub(crate) fn user_data_needs_custom(user: u64, custom: Option<&CustomKernels>) -> Result<()> {
    if custom.is_none() && user != 0 {
        let reason = "only the caller's own kernels read user data: launch through Gpu::attention_forward_custom or \
                      Gpu::attention_backward_custom (raw: Gpu::launch_custom, Gpu::launch_backward_custom)";
        return Err(Error::InvalidShape { what: "user_data", reason: reason.into() });
    }
    Ok(())
}

impl Gpu {
    /// `kernel`'s function from the caller's own module where given, else the shipped one,
    /// opted in to `smem` bytes of dynamic shared memory.
    pub(crate) fn function_of(&self, kernel: Kernel, smem: u32, custom: Option<&CustomKernels>) -> Result<Handle> {
        match custom {
            Some(kernels) => kernels.function(self, kernel, smem),
            None => self.kernel_function(kernel, smem),
        }
    }

    /// Loads a module of the caller's own kernels ([`crate::custom`]): PTX text as
    /// `cargo xtask build-ptx --crate` writes it, for this GPU's architecture (`sm_90a.ptx` on
    /// H100/H200, else `sm_80.ptx`). The driver compiles it for the GPU (seconds for a few
    /// kernels).
    ///
    /// Errors: [`Error::CustomKernels`] for a module whose entries stand for no kernel of the
    /// ABI's tables it may replace (or for one twice); the driver's error where it does not load
    /// (PTX for a newer architecture than the GPU's, say).
    pub fn load_custom_kernels(&self, ptx: &str) -> Result<CustomKernels<'_>> {
        let entries = entries(ptx)?;
        let image = CString::new(ptx).map_err(|_| Error::CustomKernels("the PTX holds a NUL byte".into()))?;
        self.make_current()?;
        let module = LoadedModule::load(self.driver, image.as_bytes_with_nul())?;
        Ok(CustomKernels { entries, functions: Functions::default(), context: self.raw_context() as usize, module, gpu: PhantomData })
    }

    /// [`Gpu::launch`] on the caller's own kernels: launches `plan` on the entry of `kernels`
    /// that stands for the plan's kernel.
    ///
    /// Errors: those of [`Gpu::launch`]; [`Error::CustomKernels`] where `kernels` has no entry
    /// for the plan's kernel; [`Error::WrongContext`] for kernels loaded on another GPU.
    ///
    /// # Safety
    /// As for [`Gpu::launch`]; and the entries were declared with the device crate's entry
    /// macros, whose modifications read nothing of the user data
    /// ([`crate::AttentionParamsBuilder::user_data`]) past its capacity.
    pub unsafe fn launch_custom(&self, stream: *mut c_void, plan: &crate::LaunchPlan, kernels: &CustomKernels) -> Result<()> {
        // SAFETY: per this function's contract.
        unsafe { self.launch_on(stream, plan, Some(kernels)) }
    }

    /// [`Gpu::launch_backward`] with the main kernel from the caller's own module: the entry of
    /// `kernels` that stands for the plan's main kernel (the prep and dQ kernels are the
    /// shipped ones).
    ///
    /// Errors: those of [`Gpu::launch_backward`]; [`Error::CustomKernels`] where `kernels` has
    /// no entry for the plan's main kernel; [`Error::WrongContext`] for kernels loaded on
    /// another GPU.
    ///
    /// # Safety
    /// As for [`Gpu::launch_backward`] and [`Gpu::launch_custom`].
    pub unsafe fn launch_backward_custom(&self, stream: *mut c_void, plan: &crate::BackwardPlan, kernels: &CustomKernels) -> Result<()> {
        // SAFETY: per this function's contract.
        unsafe { self.launch_backward_on(stream, plan, Some(kernels)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrs_abi::{DType, Flavor, Variant, sm90, tiles};

    fn entry(name: &str, marker: &str) -> String {
        format!(".visible .entry {name}(\n\t.param .align 8 .b8 {name}_param_0[256]\n)\n{{\n\t// begin inline asm\n\t// {marker}\n\t// end inline asm\n\tret;\n}}\n")
    }

    #[test]
    fn entries_are_found_by_their_markers_not_their_names() {
        let mma = Kernel::Mma { dtype: DType::Bf16, kv: None, variant: Variant::Plain, config: tiles::MODS_CONFIGS[1], flavor: Flavor::Mods };
        let c = tiles::MODS_CONFIGS[1];
        let marker = format!("flashrs-kernel: mma 0 1 {} {} {} {} {} 1 0", c.head_dim, c.block_m, c.block_n, c.warps, c.stages);
        assert_eq!(Kernel::from_marker(&marker), Some(mma));
        let h = sm90::CONFIGS[1];
        let sm90 = Kernel::Sm90 { dtype: DType::F16, inputs: None, varlen: true, paged: false, config: h, flavor: Flavor::Mods };
        let hopper = format!("flashrs-kernel: sm90 1 0 {} {} {} {} {} {} 1 0", h.head_dim, h.head_dim_v, h.block_n, h.stages, h.consumers, h.pipelined as u32);
        assert_eq!(Kernel::from_marker(&hopper), Some(sm90));
        let ptx = [entry("my_bias", &marker), entry("helper", "nothing"), entry("my_bias_hopper", &hopper)].concat();
        let found = entries(&ptx).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[&mma].to_str().unwrap(), "my_bias");
        assert_eq!(found[&sm90].to_str().unwrap(), "my_bias_hopper");

        let twice = [entry("a", &marker), entry("b", &marker)].concat();
        assert!(matches!(entries(&twice), Err(Error::CustomKernels(m)) if m.contains("same kernel")));
        let bwd = entry("grad", "flashrs-kernel: merge 0");
        assert!(matches!(entries(&bwd), Err(Error::CustomKernels(m)) if m.contains("not a forward or backward main kernel")));
        // A configuration outside the tables: 96 columns are no configuration's.
        let odd = entry("odd", &format!("flashrs-kernel: mma 0 1 96 {} {} {} {} 1 0", c.block_m, c.block_n, c.warps, c.stages));
        assert!(matches!(entries(&odd), Err(Error::CustomKernels(m)) if m.contains("not a forward or backward main kernel")));
        assert!(matches!(entries(&entry("helper", "x")), Err(Error::CustomKernels(m)) if m.contains("no entry")));
    }
}
