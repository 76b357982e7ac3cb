//! One `mma.sync.aligned.m16n8k16` fed by `ldmatrix`: `D = A * B + C` with A 16x16 (row-major),
//! B given as B^T 8x16 (row n holds column n of B, k contiguous), C and D 16x8 f32 row-major.
//! One warp; 768 bytes of dynamic shared memory.
use crate::arch::barrier::bar_sync;
use crate::arch::ids::lane_id;
use crate::arch::ldmatrix::{ldmatrix_x2, ldmatrix_x4};
use crate::arch::mma::{mma_m16n8k16_f32_bf16, mma_m16n8k16_f32_f16};
use crate::arch::smem::{dsmem_base, st_shared_v4};

/// `a`: 16x16 16-bit, `bt`: 8x16 16-bit (both as 16-byte chunks), `c`, `d`: 16x8 f32;
/// `bf16` != 0 selects bf16 inputs instead of f16.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn probe_mma_m16n8k16(a: *const [u32; 4], bt: *const [u32; 4], c: *const f32, d: *mut f32, bf16: u32) {
    let lane = lane_id();
    let sa = dsmem_base();
    let sb = sa + 512;
    unsafe {
        // A: 32 chunks of 16 bytes (rows of 32 bytes); B^T: 16 chunks.
        st_shared_v4(sa + lane * 16, a.add(lane as usize).read());
        if lane < 16 {
            st_shared_v4(sb + lane * 16, bt.add(lane as usize).read());
        }
    }
    bar_sync();
    // A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15)
    // = a0..a3 of the fragment; lane l addresses row l % 16 at k (l / 16) * 8.
    let fa = unsafe { ldmatrix_x4(sa + (lane % 16) * 32 + (lane / 16) * 16) };
    // B^T rows are B's columns: matrix 0 = (n 0-7, k 0-7), matrix 1 = (n 0-7, k 8-15), so lane
    // l (< 16) addresses n = l % 8 at k ((l / 8) % 2) * 8; non-transposed ldmatrix then hands
    // lane (g, t) the pair k = 2t, 2t+1 of column n = g, which is the B fragment.
    let fb = unsafe { ldmatrix_x2(sb + (lane % 8) * 32 + ((lane / 8) % 2) * 16) };
    let (g, t) = ((lane / 4) as usize, (lane % 4) as usize);
    let idx = [g * 8 + 2 * t, g * 8 + 2 * t + 1, (g + 8) * 8 + 2 * t, (g + 8) * 8 + 2 * t + 1];
    let mut acc = [0f32; 4];
    for i in 0..4 {
        acc[i] = unsafe { c.add(idx[i]).read() };
    }
    if bf16 != 0 {
        mma_m16n8k16_f32_bf16(&mut acc, &fa, &fb);
    } else {
        mma_m16n8k16_f32_f16(&mut acc, &fa, &fb);
    }
    for i in 0..4 {
        unsafe { d.add(idx[i]).write(acc[i]) };
    }
}
