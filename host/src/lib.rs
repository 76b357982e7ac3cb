//! FlashAttention-class scaled-dot-product attention for NVIDIA GPUs, with the kernels written
//! in Rust (the `kernels-gpu` crate, compiled by rustc's NVPTX backend) and launched from Rust
//! on cust's or cudarc's buffers and streams.
//!
//! ```no_run
//! # #[cfg(feature = "cust")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use cust::memory::{CopyDestination, DeviceBuffer};
//! use cust::stream::{Stream, StreamFlags};
//! use flashrs::{AttentionParams, Gpu};
//! use half::f16;
//!
//! // GPU 0: retains its primary context, makes it current, loads the kernels for its architecture.
//! let gpu = Gpu::new(0)?;
//! let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
//!
//! // batch 2, 1024 query and key rows, 16 heads of dimension 128, causal; tensors are
//! // contiguous [batch, seqlen, heads, head_dim] unless strides say otherwise.
//! let params = AttentionParams::builder().batch(2).seqlen(1024).heads_q(16).head_dim(128).causal(true).build()?;
//! let n = params.contiguous_lens()?;
//! let q = DeviceBuffer::from_slice(&vec![f16::from_f32(0.5); n.q])?;
//! let k = DeviceBuffer::from_slice(&vec![f16::from_f32(-0.25); n.k])?;
//! let v = DeviceBuffer::from_slice(&vec![f16::from_f32(0.75); n.v])?;
//! let mut out = DeviceBuffer::from_slice(&vec![f16::ZERO; n.out])?;
//! let mut lse = DeviceBuffer::<f32>::zeroed(n.lse)?; // optional: f32 [batch, heads, seqlen_q]
//!
//! // Validates everything, then queues the kernel on `stream`.
//! gpu.attention_forward(&stream, &params, &q, &k, &v, &mut out, Some(&mut lse))?;
//! stream.synchronize()?;
//!
//! let mut host = vec![f16::ZERO; n.out];
//! out.copy_to(&mut host[..])?;
//! // V is the same everywhere, so every output element is that value.
//! assert!(host.iter().all(|x| (x.to_f32() - 0.75).abs() < 1e-3));
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "cust"))]
//! # fn main() {}
//! ```
//!
//! # What it is
//!
//! Attention, `out = softmax(scale * Q K^T + mask) V`, and its backward pass
//! ([`Gpu::attention_backward`], [`backward`]), computed the
//! FlashAttention way: tiled, with an online softmax, never materialising the
//! `seqlen_q x seqlen_k` score matrix, on the tensor cores (`mma.sync` on sm_80 and newer;
//! TMA and `wgmma` on H100/H200). Semantics follow FlashAttention-2's `flash_attn_func`. The
//! only run-time requirement is the NVIDIA driver (`libcuda`, CUDA 12.0 or newer); building
//! needs stable Rust, no CUDA toolkit and no nightly ([`kernels`] says how).
//!
//! # Features and limits
//!
//! * **Backends** (cargo features): `cust` (default) takes cust's `DeviceBuffer` / `DeviceSlice`
//!   and `Stream`, and links libcuda at build time as cust does; `cudarc` takes cudarc's
//!   `CudaSlice` / `CudaView` / `CudaViewMut` and `CudaStream` (recording each access for
//!   cudarc's stream synchronisation) and loads libcuda at run time, so a program using only it
//!   needs no CUDA installation to build. Both go through one launch path: a table of driver
//!   functions resolved through the backend's `cuGetProcAddress`.
//! * **Element types**: f16 and bf16 ([`DType`]; [`Element`] for the `half` crate's types,
//!   version 1 for cust and version 2 for cudarc); K and V may instead be FP8 caches
//!   ([`E4m3`], [`E5m2`] through [`KvElement`], dequantized by [`descale`]'s factors). Accumulation and softmax are f32; the
//!   log-sum-exp is f32.
//! * **Head dimension**: any multiple of 8 from 8 to 256. 64, 128 and 256 are native; others run
//!   on the kernel of the next of those with the extra columns zero-padded on load (and not
//!   written back), so e.g. 96 costs as much as 128.
//!   The default softmax scale is `1 / sqrt(head_dim)` of the real `head_dim`;
//!   [`AttentionParamsBuilder::softmax_scale`] sets another.
//! * **V's head dimension** ([`AttentionParamsBuilder::head_dim_v`]): V and the output may have
//!   their own, any multiple of 8 up to 256 (DeepSeek's Q/K 192 with V 128). The Hopper path has
//!   kernels for Q/K 136-192 with V 72-128; other pairs run on the kernel of the wider of the
//!   two, zero-padding the narrower (the backward pass, on either family, always the latter).
//! * **Causal masking**, aligned to the bottom-right corner as in FlashAttention 2.1+: query
//!   row `i` sees keys `j <= i + seqlen_k - seqlen_q`. With `seqlen_q > seqlen_k`, the first
//!   `seqlen_q - seqlen_k` rows see no key at all (their output is 0, their log-sum-exp `-inf`).
//! * **Grouped-query and multi-query attention**: `heads_q` a multiple of `heads_kv`; query
//!   head `h` reads key/value head `h / (heads_q / heads_kv)`.
//! * **Sequence lengths**: any `seqlen_q, seqlen_k >= 0` up to `2^30 - 1`, independent of each
//!   other and of the tile sizes. A call with no batch, head or query row launches nothing and
//!   does not look at the buffers; with `seqlen_k == 0` K and V are never read.
//! * **Layouts**: each tensor is `[batch, seqlen, heads, head_dim]` with its own element
//!   strides for batch, row and head ([`Strides`]); the last dimension must be contiguous.
//!   Default is contiguous `[batch, seqlen, heads, head_dim]` (FlashAttention's layout);
//!   [`DimOrder::Bhsd`] gives PyTorch's `[batch, heads, seqlen, head_dim]`. Strides must be
//!   non-negative multiples of 8 elements and base addresses 16-byte aligned.
//! * **Log-sum-exp**: optional f32 output, contiguous `[batch, heads_q, seqlen_q]`, the natural
//!   log of the sum of `exp(scale * q.k)` over the visible keys.
//! * **Inference shapes**, all through the one entry point, the call's [`Layout`] saying which:
//!   variable-length packed batches ([`Rows::Packed`]) with the offsets on the GPU, as
//!   `flash_attn_varlen_func` takes them ([`AttentionParamsBuilder::varlen_device`]; the
//!   kernels clamp them), or on the host ([`AttentionParamsBuilder::varlen`]); paged K/V
//!   caches with a block table and per-sequence key counts ([`PagedKv`]), also under packed
//!   queries (a serving step of decode rows and prefill chunks in one call); decode with
//!   split-KV chosen for the GPU and GQA heads packed into one query block.
//! * **Kernels** ([`KernelChoice`]): `Auto` (default) picks the fastest kernel the GPU has for
//!   the call; `MmaSync` is the FlashAttention-2-style kernel, for every sm_80+ GPU; `Wgmma`
//!   is the FlashAttention-3-style Hopper kernel (TMA, `wgmma`, warp specialisation; sm_90a).
//!   Tile configurations ([`tiles::CONFIGS`], [`sm90::CONFIGS`]) can be forced for tuning.
//! * **GPUs**: compute capability 8.0 and newer. Plans fit the GPU they are made for
//!   ([`Target`]): every chosen kernel fits its shared memory (163 KB per CTA on sm_80, 99 KB
//!   on sm_86/89, 227 KB on sm_90), or planning fails with a typed error. Machine code ships
//!   for sm_80, sm_86, sm_89 and sm_90a; other GPUs compile the sm_80 PTX.
//! * **Attention modifications** ([`mods`]): sliding windows (FlashAttention's `window_size`,
//!   combinable with causal; key tiles no row sees are never read), softcapping, ALiBi slopes
//!   per head or per (batch, head), learnable sinks; alone or together, fixed-length or
//!   variable-length, on both kernel families, not with paged caches or split-KV.
//! * **Block sparsity** ([`sparse`]): block masks in FlexAttention's form (per batch entry,
//!   head and query block, the key blocks to compute), built on the host from a dense mask or
//!   a pattern, on the GPU from a dense mask ([`dense_mask`], [`Gpu::block_mask_from_dense`]),
//!   or by the caller's own kernel; combinable with the modifications above.
//! * **Modifications of your own** ([`custom`]): forward and backward main kernels built by
//!   the caller's crate from `kernels-gpu`'s bodies with its own `ScoreMod` or `MaskMod`,
//!   loaded with [`Gpu::load_custom_kernels`] and launched by this planner
//!   ([`Gpu::attention_forward_custom`], [`Gpu::attention_backward_custom`]) with the caller's
//!   data ([`AttentionParamsBuilder::user_data`]).
//! * **Ring attention** (feature `nccl`; module `ring`): one attention call over a sequence
//!   sharded across the GPUs of a host (context parallelism), K/V shards passed around a ring
//!   with NCCL while each GPU attends the shard in hand, partial results merged by their
//!   log-sum-exps; causal calls shard zigzag so every GPU does the same work; a launcher runs
//!   one thread per GPU.
//! * **Backward**: dQ, dK, dV with the forward's semantics (not paged caches) on a Hopper and
//!   an `mma.sync` kernel family: windows and ALiBi (both), softcap (on `mma.sync`), sinks and their
//!   gradient, block masks, V's own head dimension; [`AttentionParams::deterministic`] for
//!   bit-identical gradients.
//! * **Not covered**: dropout, fp8.
//!
//! Every call is validated on the host before anything is launched ([`AttentionParams::plan`],
//! pure host code): a shape, stride, alignment or buffer-size problem, a null address, an
//! output overlapping another tensor, or a kernel that does not fit the GPU is an [`Error`]
//! naming the problem, never an out-of-bounds access, a race or a failed launch.
//!
//! # Entry points
//!
//! * [`Gpu::attention_forward`]: typed buffers of any CUDA crate implementing [`memory`]'s
//!   traits (cust and cudarc out of the box), the element type taken from them. Safe.
//! * [`Gpu::attention_forward_raw`]: device addresses with capacities in elements
//!   ([`Buffers`] of [`BufferRef`]) and a raw `CUstream` handle, for other CUDA crates.
//!   `unsafe`, because the capacities and lifetimes cannot be checked.
//!
//! A [`Gpu`] holds the device's **primary context** (opened with [`Gpu::new`] through cust, or
//! `Gpu::from_cudarc` from a cudarc context), the one the CUDA runtime, cudarc and candle use:
//! their allocations and streams can be passed as they are. Each entry point makes that context
//! current on the calling thread where it is not, and refuses a stream of another context.
//!
//! # From a call to a launch
//!
//! One pipeline serves every call: [`validate`](mod@validate) checks the parameters and buffers
//! into a value that exists only for a valid call; [`select`](mod@select) chooses the
//! [`Kernel`] for the [`Target`] GPU (family, variant, tile configuration, splits, GQA packing,
//! persistence); [`plan`](mod@plan) builds the [`LaunchPlan`], which holds everything the
//! launch needs; [`Gpu::launch`] launches any plan. The kernel parameters, tile tables, kernel
//! identities and grid order are the [`abi`] crate's, shared with the device code.
//!
//! # Modules
//!
//! * [`params`](mod@params), [`layout`] and [`mods`]: what a call computes, the shape of its
//!   data, and its attention modifications.
//! * [`buffers`] and [`memory`]: the tensors as the planner sees them, and the typed buffers
//!   and streams of CUDA crates.
//! * [`validate`](mod@validate), [`select`](mod@select), [`plan`](mod@plan), [`launch`]: the
//!   pipeline from a call to a launch; [`target`]: the GPU a plan is made for.
//! * [`workspace`]: the workspaces split-KV, persistent and variable-length launches use.
//! * [`device`]: [`Gpu`]; [`kernels`]: the shipped kernel images and the kernel ABI;
//!   [`custom`]: the caller's own kernels.
//! * `ring` (feature `nccl`): ring attention across GPUs.
//! * [`error`]: [`Error`]; [`element`]: [`Element`] and [`DType`].
//! * [`tensor_map`]: Hopper TMA descriptors (`cuTensorMapEncodeTiled`).
#![deny(missing_docs)]
// Without a backend the crate plans calls but opens no GPU.
#![cfg_attr(not(any(feature = "cust", feature = "cudarc")), allow(dead_code, unused_macros))]

pub use flashrs_abi as abi;

mod backend;
pub mod backward;
pub mod buffers;
pub mod custom;
pub mod dense_mask;
pub mod descale;
pub mod device;
mod driver;
pub mod element;
pub mod error;
mod forward;
pub mod kernels;
pub mod launch;
pub mod layout;
pub mod memory;
pub mod mods;
pub mod params;
pub mod plan;
#[cfg(feature = "nccl")]
pub mod ring;
pub mod select;
pub mod sparse;
pub mod target;
pub mod tensor_map;
pub mod validate;
pub mod workspace;

pub use backward::{BackwardPlan, GradBuffers, SparseLists};
pub use buffers::{BufferRef, Buffers};
pub use custom::CustomKernels;
pub use dense_mask::DenseMaskShape;
pub use descale::{Descale, Descales};
pub use device::Gpu;
pub use element::{DType, E4m3, E5m2, Element, Fp8, KvElement, QueryElement};
pub use error::{Error, Result};
pub use flashrs_abi::{AccumLayout, BlockSparse, BwdConfig, Flavor, BwdParams, BwdSm90Config, BwdStep, FwdParams, HopperConfig, Kernel, ModParams, TileConfig, Variant, sm90, tiles};
pub use layout::{ArraySource, DeviceArray, DeviceIndex, DeviceOffsets, IndexSource, Kv, Layout, Offsets, PagedKv, Pages, Rows};
pub use memory::{DeviceRead, DeviceWrite, Guards, LaunchStream};
pub use mods::{Alibi, Mods, Window};
pub use sparse::{Block, BlockMask, HostBlockMask};
pub use params::{TensorLens, AttentionParams, AttentionParamsBuilder, DimOrder, KernelChoice, KernelPath, Strides};
pub use plan::{LaunchPlan, SplitPlan};
pub use target::{Arch, Target};

/// The cust crate this library's `cust` backend takes buffers and streams from, and its
/// `half` (version 1).
#[cfg(feature = "cust")]
pub use {cust, half};

/// The cudarc crate this library's `cudarc` backend takes buffers and streams from, and its
/// `half` (version 2).
#[cfg(feature = "cudarc")]
pub use {cudarc, half2};
