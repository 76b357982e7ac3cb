//! The Hopper path ([`KernelPath::Wgmma`]): planning and launching the sm_90a forward kernels
//! of `kernels-gpu/src/hopper/` (TMA loads, wgmma, warp specialisation).
//!
//! Planning stays free of the GPU: [`AttentionParams::plan`] first validates the call as for
//! every path, then adds the Hopper launch ([`WgmmaPlan`]) where the kernels
//! can take the call:
//!
//! * path `Wgmma`: the plan *is* the Hopper launch (its kernel, geometry and parameters), or
//!   planning fails saying why the Hopper kernels cannot take the call;
//! * path `Auto`: the plan stays the mma.sync launch (the one any GPU runs) and carries the
//!   Hopper launch alongside, which [`crate::Gpu::launch_forward`] runs instead on sm_90a
//!   GPUs ([`LaunchPlan::kernel_for`] names the kernel that runs on a given GPU). A forced
//!   tile configuration ([`AttentionParams::config`]) names an mma.sync kernel, so `Auto`
//!   keeps to mma.sync then;
//! * path `MmaSync`: unchanged.
//!
//! The tensor maps TMA reads through hold raw device addresses, so they are encoded at launch
//! ([`cuTensorMapEncodeTiled`](crate::tensor_map), host-only work) from the plan's
//! [`FwdParams`]: each tensor as a 4-D view `[head_dim, seqlen, heads, batch]` (innermost
//! first) with its strides, read in boxes of 64 columns (128 bytes, the 128-byte swizzle's
//! width) by [`HopperConfig::block_m`] (Q: 128 or 192) or `block_n` (K, V) rows (TMA boxes
//! reach at most 256 rows). Rows past the sequence and columns past `head_dim` arrive as
//! zeros, which is how ragged lengths and padded head dimensions (any multiple of 8 up to 256,
//! computed as 64, 128 or 256) are handled. GQA/MQA index K and V by `head / group` in the map
//! coordinates, without copies.
use std::ffi::c_void;

use crate::attention::{AttentionParams, DType, FwdParams, KernelPath, LaunchPlan, TileConfig, WorkspaceAddrs};
use crate::device::{Arch, Gpu};
use crate::error::{Error, Result};
use crate::tensor_map::{Swizzle, TensorDataType, TensorMap, TensorMapParam};

#[path = "../../kernels-gpu/src/hopper/config.rs"]
pub mod config;

pub use config::HopperConfig;

/// Entry-point name of the Hopper forward kernel for `dtype` and `config`:
/// `flash_fwd_sm90_<dtype>_d<D>_<BM>x<BN>s<stages>`, with `_serial` for the serial schedule.
pub fn kernel_name(dtype: DType, config: &HopperConfig) -> String {
    format!(
        "flash_fwd_sm90_{}_d{}_{}x{}s{}{}",
        dtype.name(),
        config.head_dim,
        config.block_m(),
        config.block_n,
        config.stages,
        if config.pipelined { "" } else { "_serial" }
    )
}

/// Entry-point name of the variable-length twin of `config`'s kernel
/// (`flash_fwd_sm90_varlen_...`), if it has one: the defaults ([`config::DEFAULTS`]) do,
/// persistent or not.
pub fn varlen_kernel_name(dtype: DType, config: &HopperConfig) -> Option<String> {
    let twin = config::DEFAULTS.iter().any(|&i| HopperConfig { persistent: config.persistent, ..config::CONFIGS[i] } == *config);
    twin.then(|| kernel_name(dtype, config).replacen("flash_fwd_sm90_", "flash_fwd_sm90_varlen_", 1))
}

/// Names of every Hopper kernel (in [`crate::ptx::PTX_SM90A`] only): each of
/// [`config::CONFIGS`] and its variable-length twin (if any) for f16, then for bf16.
pub fn kernel_names() -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for dtype in [DType::F16, DType::Bf16] {
        for c in config::CONFIGS {
            // Persistent configurations launch their twin's kernel.
            for name in std::iter::once(kernel_name(dtype, &c)).chain(varlen_kernel_name(dtype, &c)) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// A Hopper configuration in the shape of [`TileConfig`], for [`LaunchPlan::config`] and
/// reports: `warps` counts all warps of the CTA (the producer warpgroup's too).
pub fn tile_config(c: &HopperConfig) -> TileConfig {
    TileConfig { head_dim: c.head_dim, block_m: c.block_m(), block_n: c.block_n, warps: c.threads() / 32, stages: c.stages }
}

/// The Hopper launch of a validated call: kernel, geometry, and the parameters (the same
/// [`FwdParams`] as the mma.sync kernels, with `m_blocks` for the configuration's
/// [`HopperConfig::block_m`]). Free of GPU state; the tensor maps are encoded at launch.
#[derive(Clone, Debug, PartialEq)]
pub struct WgmmaPlan {
    /// Kernel entry point.
    pub kernel: String,
    /// Tile configuration.
    pub config: HopperConfig,
    /// Element type (the tensor maps' data type).
    pub dtype: DType,
    /// Work tiles (query blocks of `block_m` rows over every batch and head); 0 when there is
    /// nothing to compute. The grid has as many CTAs, or for a persistent configuration at
    /// most one per SM ([`WgmmaPlan::grid_for`]).
    pub grid: u32,
    /// Threads per CTA.
    pub block: u32,
    /// Dynamic shared memory per CTA, bytes.
    pub smem: u32,
    /// The kernel's parameters after the three tensor maps.
    pub params: FwdParams,
    /// Variable-length calls: the packed query and key row totals. The tensor maps then see
    /// the packed rows as one sequence of a batch of one, and each work tile offsets its rows
    /// by its sequence's start.
    pub packed_rows: Option<[usize; 2]>,
}

impl WgmmaPlan {
    /// CTAs to launch on a GPU with `sm_count` SMs: one per work tile, or for a persistent
    /// configuration one per SM at most (each claiming tiles from the launch counter).
    pub fn grid_for(&self, sm_count: u32) -> u32 {
        if self.config.persistent { self.grid.min(sm_count.max(1)) } else { self.grid }
    }
}

/// Largest byte stride a tensor map takes (exclusive).
const MAX_STRIDE_BYTES: u64 = 1 << 40;

/// Why the Hopper kernels cannot take a validated call, if they cannot: the tensor maps need
/// strides below 2^40 bytes, and a dimension of more than one index with stride 0 (a
/// broadcast view) is left to the mma.sync kernels.
fn unsupported(p: &AttentionParams, params: &FwdParams, packed_rows: Option<[usize; 2]>) -> Option<String> {
    let ([bq, sq], [bk, sk]) = match packed_rows {
        Some([q, k]) => ([1, q], [1, k]),
        None => ([p.batch, p.seqlen_q], [p.batch, p.seqlen_k]),
    };
    let tensors = [
        ("q", params.q_strides, [bq, sq, p.heads_q]),
        ("k", params.k_strides, [bk, sk, p.heads_kv]),
        ("v", params.v_strides, [bk, sk, p.heads_kv]),
        ("out", params.o_strides, [bq, sq, p.heads_q]),
    ];
    for (name, strides, extents) in tensors {
        if extents.contains(&0) {
            // Never read (no keys): its strides were not even validated.
            continue;
        }
        for ((stride, extent), dim) in strides.iter().zip(extents).zip(["batch", "row", "head"]) {
            if extent > 1 && (*stride == 0 || *stride as u64 * 2 >= MAX_STRIDE_BYTES) {
                return Some(format!("{name}'s {dim} stride {stride} cannot be described to TMA (nonzero, below 2^40 bytes)"));
            }
        }
    }
    None
}

/// Longest key sequence of a non-causal call the default Hopper kernel launches persistent
/// (head_dim up to 128; see [`HopperConfig::persistent`]).
pub const PERSISTENT_MAX_KEYS: usize = 4096;

/// Whether the default kernel for `p` runs persistent (one CTA per SM claiming work tiles, see
/// [`HopperConfig::persistent`]): where it keeps two Q tiles (head_dim up to 128), so the next
/// tile's Q and first K/V tiles load while the current one computes and stores, and where the
/// work tiles are short enough for that to matter: causal calls (most blocks see a part of
/// the keys) and up to [`PERSISTENT_MAX_KEYS`] keys. Measured on an H100 against one CTA per
/// tile (16k-token batches): 2k keys 3-13% faster, 4k 1-7%, causal head_dim 64 8k-16k 3-9%,
/// causal head_dim 128 8k-16k 0.5-2% slower (two runs; kept for one rule); head_dim 256 (one
/// Q tile: the next Q waits for the epilogue) up to 15% slower. See docs/PERF-NOTES.md.
fn persistent_pays(c: &HopperConfig, p: &AttentionParams) -> bool {
    c.q_buffers() == 2 && (p.causal || p.seqlen_k <= PERSISTENT_MAX_KEYS)
}

/// The Hopper launch for a call [`AttentionParams::plan`] validated into `base`, with `config`
/// (the default for the head dimension if `None`), or why the Hopper kernels cannot take it.
fn wgmma_plan(p: &AttentionParams, base: &LaunchPlan, config: Option<HopperConfig>) -> std::result::Result<WgmmaPlan, String> {
    if p.config.is_some() {
        return Err("tile configuration overrides name mma.sync kernels; the wgmma path picks its own".into());
    }
    let config = match config {
        Some(c) if !config::CONFIGS.contains(&c) => return Err(format!("{c:?} is not an instantiated Hopper configuration")),
        Some(c) if c.head_dim < p.head_dim => return Err(format!("head_dim {} does not fit {c:?}", p.head_dim)),
        Some(c) => c,
        None => {
            let c = config::default_config(p.head_dim).ok_or_else(|| format!("no Hopper kernel for head_dim {}", p.head_dim))?;
            HopperConfig { persistent: persistent_pays(&c, p), ..c }
        }
    };
    // Only calls the plain or variable-length mma.sync kernels would serve are eligible:
    // split-KV and paged launches need features the Hopper kernels lack.
    let dtype = p.dtype.name();
    if ![format!("flash_fwd_{dtype}_d"), format!("flash_fwd_varlen_{dtype}_d")].iter().any(|k| base.kernel.starts_with(k)) {
        return Err(format!("{} has no Hopper counterpart", base.kernel));
    }
    let packed_rows = p.varlen.as_ref().map(|v| [v.total_q(), v.total_k()]);
    let mut params = base.params;
    let mut grid = 0;
    if !base.is_empty() {
        if let Some(why) = unsupported(p, &params, packed_rows) {
            return Err(why);
        }
        let m_blocks = p.seqlen_q.div_ceil(config.block_m());
        let ctas = p.batch as u64 * p.heads_q as u64 * m_blocks as u64;
        if ctas > i32::MAX as u64 {
            return Err(format!("{ctas} CTAs exceed the grid limit of {}", i32::MAX));
        }
        params.m_blocks = m_blocks as u32;
        params.interleave = crate::attention::interleave(params.causal != 0, p.batch * p.heads_q, m_blocks);
        grid = ctas as u32;
    }
    let kernel = match packed_rows {
        Some(_) => varlen_kernel_name(p.dtype, &config).ok_or_else(|| format!("{config:?} has no variable-length kernel"))?,
        None => kernel_name(p.dtype, &config),
    };
    Ok(WgmmaPlan {
        kernel,
        config,
        dtype: p.dtype,
        grid,
        block: config.threads() as u32,
        smem: config.smem_bytes() as u32,
        params,
        packed_rows,
    })
}

/// Completes a plan [`AttentionParams::plan`] validated (called at its end): adds the Hopper
/// launch per `p.path` (see the module docs).
pub(crate) fn finish_plan(p: &AttentionParams, plan: LaunchPlan) -> Result<LaunchPlan> {
    finish_plan_with(p, plan, None)
}

fn finish_plan_with(p: &AttentionParams, mut plan: LaunchPlan, config: Option<HopperConfig>) -> Result<LaunchPlan> {
    match p.path {
        KernelPath::MmaSync => {}
        KernelPath::Auto => plan.wgmma = wgmma_plan(p, &plan, config).ok(),
        KernelPath::Wgmma => {
            let w = wgmma_plan(p, &plan, config).map_err(|reason| Error::InvalidShape { what: "wgmma path", reason })?;
            plan.kernel = w.kernel.clone();
            plan.config = tile_config(&w.config);
            plan.grid = w.grid;
            plan.block = w.block;
            plan.smem = w.smem;
            plan.params = w.params;
            plan.wgmma = Some(w);
        }
    }
    Ok(plan)
}

/// [`AttentionParams::plan`] for the wgmma path with a chosen Hopper configuration (one of
/// [`config::CONFIGS`] whose head dimension holds `p.head_dim`), e.g. a serial-schedule
/// kernel to tell a scheduling problem from a numerical one. Launch the plan with
/// [`crate::Gpu::launch_forward`] and [`KernelPath::Wgmma`].
pub fn plan_with(p: &AttentionParams, bufs: &crate::attention::Buffers, config: HopperConfig) -> Result<LaunchPlan> {
    let p = p.clone().path(KernelPath::MmaSync);
    let base = p.plan(bufs)?;
    finish_plan_with(&p.path(KernelPath::Wgmma), base, Some(config))
}

impl LaunchPlan {
    /// True when this plan is the Hopper launch itself (planned with [`KernelPath::Wgmma`]).
    pub fn is_wgmma(&self) -> bool {
        self.wgmma.as_ref().is_some_and(|w| w.kernel == self.kernel)
    }

    /// The kernel a GPU of `arch` runs for this plan launched with the path it was planned
    /// with: the Hopper kernel on sm_90a when the plan carries one, else [`LaunchPlan::kernel`].
    pub fn kernel_for(&self, arch: Arch) -> &str {
        match (&self.wgmma, arch) {
            (Some(w), Arch::Sm90a) => &w.kernel,
            _ => &self.kernel,
        }
    }
}

/// The Hopper launch `path` calls for with `plan` on `gpu`, or `None` for the mma.sync one.
/// A forced [`KernelPath::Wgmma`] on a GPU without sm_90a is [`Error::PathUnavailable`].
pub(crate) fn select<'a>(gpu: &Gpu, path: KernelPath, plan: &'a LaunchPlan) -> Result<Option<&'a WgmmaPlan>> {
    let mismatch = |planned: &str| Error::InvalidShape {
        what: "path",
        reason: format!("the plan was made for the {planned} path, the launch asks for {}", path.name()),
    };
    match path {
        KernelPath::Wgmma => {
            if gpu.arch() != Arch::Sm90a {
                let (major, minor) = gpu.compute_capability();
                return Err(Error::PathUnavailable { path: "wgmma", needs: "an sm_90a GPU (H100/H200)", major, minor });
            }
            plan.wgmma.as_ref().filter(|_| plan.is_wgmma()).map(Some).ok_or_else(|| mismatch("mma.sync (or auto)"))
        }
        _ if plan.is_wgmma() => Err(mismatch("wgmma")),
        KernelPath::Auto if gpu.arch() == Arch::Sm90a => Ok(plan.wgmma.as_ref()),
        KernelPath::Auto | KernelPath::MmaSync => Ok(None),
    }
}

/// The map of one `[batch, seqlen, heads, head_dim]` tensor: 4-D `[head_dim, seqlen, heads,
/// batch]`, boxes of 64 columns x `box_rows` rows, 128-byte swizzle, zero fill.
fn encode_map(dtype: DType, ptr: u64, strides: [i64; 3], dims: [usize; 3], head_dim: usize, box_rows: u32) -> Result<TensorMap> {
    let data_type = match dtype {
        DType::F16 => TensorDataType::F16,
        DType::Bf16 => TensorDataType::Bf16,
    };
    let [batch, seqlen, heads] = dims;
    let [sb, sr, sh] = strides;
    // A dimension of one index is never stepped: any legal stride describes it.
    let bytes = |stride: i64, extent: usize| {
        let b = stride as u64 * 2;
        if extent <= 1 && (b == 0 || b >= MAX_STRIDE_BYTES) { 16 } else { b }
    };
    TensorMap::tiled(
        data_type,
        ptr,
        &[head_dim as u64, seqlen as u64, heads as u64, batch as u64],
        &[bytes(sr, seqlen), bytes(sh, heads), bytes(sb, batch)],
        &[64, box_rows, 1, 1],
    )
    .swizzle(Swizzle::B128)
    .encode()
}

/// The Q, K and V maps of a Hopper launch. With no keys, K and V are never read (and their
/// buffers may be null): they reuse Q's map.
fn encode_maps(w: &WgmmaPlan) -> Result<[TensorMap; 3]> {
    let p = &w.params;
    let d = p.head_dim as usize;
    let (hq, hkv) = (p.heads_q as usize, (p.heads_q / p.group) as usize);
    // Packed rows (variable-length) are one sequence: the maps end where the buffers' rows do,
    // so the last sequence's tiles read zeros past them.
    let (batch, [rows_q, rows_k]) = match w.packed_rows {
        Some(rows) => (1, rows),
        None => (p.batch as usize, [p.seqlen_q as usize, p.seqlen_k as usize]),
    };
    let q = encode_map(w.dtype, p.q, p.q_strides, [batch, rows_q, hq], d, w.config.block_m() as u32)?;
    if rows_k == 0 {
        return Ok([q, q, q]);
    }
    let bn = w.config.block_n as u32;
    let k = encode_map(w.dtype, p.k, p.k_strides, [batch, rows_k, hkv], d, bn)?;
    let v = encode_map(w.dtype, p.v, p.v_strides, [batch, rows_k, hkv], d, bn)?;
    Ok([q, k, v])
}

/// Launches a Hopper plan on a raw `CUstream` (see [`crate::Gpu::launch_forward`] for the
/// safety contract); `offsets` are a variable-length plan's validated offsets
/// ([`LaunchPlan::varlen_offsets`]), else empty.
pub(crate) unsafe fn launch(gpu: &Gpu, stream: *mut c_void, w: &WgmmaPlan, offsets: &[i32]) -> Result<()> {
    if w.grid == 0 {
        return Ok(());
    }
    if w.smem > gpu.max_shared_memory_per_block() {
        return Err(Error::LaunchLimit(format!(
            "{} needs {} bytes of shared memory, the GPU allows {}",
            w.kernel,
            w.smem,
            gpu.max_shared_memory_per_block()
        )));
    }
    let [q, k, v] = encode_maps(w)?;
    let raw = gpu.kernel_function(&w.kernel, w.smem)?;
    let grid = w.grid_for(gpu.sm_count());
    let persistent = grid < w.grid;
    let launch = |ws: WorkspaceAddrs| {
        let (mut q, mut k, mut v): (TensorMapParam, TensorMapParam, TensorMapParam) = (q.param(), k.param(), v.param());
        let mut params = FwdParams { tile_counter: if persistent { ws.counters } else { 0 }, ..w.params };
        if let Some(base) = ws.offsets {
            crate::attention::point_at_offsets(&mut params, base, offsets.len());
        }
        let mut args = [
            &mut q as *mut TensorMapParam as *mut c_void,
            &mut k as *mut TensorMapParam as *mut c_void,
            &mut v as *mut TensorMapParam as *mut c_void,
            &mut params as *mut FwdParams as *mut c_void,
        ];
        // SAFETY: four arguments matching the kernel's parameters (three by-value 192-byte
        // TensorMapParams, then FwdParams); the caller vouches for the buffers and the stream.
        let r = unsafe { cust::sys::cuLaunchKernel(raw, grid, 1, 1, w.block, 1, 1, w.smem, stream as _, args.as_mut_ptr(), std::ptr::null_mut()) };
        crate::error::check_driver("cuLaunchKernel", r)
    };
    if !persistent && offsets.is_empty() {
        // One CTA per work tile: nothing to claim, nothing to upload.
        return launch(WorkspaceAddrs { offsets: None, counters: 0, partials: 0 });
    }
    // Persistent: CTAs claim work tiles from a counter pair the kernel leaves at zero.
    // Variable-length: the offsets uploaded for this launch.
    let counters = if persistent { 2 } else { 0 };
    // SAFETY: as for this function; `launch` enqueues on `stream` only.
    unsafe { gpu.with_workspace(stream, offsets, counters, 0, launch) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::{BufferRef, Buffers, Strides};

    /// Disjoint stand-in buffers of 2^30 elements (planning never touches them).
    fn bufs() -> Buffers {
        let b = |i: u64| BufferRef { ptr: (1 + i) << 32, len: 1 << 30 };
        Buffers { q: b(0), k: b(1), v: b(2), o: b(3), lse: None, paged: None, varlen: None }
    }

    #[test]
    fn every_config_fits_shared_memory_registers_and_tma_and_names_its_kernel() {
        for c in config::CONFIGS {
            assert!(c.smem_bytes() <= 227 * 1024, "{c:?}");
            assert_eq!(c.head_dim % 64, 0);
            // The register split: the producer's and every consumer's budget fill at most the
            // 64K register file, in setmaxnreg's steps of 8, and the consumers gain registers.
            let (p, r) = (c.producer_regs(), c.consumer_regs());
            assert!(128 * p as usize + 128 * c.consumers * r as usize <= 65536, "{c:?}");
            assert!(p % 8 == 0 && r % 8 == 0 && p >= 24 && r <= 256 && r as usize > 65536 / c.threads(), "{c:?}");
            // TMA boxes reach at most 256 rows.
            assert!(c.block_m() <= 256 && c.block_n <= 256, "{c:?}");
        }
        assert_eq!(kernel_name(DType::Bf16, &config::CONFIGS[1]), "flash_fwd_sm90_bf16_d128_128x128s2");
        // head_dim 64: three consumer warpgroups by default, two kept beside it.
        assert_eq!(kernel_name(DType::F16, &config::default_config(64).unwrap()), "flash_fwd_sm90_f16_d64_192x128s3");
        let two = HopperConfig { consumers: 2, ..config::default_config(64).unwrap() };
        assert!(config::CONFIGS.contains(&two));
        assert_eq!(kernel_name(DType::F16, &two), "flash_fwd_sm90_f16_d64_128x128s3");
        assert_eq!((two.producer_regs(), two.consumer_regs()), (40, 232));
        assert_eq!((config::CONFIGS[0].producer_regs(), config::CONFIGS[0].consumer_regs()), (32, 160));
        // Persistent configurations share their twin's kernel; the defaults have a
        // variable-length twin.
        let fixed = config::CONFIGS.iter().filter(|c| !c.persistent).count();
        assert_eq!(kernel_names().len(), 2 * (fixed + config::DEFAULTS.len()));
        assert_eq!(varlen_kernel_name(DType::Bf16, &config::CONFIGS[1]).unwrap(), "flash_fwd_sm90_varlen_bf16_d128_128x128s2");
        assert!(varlen_kernel_name(DType::F16, &two).is_none());
        for c in config::CONFIGS.iter().filter(|c| c.persistent) {
            let twin = HopperConfig { persistent: false, ..*c };
            assert!(config::CONFIGS.contains(&twin));
            assert_eq!(kernel_name(DType::F16, c), kernel_name(DType::F16, &twin));
        }
    }

    #[test]
    fn every_hopper_kernel_is_in_the_sm90a_module_with_its_entry_directives() {
        let (sm90, sm80) = (crate::ptx::entry_names(crate::ptx::PTX_SM90A), crate::ptx::entry_names(crate::ptx::PTX_SM80));
        let kernels = config::CONFIGS.iter().filter(|c| !c.persistent);
        let names = |t, c| std::iter::once(kernel_name(t, c)).chain(varlen_kernel_name(t, c)).map(move |n| (n, c));
        for (name, c) in [DType::F16, DType::Bf16].into_iter().flat_map(|t| kernels.clone().flat_map(move |c| names(t, c))) {
            assert!(sm90.contains(&name.as_str()), "{name} missing from the sm_90a module");
            assert!(!sm80.contains(&name.as_str()), "{name} must not be in the sm_80 module");
            // setmaxnreg only works with a register budget known at entry (xtask adds it): the
            // configuration's own block size.
            let header = crate::ptx::PTX_SM90A.split(&format!(".entry {name}(")).nth(1).and_then(|r| r.split('{').next()).unwrap();
            assert!(header.contains(&format!(".maxntid {}, 1, 1", c.threads())), "{name}: {header}");
        }
    }

    #[test]
    fn wgmma_path_plans_the_hopper_kernel() {
        for d in [8, 64, 72, 128, 200, 256] {
            let p = AttentionParams::new(2, 300, 200, 4, d).heads_kv(2).path(KernelPath::Wgmma);
            let plan = p.plan(&bufs()).unwrap();
            assert!(plan.is_wgmma());
            let w = plan.wgmma.as_ref().unwrap();
            assert_eq!(plan.kernel, w.kernel);
            assert!(plan.kernel.starts_with(&format!("flash_fwd_sm90_f16_d{}_", d.next_multiple_of(64).max(64).min(256))), "{}", plan.kernel);
            // 300 query rows: 2 blocks of 192 (head_dim 64, three consumer warpgroups) or 3 of 128.
            let (block_m, m_blocks, threads) = if d <= 64 { (192, 2, 512) } else { (128, 3, 384) };
            assert_eq!((plan.grid, plan.block), (2 * 4 * m_blocks, threads));
            assert_eq!((plan.config.block_m, plan.params.m_blocks), (block_m, m_blocks));
            assert_eq!(plan.kernel_for(Arch::Sm80), plan.kernel);
        }
    }

    #[test]
    fn causal_grids_interleave_groups_of_pairs() {
        // The shape of `forward::causal_grids_whose_pairs_leave_a_short_group`: 7 pairs, 60 blocks of
        // 128 rows (mma.sync, head_dim 64 and 128; wgmma head_dim 128) or 40 of 192 (wgmma
        // head_dim 64), so groups of 4 or 6 pairs and a short one on both paths.
        for d in [64, 128] {
            let p = AttentionParams::new(1, 7680, 256, 7, d).causal(true);
            let plan = p.plan(&bufs()).unwrap();
            let w = plan.wgmma.as_ref().unwrap();
            let wgmma_group = if d == 64 { 6 } else { 4 };
            assert_eq!((plan.params.m_blocks, plan.params.interleave), (60, 4), "head_dim {d}");
            assert_eq!((w.params.m_blocks * w.config.block_m() as u32, w.params.interleave), (7680, wgmma_group), "head_dim {d}");
            // Not causal: every pair's blocks on their own.
            assert_eq!(p.clone().causal(false).plan(&bufs()).unwrap().params.interleave, 1);
        }
        // No query block: nothing to interleave.
        assert_eq!(crate::attention::interleave(true, 7, 0), 1);
        // One block per pair asks for 256 pairs; groups never exceed the grid's 3.
        assert_eq!(crate::attention::interleave(true, 3, 1), 3);
    }

    #[test]
    fn persistent_where_the_next_tile_can_load_early_and_tiles_are_short() {
        let config = |p: AttentionParams| p.path(KernelPath::Wgmma).plan(&bufs()).unwrap().wgmma.unwrap().config;
        for d in [64, 128] {
            assert_eq!(config::default_config(d).unwrap().q_buffers(), 2);
            assert!(config(AttentionParams::new(8, 2048, 2048, 16, d)).persistent, "head_dim {d}, 2k");
            assert!(config(AttentionParams::new(4, 4096, 4096, 16, d)).persistent, "head_dim {d}, 4k");
            assert!(config(AttentionParams::new(1, 16384, 16384, 16, d).causal(true)).persistent, "head_dim {d}, causal 16k");
            assert!(!config(AttentionParams::new(2, 8192, 8192, 16, d)).persistent, "head_dim {d}, 8k");
        }
        // head_dim 256 keeps one Q tile (two do not fit in shared memory): one CTA per tile.
        let d256 = config::default_config(256).unwrap();
        assert_eq!(d256.q_buffers(), 1);
        assert!(2 * d256.q_bytes() + 2 * d256.stages * d256.kv_bytes() + 2048 > config::MAX_SMEM);
        assert!(!config(AttentionParams::new(8, 2048, 2048, 8, 256).causal(true)).persistent);
    }

    #[test]
    fn auto_carries_the_hopper_launch_beside_mma_sync() {
        let p = AttentionParams::new(1, 1000, 1000, 2, 128).causal(true);
        let plan = p.plan(&bufs()).unwrap();
        assert!(!plan.is_wgmma());
        assert!(plan.kernel.starts_with("flash_fwd_f16_"));
        let w = plan.wgmma.as_ref().expect("auto plans the Hopper launch too");
        assert_eq!(w.grid, 2 * 1000u32.div_ceil(128));
        assert_eq!(plan.kernel_for(Arch::Sm90a), w.kernel);
        assert_eq!(plan.kernel_for(Arch::Sm80), plan.kernel);
        // A forced mma.sync configuration keeps Auto on mma.sync; MmaSync never plans Hopper.
        let forced = p.clone().config(crate::attention::config::default_config(128).unwrap());
        assert!(forced.plan(&bufs()).unwrap().wgmma.is_none());
        assert!(p.clone().path(KernelPath::MmaSync).plan(&bufs()).unwrap().wgmma.is_none());
    }

    #[test]
    fn wgmma_path_refuses_what_tma_cannot_describe() {
        let (b, s, h, d) = (2, 64, 2, 64);
        let broadcast = Strides { batch: 0, row: (h * d) as i64, head: d as i64 };
        let dense = Strides::bshd(s, h, d);
        let p = AttentionParams::new(b, s, s, h, d).strides(dense, broadcast, dense, dense);
        match p.clone().path(KernelPath::Wgmma).plan(&bufs()) {
            Err(Error::InvalidShape { what: "wgmma path", reason }) => assert!(reason.contains("k's batch stride"), "{reason}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Auto falls back to mma.sync; a broadcast over one batch is fine.
        assert!(p.plan(&bufs()).unwrap().wgmma.is_none());
        let one = AttentionParams::new(1, s, s, h, d).strides(dense, broadcast, dense, dense).path(KernelPath::Wgmma);
        assert!(one.plan(&bufs()).unwrap().is_wgmma());
        // Forced tile configurations are mma.sync ones.
        let forced = AttentionParams::new(b, s, s, h, d).config(crate::attention::config::CONFIGS[0]).path(KernelPath::Wgmma);
        assert!(matches!(forced.plan(&bufs()), Err(Error::InvalidShape { what: "wgmma path", .. })));
    }

    #[test]
    fn plan_with_picks_any_instantiated_config_that_holds_the_head_dim() {
        let p = AttentionParams::new(1, 100, 100, 2, 96);
        for c in config::CONFIGS {
            let r = plan_with(&p, &bufs(), c);
            if c.head_dim >= 96 {
                let plan = r.unwrap();
                assert!(plan.is_wgmma());
                assert_eq!(plan.kernel, kernel_name(DType::F16, &c));
                assert_eq!(plan.kernel.ends_with("_serial"), !c.pipelined);
                let w = plan.wgmma.as_ref().unwrap();
                assert_eq!(w.grid, 2);
                assert_eq!(w.grid_for(1), if c.persistent { 1 } else { 2 });
                assert_eq!(w.grid_for(132), 2);
            } else {
                assert!(matches!(r, Err(Error::InvalidShape { what: "wgmma path", .. })));
            }
        }
        let odd = HopperConfig { head_dim: 128, block_n: 96, stages: 2, consumers: 2, pipelined: true, persistent: false };
        assert!(plan_with(&p, &bufs(), odd).is_err());
    }

    #[test]
    fn head_dim_64_plans_either_consumer_count() {
        let p = AttentionParams::new(2, 1000, 1000, 3, 64);
        for c in config::CONFIGS.iter().filter(|c| c.head_dim == 64 && c.pipelined && !c.persistent) {
            let plan = plan_with(&p, &bufs(), *c).unwrap();
            let w = plan.wgmma.as_ref().unwrap();
            let (m_blocks, threads) = match c.consumers {
                2 => (8, 384),
                3 => (6, 512),
                n => panic!("{n} consumer warpgroups"),
            };
            assert_eq!((w.params.m_blocks, w.grid, w.block), (m_blocks, 2 * 3 * m_blocks, threads), "{c:?}");
            assert_eq!(w.smem as usize, c.smem_bytes());
            assert_eq!(plan.config.warps, threads as usize / 32);
        }
        // The default is the three-warpgroup kernel.
        assert_eq!(p.path(KernelPath::Wgmma).plan(&bufs()).unwrap().kernel, "flash_fwd_sm90_f16_d64_192x128s3");
    }

    #[test]
    fn empty_calls_plan_an_empty_hopper_launch() {
        let plan = AttentionParams::new(0, 10, 10, 2, 64).path(KernelPath::Wgmma).plan(&bufs()).unwrap();
        assert!(plan.is_empty() && plan.is_wgmma());
        let keyless = AttentionParams::new(1, 10, 0, 2, 64).path(KernelPath::Wgmma).plan(&bufs()).unwrap();
        assert_eq!(keyless.grid, 2);
    }
}
