//! The tensors of a call as the planner sees them: device addresses and capacities.
use cust::memory::{DeviceCopy, DeviceMemory, DeviceSlice};

/// A buffer as the planner sees it: device address and capacity in elements.
///
/// The capacity counts elements of the tensor's own type: [`crate::AttentionParams::dtype`]
/// (2 bytes) for Q, K, V and the output, `f32` for the log-sum-exp, `i32` for index arrays.
/// The planner checks every element the kernel will touch against it, so it must be the
/// allocation's true size (from `ptr` on), never more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferRef {
    /// Device address.
    pub ptr: u64,
    /// Capacity in elements.
    pub len: usize,
}

impl BufferRef {
    /// A cust slice's address and length (its true capacity).
    pub fn of<T: DeviceCopy>(s: &DeviceSlice<T>) -> Self {
        BufferRef { ptr: s.as_raw_ptr(), len: s.len() }
    }
}

/// The tensors of one call, as device addresses and capacities: built by
/// [`crate::Gpu::attention_forward`] from cust slices, or by the caller for
/// [`crate::Gpu::attention_forward_raw`] and [`crate::AttentionParams::plan`]. The index arrays
/// of variable-length and paged calls are part of the call's [`crate::Layout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffers {
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
