//! Register groups that global loads and stores move as one vector access: a plain Rust load
//! or store of these types compiles to `ld/st.v4.b32` (`v2`), where an array of `f32` would be
//! split into 4-byte accesses.

/// 16 bytes: 8 elements of a 16-bit row, or 4 f32.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub struct Chunk(pub [u32; 4]);

/// 8 bytes: 2 f32.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct Pair(pub [u32; 2]);
