//! The typed error a call is expected to return, and the check that it did.
use flashrs::Error;

/// An expected outcome: `Ok`, or an error variant with the tensor, dimension or numbers it
/// must name.
#[derive(Clone, Debug, PartialEq)]
pub enum Want {
    /// The call succeeds.
    Ok,
    /// `BufferTooSmall` for (tensor, needed, len).
    TooSmall(&'static str, u64, u64),
    /// `Misaligned` for the tensor.
    Misaligned(&'static str),
    /// `InvalidStrides` for the tensor.
    Strides(&'static str),
    /// `InvalidBuffer` for the tensor.
    Buffer(&'static str),
    /// `InvalidShape` for the dimension.
    Shape(&'static str),
    /// `UnsupportedHeadDim` with the head_dim.
    HeadDim(usize),
    /// `UnsupportedHeadDimV` with the head_dim_v.
    HeadDimV(usize),
    /// `GqaRatio` with (heads_q, heads_kv).
    Gqa(usize, usize),
    /// `LaunchLimit`.
    Launch,
    /// `SharedMemory` with (needed, available) bytes.
    SharedMemory(u64, u64),
    /// `PathUnavailable` for the path.
    PathUnavailable(&'static str),
}

/// True when `e` is the error `want` describes.
pub fn error_matches(e: &Error, want: &Want) -> bool {
    match (e, want) {
        (Error::BufferTooSmall { tensor, needed, len }, Want::TooSmall(t, n, l)) => tensor == t && needed == n && len == l,
        (Error::Misaligned { tensor, .. }, Want::Misaligned(t)) => tensor == t,
        (Error::InvalidStrides { tensor, .. }, Want::Strides(t)) => tensor == t,
        (Error::InvalidBuffer { tensor, .. }, Want::Buffer(t)) => tensor == t,
        (Error::InvalidShape { what, .. }, Want::Shape(w)) => what == w,
        (Error::UnsupportedHeadDim(d), Want::HeadDim(w)) => d == w,
        (Error::UnsupportedHeadDimV(d), Want::HeadDimV(w)) => d == w,
        (Error::GqaRatio { heads_q, heads_kv }, Want::Gqa(q, kv)) => heads_q == q && heads_kv == kv,
        (Error::LaunchLimit(_), Want::Launch) => true,
        (Error::SharedMemory { needed, available, .. }, Want::SharedMemory(n, a)) => needed == n && available == a,
        (Error::PathUnavailable { path, .. }, Want::PathUnavailable(w)) => path == w,
        _ => false,
    }
}

/// True when `r` is the outcome `want` describes.
pub fn result_matches<T>(r: &flashrs::Result<T>, want: &Want) -> bool {
    match r {
        Ok(_) => *want == Want::Ok,
        Err(e) => error_matches(e, want),
    }
}
