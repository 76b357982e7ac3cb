//! PTX instruction wrappers, one file per family. Each wrapper is `#[inline(always)]` and named
//! after the instruction it emits; operand shapes are in the types.
pub mod atom;
pub mod barrier;
#[cfg(target_feature = "sm_90a")]
pub mod bulk;
pub mod cp_async;
pub mod cvt;
pub mod ex2;
pub mod fma;
#[cfg(target_feature = "sm_90a")]
pub mod fence;
pub mod ids;
pub mod ldmatrix;
pub mod mbarrier;
pub mod mma;
pub mod prmt;
#[cfg(target_feature = "sm_90a")]
pub mod setmaxnreg;
pub mod shfl;
pub mod smem;
pub mod timer;
#[cfg(target_feature = "sm_90a")]
pub mod tma;
#[cfg(target_feature = "sm_90a")]
pub mod wgmma;
#[cfg(target_feature = "sm_90a")]
pub mod wgmma_mn;
