//! Forward attention on Hopper (sm_90a), FlashAttention-3 style: TMA loads, wgmma, warp
//! specialisation.
//!
//! A CTA computes work tiles of `64 * consumers` query rows of one (batch, head) (see
//! [`HopperConfig`]): one tile, or, launched persistent (one CTA per SM), tiles it claims one
//! after another from a launch counter ([`scheduler`]). Warpgroup 0 is the producer: it gives
//! registers away (`setmaxnreg.dec`) and one of its threads claims the tiles and issues every
//! TMA load ([`producer`]): per tile the Q tile (into one of two Q buffers where they fit, so
//! the next tile's Q lands while the current one computes), then K and V tiles into a
//! `STAGES`-deep ring guarded by full/empty mbarriers ([`pipeline`], [`smem`]), telling the
//! consumers which tile each Q belongs to through a shared-memory slot. The other two or three warpgroups are consumers ([`consumer`]):
//! they claim the registers (`setmaxnreg.inc`), and each computes 64 rows with `wgmma`
//! ([`gemm`]), masking ([`mask`]) and an online softmax in registers ([`softmax`]), then writes
//! O and the log-sum-exp ([`epilogue`]) and hands the Q tile back. [`flashrs_abi::sm90`]
//! (shared with the host) lists the instantiations: a FlashAttention-3 schedule (softmax overlapping `P V`, the
//! consumers taking turns at the tensor cores) and a serial twin per head dimension; head_dim
//! 64 with two and with three consumer warpgroups.
//!
//! The FP8 kernels (e4m3 Q, K and V, 16-bit output; [`fp8`]) are the same body with one-byte
//! inputs: the producer warpgroup's other warps transpose V for the FP8 `P V` ([`transpose`]),
//! and the consumers store O straight from registers.
//!
//! [`bwd`] is the backward pass's Hopper main kernel, built from the same parts.
//!
//! Entry points take the three tensor maps first (see [`TensorMapParam`]) and the same
//! [`FwdParams`] as the mma.sync kernels. Their `.entry` headers get `.maxntid` and
//! `.minnctapersm` from the build (see [`entry_directives`]), without which ptxas would ignore
//! `setmaxnreg` and could allocate more registers than all the warpgroups may hold.
pub mod bwd;
pub mod consumer;
pub mod epilogue;
pub mod fp8;
pub mod gemm;
pub mod mask;
pub mod pipeline;
pub mod producer;
pub mod scheduler;
pub mod smem;
pub mod softmax;
pub mod transpose;

use crate::arch::ids::{thread_idx_x, warp_id};
use crate::arch::mbarrier::mbarrier_init;
use crate::arch::setmaxnreg::{setmaxnreg_dec, setmaxnreg_inc};
use crate::arch::tma::tensor_map_aligned;
use crate::dtype::{Bf16, F16};
use crate::mask::Mask;
use crate::mods::{Builtin, MaskMod, Plain, ScoreMod, Sparse, Window};
use flashrs_abi::FwdParams;
use crate::arch::fence::fence_proxy_async_shared_cta;
use crate::arch::smem::{st_shared_b32, st_shared_v4};
use crate::dtype::Element;
use gemm::Operands;
use pipeline::{empty_arrivals, init_barriers};
use producer::Maps;
use smem::{Smem, dsmem_base_1024};

/// Emits the marker the build (`xtask::inject_entry_directives`) turns into the `.entry`
/// header's `.maxntid THREADS, 1, 1` and `.minnctapersm 1`: a register budget known at entry
/// (65536 / THREADS per thread) that `setmaxnreg` then redistributes. rustc has no way to emit
/// these directives itself.
#[inline(always)]
pub fn entry_directives<const THREADS: usize>() {
    unsafe {
        core::arch::asm!("// flashrs-entry-directives: .maxntid {n}, 1, 1 .minnctapersm 1", n = const THREADS,
            options(nomem, nostack, preserves_flags))
    }
}

/// The kernel body. Types: the input element `I` (its GEMMs, [`Operands`]: 16-bit, or E4M3 with
/// `EB = 1` bytes per element) and the output's `T` (the same 16-bit type, or either with FP8
/// inputs). Const generics: padded head dims `D` (Q, K) and `DV` (V, the
/// output; at most `D`), query rows per CTA `BM` (64 per consumer warpgroup), keys per stage
/// `BN`, `STAGES`, the derived register counts `SN = BN/2` (scores), `ON = DV/2` (output) and `KP = BN * EB / 32` (P's k-steps), which stable Rust
/// cannot compute in array types, the warpgroups' register budgets after `setmaxnreg`
/// (producer `PREGS`, each consumer `CREGS`), the consumer schedule (see [`consumer`]),
/// `VARLEN`: packed variable-length batches (per-sequence extents from the offsets arrays; a
/// twin of the fixed-length kernel, which thus keeps its lengths in parameters), and `PAGED`:
/// K and V from paged caches through the block table (see [`producer`]). `S` and `M`
/// are the score modification and the mask ([`crate::mods`]): [`Plain`] and [`Mask`] for
/// plain attention. Entry points instantiate it through [`crate::sm90_forward_kernel`].
#[inline(always)]
pub unsafe fn flash_fwd_sm90<
    I: Operands,
    T: Element,
    S: ScoreMod,
    M: MaskMod,
    const D: usize,
    const DV: usize,
    const BM: usize,
    const BN: usize,
    const STAGES: usize,
    const SN: usize,
    const ON: usize,
    const KP: usize,
    const PREGS: u32,
    const CREGS: u32,
    const PIPELINED: bool,
    const VARLEN: bool,
    const PAGED: bool,
    const EB: usize,
>(
    maps: Maps,
    p: &FwdParams,
) {
    const {
        assert!(EB == I::BYTES && SN == BN / 2 && ON == DV / 2 && KP == BN * EB / 32 && D % 64 == 0 && DV % 64 == 0 && DV <= D && BN % 16 == 0 && STAGES >= 1);
        // `setmaxnreg` moves registers between warpgroups, within what the CTA started with:
        // asking for more hangs the consumers.
        let threads = 128 + 2 * BM;
        assert!(BM % 64 == 0 && 128 * PREGS as usize + 2 * BM * CREGS as usize <= flashrs_abi::sm90::initial_regs(threads) as usize * threads);
    };
    let smem = Smem::<D, DV, BM, BN, STAGES, EB>::new(dsmem_base_1024());
    let tid = thread_idx_x();
    // TMA faults on a misaligned map; the host's TensorMapParam layout guarantees alignment,
    // so this only trips if that assumption breaks (a launch error, not wrong numbers).
    if !(tensor_map_aligned(maps.q) && tensor_map_aligned(maps.k) && tensor_map_aligned(maps.v)) {
        unsafe { core::arch::nvptx::trap() };
    }
    if PAGED {
        // V rows a paged launch does not load keep what the stage held (see [`producer`]):
        // never garbage, so zeros to begin with, written before the TMA unit's first fill.
        let threads = 128 + 2 * BM as u32;
        let mut at = 16 * tid;
        while at < (STAGES * BN * DV * EB) as u32 {
            unsafe { st_shared_v4(smem.v(0) + at, [0; 4]) };
            at += 16 * threads;
        }
        fence_proxy_async_shared_cta();
    }
    // Paged launches whose loads four threads share: two arrivals (K's or V's two halves).
    let fills = if PAGED && producer::paged_shared::<BN>(p) { 2 } else { 1 };
    init_barriers(tid, || {
        let empty = empty_arrivals(BM / 64);
        unsafe {
            for b in 0..Smem::<D, DV, BM, BN, STAGES, EB>::Q_BUFFERS {
                mbarrier_init(smem.q_full(b), 1);
                mbarrier_init(smem.q_empty(b), empty);
            }
            for s in 0..STAGES as u32 {
                mbarrier_init(smem.k_full(s), fills);
                mbarrier_init(smem.v_full(s), fills);
                mbarrier_init(smem.k_empty(s), empty);
                // FP8: the transposing threads release V as loaded; the consumers its transpose.
                mbarrier_init(smem.v_empty(s), if EB == 1 { transpose::THREADS } else { empty });
                if EB == 1 {
                    mbarrier_init(smem.vt_full(s), transpose::THREADS);
                    mbarrier_init(smem.vt_empty(s), empty);
                }
            }
            if EB == 1 {
                st_shared_b32(smem.done_slot(), 0);
            }
            if PAGED {
                for b in 0..Smem::<D, DV, BM, BN, STAGES, EB>::Q_BUFFERS {
                    mbarrier_init(smem.tile_posted(b), 1);
                }
            }
        }
    });
    let warpgroup = warp_id() / 4;
    if warpgroup == 0 {
        setmaxnreg_dec::<PREGS>();
        if tid == 0 {
            unsafe { producer::run::<D, DV, BM, BN, STAGES, EB, VARLEN, PAGED, M>(maps, smem, p) };
        } else if PAGED && EB == 2 && tid % 32 == 0 {
            // `EB == 2` here: the same plan, under the type the paged loads take.
            let plan = Smem::<D, DV, BM, BN, STAGES, 2>::new(dsmem_base_1024());
            unsafe { producer::run_helper::<D, DV, BM, BN, STAGES, VARLEN, M>(maps, plan, tid / 32, p) };
        } else if EB == 1 && tid >= 32 {
            // `EB == 1` here: the same plan, under the type the transposer takes.
            let fp8 = Smem::<D, DV, BM, BN, STAGES, 1>::new(dsmem_base_1024());
            unsafe { transpose::run::<D, DV, BM, BN, STAGES>(fp8, tid - 32) };
        }
    } else {
        setmaxnreg_inc::<CREGS>();
        unsafe { consumer::run::<I, T, S, M, D, DV, BM, BN, STAGES, EB, SN, ON, KP, PIPELINED, VARLEN, PAGED>(p, smem, warpgroup - 1, tid % 128) };
    }
}

/// Declares one Hopper forward entry point, `$name`: the kernel body [`flash_fwd_sm90`] for
/// element type `$t`, configuration `$cfg` of [`flashrs_abi::sm90::CONFIGS`], fixed (`$varlen` false) or variable
/// length, of the [`flashrs_abi::Flavor`] `$flavor`, with the score modification `$score` and the mask
/// `$mask`. Its arguments are the Q, K and V tensor maps (4-D `[head_dim, seqlen, heads,
/// batch]`, 64-column boxes, 128-byte swizzle), then the parameters; a launch runs it one CTA
/// per work tile or persistent. Like [`crate::mma_forward_kernel`], whose documentation says
/// how a caller's crate uses it, it carries the marker of its [`flashrs_abi::Kernel`]; a
/// module holding it must go through the build's entry directives (see [`entry_directives`]).
#[macro_export]
macro_rules! sm90_forward_kernel {
    ($name:ident, $t:ty, $cfg:expr, $varlen:literal, $flavor:ident, $score:ty, $mask:ty) => {
        $crate::sm90_forward_kernel!(@entry $name, $t, $t, $crate::abi::sm90::CONFIGS[$cfg], $varlen, false, $flavor, $score, $mask, 2);
    };
    // FP8 (e4m3) Q, K and V, output `$t`: configuration `$cfg` of [`flashrs_abi::sm90::FP8_CONFIGS`], plain.
    (@fp8 $name:ident, $t:ty, $cfg:expr, $varlen:literal) => {
        $crate::sm90_forward_kernel!(@entry $name, $crate::dtype::E4m3, $t, $crate::abi::sm90::FP8_CONFIGS[$cfg], $varlen, false, Plain,
            $crate::mods::Plain, $crate::mask::Mask, 1);
    };
    // K and V from paged caches, plain attention: two more maps, V's 8-row and 1-row boxes.
    (@paged $name:ident, $t:ty, $cfg:expr, $varlen:literal) => {
        $crate::sm90_forward_kernel!(@entry $name, $t, $t, $crate::abi::sm90::CONFIGS[$cfg], $varlen, true, Plain,
            $crate::mods::Plain, $crate::mask::Mask, 2, _v8, _v1);
    };
    (@rows $name:ident) => { [core::ptr::null(); 2] };
    (@rows $name:ident, $v8:ident, $v1:ident) => { [$crate::param_tensor_map!($name, 3), $crate::param_tensor_map!($name, 4)] };
    (@entry $name:ident, $inputs:ty, $t:ty, $config:expr, $varlen:literal, $paged:literal, $flavor:ident, $score:ty, $mask:ty, $eb:literal
        $(, $rows:ident)*) => {
        /// Hopper forward attention entry point (see the device crate's `hopper` module).
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $name(_q: $crate::arch::tma::TensorMapParam, _k: $crate::arch::tma::TensorMapParam,
            _v: $crate::arch::tma::TensorMapParam, $($rows: $crate::arch::tma::TensorMapParam,)* p: $crate::abi::FwdParams) {
            const C: $crate::abi::HopperConfig = $config;
            const F: $crate::abi::Flavor = $crate::abi::Flavor::$flavor;
            const FP8: u32 = if $eb == 1 { $crate::abi::Fp8::code(Some($crate::abi::Fp8::E4m3)) } else { 0 };
            $crate::hopper::entry_directives::<{ C.threads() }>();
            unsafe {
                core::arch::asm!("// flashrs-kernel: sm90 {v} {t} {d} {dv} {bn} {s} {c} {pipe} {m} {i}", v = const $varlen as u32 + 2 * $paged as u32,
                    t = const <$t as $crate::dtype::Element>::DTYPE.code(), d = const C.head_dim, dv = const C.head_dim_v,
                    bn = const C.block_n, s = const C.stages, c = const C.consumers, pipe = const C.pipelined as u32,
                    m = const F.code(), i = const FP8, options(nomem, nostack, preserves_flags));
            }
            let maps = $crate::hopper::producer::Maps {
                q: $crate::param_tensor_map!($name, 0),
                k: $crate::param_tensor_map!($name, 1),
                v: $crate::param_tensor_map!($name, 2),
                v_rows: $crate::sm90_forward_kernel!(@rows $name $(, $rows)*),
            };
            unsafe {
                $crate::hopper::flash_fwd_sm90::<$inputs, $t, $score, $mask, { C.head_dim }, { C.head_dim_v }, { C.block_m() }, { C.block_n },
                    { C.stages }, { C.block_n / 2 }, { C.head_dim_v / 2 }, { C.block_n * $eb / 32 }, { C.producer_regs(F, $paged) },
                    { C.consumer_regs(F, $paged) }, { C.pipelined }, $varlen, $paged, $eb>(maps, &p)
            }
        }
    };
}

/// The shipped Hopper entry points ([`crate::sm90_forward_kernel`]), one per (element type,
/// configuration, fixed or variable length, [`flashrs_abi::Flavor`]: plain, with the attention modifications
/// of [`flashrs_abi::ModParams`] ([`Builtin`] scores, the [`Window`] mask), or those over a
/// block mask ([`Sparse`])). The build checks each name against its marker.
macro_rules! sm90_kernels {
    ($($cfg:literal, $varlen:literal, $mods:ident => $f16:ident, $bf16:ident;)*) => {$(
        sm90_kernels!(@one $f16, F16, $cfg, $varlen, $mods);
        sm90_kernels!(@one $bf16, Bf16, $cfg, $varlen, $mods);
    )*};
    (@one $name:ident, $t:ty, $cfg:literal, $varlen:literal, plain) => {
        sm90_kernels!(@entry $name, $t, $cfg, $varlen, Plain, Plain, Mask);
    };
    (@one $name:ident, $t:ty, $cfg:literal, $varlen:literal, mods) => {
        sm90_kernels!(@entry $name, $t, $cfg, $varlen, Mods, Builtin, Window);
    };
    (@one $name:ident, $t:ty, $cfg:literal, $varlen:literal, sparse) => {
        sm90_kernels!(@entry $name, $t, $cfg, $varlen, Sparse, Builtin, Sparse<Window>);
    };
    (@entry $name:ident, $t:ty, $cfg:literal, $varlen:literal, $flavor:ident, $score:ty, $mask:ty) => {
        #[cfg(feature = "entries")]
        crate::sm90_forward_kernel!($name, $t, $cfg, $varlen, $flavor, $score, $mask);
    };
}

sm90_kernels! {
    0, false, plain => flash_fwd_sm90_f16_d64_192x128s3, flash_fwd_sm90_bf16_d64_192x128s3;
    1, false, plain => flash_fwd_sm90_f16_d128_128x128s2, flash_fwd_sm90_bf16_d128_128x128s2;
    2, false, plain => flash_fwd_sm90_f16_d256_128x64s2, flash_fwd_sm90_bf16_d256_128x64s2;
    3, false, plain => flash_fwd_sm90_f16_d64_128x128s3, flash_fwd_sm90_bf16_d64_128x128s3;
    4, false, plain => flash_fwd_sm90_f16_d64_192x128s3_serial, flash_fwd_sm90_bf16_d64_192x128s3_serial;
    5, false, plain => flash_fwd_sm90_f16_d128_128x128s2_serial, flash_fwd_sm90_bf16_d128_128x128s2_serial;
    6, false, plain => flash_fwd_sm90_f16_d256_128x64s2_serial, flash_fwd_sm90_bf16_d256_128x64s2_serial;
    7, false, plain => flash_fwd_sm90_f16_d64_128x128s3_serial, flash_fwd_sm90_bf16_d64_128x128s3_serial;
    // Variable-length twins of the defaults ([`flashrs_abi::sm90::DEFAULTS`]).
    0, true, plain => flash_fwd_sm90_varlen_f16_d64_192x128s3, flash_fwd_sm90_varlen_bf16_d64_192x128s3;
    1, true, plain => flash_fwd_sm90_varlen_f16_d128_128x128s2, flash_fwd_sm90_varlen_bf16_d128_128x128s2;
    2, true, plain => flash_fwd_sm90_varlen_f16_d256_128x64s2, flash_fwd_sm90_varlen_bf16_d256_128x64s2;
    // With modifications, fixed and variable length ([`flashrs_abi::sm90::MODS`]).
    3, false, mods => flash_fwd_sm90_mods_f16_d64_128x128s3, flash_fwd_sm90_mods_bf16_d64_128x128s3;
    1, false, mods => flash_fwd_sm90_mods_f16_d128_128x128s2, flash_fwd_sm90_mods_bf16_d128_128x128s2;
    2, false, mods => flash_fwd_sm90_mods_f16_d256_128x64s2, flash_fwd_sm90_mods_bf16_d256_128x64s2;
    3, true, mods => flash_fwd_sm90_varlen_mods_f16_d64_128x128s3, flash_fwd_sm90_varlen_mods_bf16_d64_128x128s3;
    1, true, mods => flash_fwd_sm90_varlen_mods_f16_d128_128x128s2, flash_fwd_sm90_varlen_mods_bf16_d128_128x128s2;
    2, true, mods => flash_fwd_sm90_varlen_mods_f16_d256_128x64s2, flash_fwd_sm90_varlen_mods_bf16_d256_128x64s2;
    // Block-sparse, fixed and variable length ([`flashrs_abi::sm90::MODS`]).
    3, false, sparse => flash_fwd_sm90_sparse_f16_d64_128x128s3, flash_fwd_sm90_sparse_bf16_d64_128x128s3;
    1, false, sparse => flash_fwd_sm90_sparse_f16_d128_128x128s2, flash_fwd_sm90_sparse_bf16_d128_128x128s2;
    2, false, sparse => flash_fwd_sm90_sparse_f16_d256_128x64s2, flash_fwd_sm90_sparse_bf16_d256_128x64s2;
    3, true, sparse => flash_fwd_sm90_varlen_sparse_f16_d64_128x128s3, flash_fwd_sm90_varlen_sparse_bf16_d64_128x128s3;
    1, true, sparse => flash_fwd_sm90_varlen_sparse_f16_d128_128x128s2, flash_fwd_sm90_varlen_sparse_bf16_d128_128x128s2;
    2, true, sparse => flash_fwd_sm90_varlen_sparse_f16_d256_128x64s2, flash_fwd_sm90_varlen_sparse_bf16_d256_128x64s2;
    // V narrower than Q and K ([`flashrs_abi::sm90::VALUE_DIMS`]), every flavor.
    8, false, plain => flash_fwd_sm90_f16_d192v128_128x128s2, flash_fwd_sm90_bf16_d192v128_128x128s2;
    8, true, plain => flash_fwd_sm90_varlen_f16_d192v128_128x128s2, flash_fwd_sm90_varlen_bf16_d192v128_128x128s2;
    8, false, mods => flash_fwd_sm90_mods_f16_d192v128_128x128s2, flash_fwd_sm90_mods_bf16_d192v128_128x128s2;
    8, true, mods => flash_fwd_sm90_varlen_mods_f16_d192v128_128x128s2, flash_fwd_sm90_varlen_mods_bf16_d192v128_128x128s2;
    8, false, sparse => flash_fwd_sm90_sparse_f16_d192v128_128x128s2, flash_fwd_sm90_sparse_bf16_d192v128_128x128s2;
    8, true, sparse => flash_fwd_sm90_varlen_sparse_f16_d192v128_128x128s2, flash_fwd_sm90_varlen_sparse_bf16_d192v128_128x128s2;
}

/// The entry points of one [`crate::sm90_forward_kernel`] variant arm (`paged`: plain
/// attention over paged K/V caches, [`flashrs_abi::sm90::PAGED`]; `fp8`: e4m3 Q, K and V,
/// [`flashrs_abi::sm90::FP8_CONFIGS`]), f16 and bf16 output, fixed and variable length.
macro_rules! sm90_variant_kernels {
    ($arm:ident: $($cfg:literal, $varlen:literal => $f16:ident, $bf16:ident;)*) => {$(
        #[cfg(feature = "entries")]
        crate::sm90_forward_kernel!(@$arm $f16, F16, $cfg, $varlen);
        #[cfg(feature = "entries")]
        crate::sm90_forward_kernel!(@$arm $bf16, Bf16, $cfg, $varlen);
    )*};
}

sm90_variant_kernels! { paged:
    3, false => flash_fwd_sm90_paged_f16_d64_128x128s3, flash_fwd_sm90_paged_bf16_d64_128x128s3;
    1, false => flash_fwd_sm90_paged_f16_d128_128x128s2, flash_fwd_sm90_paged_bf16_d128_128x128s2;
    2, false => flash_fwd_sm90_paged_f16_d256_128x64s2, flash_fwd_sm90_paged_bf16_d256_128x64s2;
    3, true => flash_fwd_sm90_varlen_paged_f16_d64_128x128s3, flash_fwd_sm90_varlen_paged_bf16_d64_128x128s3;
    1, true => flash_fwd_sm90_varlen_paged_f16_d128_128x128s2, flash_fwd_sm90_varlen_paged_bf16_d128_128x128s2;
    2, true => flash_fwd_sm90_varlen_paged_f16_d256_128x64s2, flash_fwd_sm90_varlen_paged_bf16_d256_128x64s2;
}

sm90_variant_kernels! { fp8:
    0, false => flash_fwd_sm90_f16_e4m3_d64_192x128s3, flash_fwd_sm90_bf16_e4m3_d64_192x128s3;
    1, false => flash_fwd_sm90_f16_e4m3_d128_192x128s3_serial, flash_fwd_sm90_bf16_e4m3_d128_192x128s3_serial;
    2, false => flash_fwd_sm90_f16_e4m3_d256_128x128s2_serial, flash_fwd_sm90_bf16_e4m3_d256_128x128s2_serial;
    0, true => flash_fwd_sm90_varlen_f16_e4m3_d64_192x128s3, flash_fwd_sm90_varlen_bf16_e4m3_d64_192x128s3;
    1, true => flash_fwd_sm90_varlen_f16_e4m3_d128_192x128s3_serial, flash_fwd_sm90_varlen_bf16_e4m3_d128_192x128s3_serial;
    2, true => flash_fwd_sm90_varlen_f16_e4m3_d256_128x128s2_serial, flash_fwd_sm90_varlen_bf16_e4m3_d256_128x128s2_serial;
}
