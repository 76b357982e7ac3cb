//! The tensors of a call as the planner sees them: device addresses and capacities, and their
//! element type.
use crate::element::{DType, Fp8};

/// A buffer as the planner sees it: device address and capacity in elements.
///
/// The capacity counts elements of the tensor's own type: [`Buffers::dtype`] (2 bytes) for Q,
/// K, V and the output (K and V: [`Buffers::kv`], 1 byte, where that is set; Q likewise with
/// [`Buffers::fp8_queries`]), `f32` for the log-sum-exp, `i32` for index arrays. The planner checks
/// every element the kernel will touch against it, so it must be the allocation's true size
/// (from `ptr` on), never more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferRef {
    /// Device address.
    pub ptr: u64,
    /// Capacity in elements.
    pub len: usize,
}

impl BufferRef {
    /// The buffer at device address `ptr` holding `len` elements.
    pub fn new(ptr: u64, len: usize) -> Self {
        BufferRef { ptr, len }
    }
}

/// The tensors of one call, as device addresses and capacities, and their element type: built
/// by [`crate::Gpu::attention_forward`] from typed buffers, or by the caller for
/// [`crate::Gpu::attention_forward_raw`] and [`crate::AttentionParams::plan`]. The index arrays
/// of variable-length and paged calls are part of the call's [`crate::Layout`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffers {
    /// Element type of Q, K, V and the output.
    pub dtype: DType,
    /// The 8-bit element type of K and V (an FP8 cache; see [`Buffers::kv`]), or `None` for
    /// `dtype`.
    pub kv: Option<Fp8>,
    /// The 8-bit element type of Q (and then of K and V; see [`Buffers::fp8_queries`]), or
    /// `None` for `dtype`, which stays the output's.
    pub query_fp8: Option<Fp8>,
    /// Queries.
    pub q: BufferRef,
    /// Keys (a paged call: the K cache).
    pub k: BufferRef,
    /// Values (a paged call: the V cache).
    pub v: BufferRef,
    /// Output.
    pub o: BufferRef,
    /// Log-sum-exp output (f32 `[batch, heads_q, seqlen_q]`, or `[heads_q, total_q]` in a
    /// variable-length call), if wanted.
    pub lse: Option<BufferRef>,
}

impl Buffers {
    /// Q, K, V and the output, of element type `dtype`, without a log-sum-exp.
    pub fn new(dtype: DType, q: BufferRef, k: BufferRef, v: BufferRef, o: BufferRef) -> Self {
        Buffers { dtype, q, k, v, o, lse: None, kv: None, query_fp8: None }
    }

    /// K and V hold 8-bit floats of format `kv` (their capacities count bytes), dequantized by
    /// the call's [`crate::AttentionParamsBuilder::kv_descale`].
    pub fn kv(mut self, kv: Fp8) -> Self {
        self.kv = Some(kv);
        self
    }

    /// Q, K and V hold 8-bit floats of format `f` (their capacities count bytes), dequantized
    /// by the call's [`crate::AttentionParamsBuilder::q_descale`] and
    /// [`crate::AttentionParamsBuilder::kv_descale`]; the output stays of [`Buffers::dtype`].
    /// sm_90a only (the FP8 tensor cores' `wgmma`), [`Fp8::E4m3`] only.
    pub fn fp8_queries(mut self, f: Fp8) -> Self {
        self.query_fp8 = Some(f);
        self.kv = Some(f);
        self
    }
    /// Adds the log-sum-exp output (f32).
    pub fn lse(mut self, lse: BufferRef) -> Self {
        self.lse = Some(lse);
        self
    }
}
