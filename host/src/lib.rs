//! FlashAttention-class scaled-dot-product attention for NVIDIA GPUs, with the kernels written
//! in Rust (the `kernels-gpu` crate), compiled to PTX and launched with `cust`.
//!
//! ```no_run
//! use cust::memory::{CopyDestination, DeviceBuffer};
//! use cust::stream::{Stream, StreamFlags};
//! use flashrs::{AttentionParams, Gpu};
//! use half::f16;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // GPU 0: retains its primary context, makes it current, loads the PTX for its architecture.
//! let gpu = Gpu::new(0)?;
//! let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
//!
//! // batch 2, 1024 query and 1024 key rows, 16 heads of dimension 128, causal; tensors are
//! // contiguous [batch, seqlen, heads, head_dim] unless strides say otherwise.
//! let params = AttentionParams::new(2, 1024, 1024, 16, 128).causal(true);
//! let (n_q, n_kv, n_lse) = params.contiguous_lens()?;
//! let q = DeviceBuffer::from_slice(&vec![f16::from_f32(0.5); n_q])?;
//! let k = DeviceBuffer::from_slice(&vec![f16::from_f32(-0.25); n_kv])?;
//! let v = DeviceBuffer::from_slice(&vec![f16::from_f32(0.75); n_kv])?;
//! let mut out = DeviceBuffer::from_slice(&vec![f16::ZERO; n_q])?;
//! let mut lse = DeviceBuffer::<f32>::zeroed(n_lse)?; // optional: f32 [batch, heads, seqlen_q]
//!
//! // Validates everything, then queues the kernel on `stream`.
//! gpu.attention_forward(&stream, &params, &q, &k, &v, &mut out, Some(&mut lse))?;
//! stream.synchronize()?;
//!
//! let mut host = vec![f16::ZERO; n_q];
//! out.copy_to(&mut host[..])?;
//! // V is the same everywhere, so every output element is that value.
//! assert!(host.iter().all(|x| (x.to_f32() - 0.75).abs() < 1e-3));
//! # Ok(())
//! # }
//! ```
//!
//! # What it is
//!
//! The forward pass of attention, `out = softmax(scale * Q K^T + mask) V`, computed the
//! FlashAttention way: tiled, with an online softmax, never materialising the
//! `seqlen_q x seqlen_k` score matrix, on the tensor cores (`mma.sync` on sm_80 and newer;
//! TMA and `wgmma` on H100/H200). It is
//! meant for Rust GPU projects that want FlashAttention-class attention without a C++ or CUDA
//! C build: the kernels are Rust (`kernels-gpu`, built with rustc's NVPTX backend), the host
//! side is this crate, and the only run-time requirement is the NVIDIA driver (`libcuda`).
//! Semantics follow FlashAttention-2's `flash_attn_func`.
//!
//! # Features and limits
//!
//! * **Element types**: f16 and bf16 ([`DType`], [`Element`] for `half::f16` /
//!   `half::bf16` of `half` 1.x, which cust 0.3 uses). Accumulation and softmax are f32; the
//!   log-sum-exp is f32.
//! * **Head dimension**: any multiple of 8 from 8 to 256. 64, 128 and 256 are native; others run
//!   on the kernel of the next of those with the extra columns zero-padded on load (and not
//!   written back), so e.g. 96 costs as much as 128. Q, K, V and the output share it.
//!   The default softmax scale is `1 / sqrt(head_dim)` of the real `head_dim`;
//!   [`AttentionParams::softmax_scale`] sets another (it must be finite).
//! * **Causal masking**, aligned to the bottom-right corner as in FlashAttention 2.1+: query
//!   row `i` sees keys `j <= i + seqlen_k - seqlen_q`. With `seqlen_q > seqlen_k`, the first
//!   `seqlen_q - seqlen_k` rows see no key at all (see below).
//! * **Grouped-query and multi-query attention**: `heads_q` a multiple of `heads_kv`
//!   ([`AttentionParams::heads_kv`]); query head `h` reads key/value head
//!   `h / (heads_q / heads_kv)`. `heads_kv = 1` is MQA.
//! * **Sequence lengths**: any `seqlen_q, seqlen_k >= 0` up to `2^30 - 1`, independent of
//!   each other and of the tile sizes (ragged last tiles are masked). Zero sizes are valid:
//!   - `batch == 0`, `heads_q == 0` or `seqlen_q == 0`: nothing to compute; the call launches
//!     nothing, returns `Ok` and does not look at the buffers (they may be empty);
//!   - `seqlen_k == 0`, or a causal row that sees no key: that row's output is 0 and its
//!     log-sum-exp is `-inf`; with `seqlen_k == 0`, K and V are never read (they may be
//!     empty or null).
//! * **Layouts**: each tensor is `[batch, seqlen, heads, head_dim]` with its own element
//!   strides for batch, row and head ([`Strides`]); the last dimension must be contiguous.
//!   Default is contiguous `[batch, seqlen, heads, head_dim]` (FlashAttention's layout);
//!   [`AttentionParams::layout_bhsd`] gives PyTorch's `[batch, heads, seqlen, head_dim]`, and
//!   [`AttentionParams::strides`] any other (views, packed QKV, KV caches with spare rows).
//!   Strides must be non-negative multiples of 8 elements and base addresses 16-byte aligned
//!   (the kernels move 16-byte vectors).
//! * **Log-sum-exp**: optional f32 output, contiguous `[batch, heads_q, seqlen_q]`, natural
//!   log of the sum of `exp(scale * q.k)` over the visible keys (what a backward pass or a
//!   split-KV merge needs); 4-byte aligned.
//! * **Kernels** ([`KernelChoice`]): `Auto` (default) picks the fastest kernel the GPU has for
//!   the call; `MmaSync` is the FlashAttention-2-style kernel on `mma.sync`, for every sm_80+
//!   GPU; `Wgmma` is the FlashAttention-3-style Hopper kernel (TMA loads, `wgmma`, warp
//!   specialisation; sm_90a only), which `Auto` uses on H100/H200 wherever it can take the
//!   call. Tile configurations ([`tiles::CONFIGS`], [`sm90::CONFIGS`]) can be forced for
//!   tuning. Every kernel is a [`Kernel`], its entry name derived from its configuration.
//! * **GPUs**: compute capability 8.0 and newer (A100, RTX 30xx/40xx, A10, L4/L40, H100/H200,
//!   ...). Plans fit the GPU they are made for ([`Target`]): every chosen kernel fits its
//!   shared memory (163 KB per CTA on sm_80, 99 KB on sm_86/89, 227 KB on sm_90), or planning
//!   fails with a typed error. Compute capability 9.0 loads the sm_90a module
//!   ([`ptx::PTX_SM90A`]), others the portable sm_80 one ([`ptx::PTX_SM80`]).
//! * **Inference shapes**, all through the one entry point, the call's [`Layout`] saying which:
//!   variable-length packed batches ([`Rows::Packed`]; Hopper kernels on H100/H200, else
//!   mma.sync) with the offsets on the GPU, as `flash_attn_varlen_func` takes them
//!   ([`AttentionParams::new_varlen_device`]; the kernels clamp them), or on the host
//!   ([`AttentionParams::new_varlen`]); paged K/V caches with a block table and per-sequence
//!   key counts ([`PagedKv`]; mma.sync), also under packed queries (a serving step of decode
//!   rows and prefill chunks in one call); decode with split-KV chosen for the GPU, GQA heads
//!   packed into one query block and 16-row tiles whose warps split the keys.
//! * **Not covered**: the backward pass, dropout, ALiBi, sliding windows, soft-capping, fp8;
//!   GQA packing for variable-length decode (decode-shaped variable-length calls split their
//!   keys and run decode tiles, but each query head reads its K/V).
//!
//! Every call is validated on the host before anything is launched ([`AttentionParams::plan`],
//! pure host code): a shape, stride, alignment or buffer-size problem, a null address, an
//! output overlapping another tensor, or a kernel that does not fit the GPU is an [`Error`]
//! naming the problem, never an out-of-bounds access, a race or a failed launch.
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
//! # Two entry points
//!
//! * [`Gpu::attention_forward`], for cust users: `&DeviceSlice<T>` buffers (`T` is
//!   `half::f16` or `half::bf16`) and a `&cust::stream::Stream`. Safe.
//! * [`Gpu::attention_forward_raw`], for projects built on other CUDA crates (cudarc, candle,
//!   runtime-API libraries): device addresses with capacities in elements
//!   ([`Buffers`] of [`BufferRef`]) and a raw `CUstream` handle (`*mut c_void`; null is the
//!   legacy default stream). `unsafe`, because the capacities and lifetimes cannot be checked.
//!
//! A [`Gpu`] holds the device's **primary context** ([`Gpu::new`] retains it through cust), the
//! same context the CUDA runtime, cudarc (`CudaContext::new(ordinal)`) and candle use: open the
//! `Gpu` with the same ordinal, and their allocations and streams can be passed as they are.
//! [`Gpu::raw_context`] returns the handle for a check. The raw entry makes that context
//! current on the calling thread when it is not; the cust entry expects it current (it is on
//! the thread that created the `Gpu`; elsewhere call [`Gpu::make_current`]).
//!
//! ```no_run
//! use std::ffi::c_void;
//! use flashrs::{AttentionParams, BufferRef, Buffers, DType, Gpu};
//!
//! /// Device addresses and stream from another CUDA crate (e.g. cudarc's
//! /// `stream.cu_stream()` and `slice.device_ptr(&stream)`), on device 0.
//! unsafe fn forward(gpu: &Gpu, stream: *mut c_void, q: u64, k: u64, v: u64, o: u64)
//!     -> flashrs::Result<()>
//! {
//!     let params = AttentionParams::new(1, 4096, 4096, 32, 128).heads_kv(8).dtype(DType::Bf16);
//!     let (n_q, n_kv, _) = params.contiguous_lens()?;
//!     let bufs = Buffers {
//!         q: BufferRef { ptr: q, len: n_q },   // capacities in elements, not bytes
//!         k: BufferRef { ptr: k, len: n_kv },
//!         v: BufferRef { ptr: v, len: n_kv },
//!         o: BufferRef { ptr: o, len: n_q },
//!         lse: None,
//!     };
//!     // SAFETY: the caller passes live allocations of at least these sizes, in device 0's
//!     // primary context, untouched by other work until `stream` has run the kernel.
//!     unsafe { gpu.attention_forward_raw(stream, &params, &bufs) }
//! }
//! ```
//!
//! # Safety contract of the raw entry
//!
//! [`Gpu::attention_forward_raw`] checks every address the kernel will form against the
//! capacities it is given (and refuses null addresses and overlapping outputs); the caller
//! guarantees what it cannot see (full text in its `# Safety` section): each [`BufferRef`] is
//! device memory usable in this GPU's context whose `len` elements from `ptr` on lie within
//! one live allocation; that memory stays allocated, and nothing else writes the inputs or
//! touches the outputs, until the stream has passed the kernel; and the stream is null or a
//! live stream of this context.
//!
//! # How the PTX is embedded
//!
//! The build script compiles `kernels-gpu` for `nvptx64-nvidia-cuda` twice (`sm_80`,
//! `sm_90a`) with the same code as `cargo xtask build-ptx`, and [`ptx`] embeds both modules as
//! text with `include_str!`. At run time [`Gpu::new`] hands the module for its GPU to the
//! driver, which JIT-compiles it; no CUDA toolkit, `nvcc` or PTX files on disk are needed.
//! Building does need the nightly pinned in `rust-toolchain.toml` with `rust-src`
//! (`-Zbuild-std=core` for the NVPTX target), and `libcuda.so` to link against (see the
//! repository's README). Projects that load kernels themselves find the modules, the kernel
//! names and the kernel ABI in [`ptx`].
//!
//! # Modules
//!
//! * [`params`](mod@params) and [`layout`]: what a call computes and the shape of its data.
//! * [`buffers`]: the tensors as the planner sees them.
//! * [`validate`](mod@validate), [`select`](mod@select), [`plan`](mod@plan), [`launch`]: the
//!   pipeline from a call to a launch; [`target`]: the GPU a plan is made for.
//! * [`workspace`]: the workspaces split-KV, persistent and variable-length launches use.
//! * [`device`]: [`Gpu`], context and module; [`ptx`]: the embedded PTX and the kernel ABI.
//! * [`error`]: [`Error`]; [`element`]: [`Element`] and [`DType`].
//! * [`reference`](mod@reference): the CPU f64 reference the kernels are tested against.
//! * [`bench`](mod@bench): CUDA-event timing used by `flashrs benchmark`.
//! * [`tensor_map`]: Hopper TMA descriptors (`cuTensorMapEncodeTiled`).
#![deny(missing_docs)]

pub use flashrs_abi as abi;

pub mod bench;
pub mod buffers;
pub mod device;
pub mod element;
pub mod error;
mod forward;
pub mod launch;
pub mod layout;
pub mod params;
pub mod plan;
pub mod ptx;
pub mod reference;
pub mod select;
pub mod target;
pub mod tensor_map;
pub mod validate;
pub mod workspace;

pub use buffers::{BufferRef, Buffers};
pub use device::Gpu;
pub use element::{DType, Element};
pub use error::{Error, Result};
pub use flashrs_abi::{FwdParams, HopperConfig, Kernel, TileConfig, Variant, sm90, tiles};
pub use layout::{DeviceIndex, DeviceOffsets, Kv, Layout, Offsets, PagedKv, Pages, Rows};
pub use params::{AttentionParams, DimOrder, KernelChoice, KernelPath, Strides};
pub use plan::{LaunchPlan, SplitPlan};
pub use target::{Arch, Target};
