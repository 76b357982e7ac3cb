//! PTX instruction wrappers, one file per family. Each wrapper is `#[inline(always)]` and named
//! after the instruction it emits; operand shapes are in the types.
pub mod barrier;
pub mod cp_async;
pub mod cvt;
pub mod ex2;
pub mod ids;
pub mod ldmatrix;
pub mod mma;
pub mod shfl;
pub mod smem;
