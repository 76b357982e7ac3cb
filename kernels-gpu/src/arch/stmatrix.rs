//! `stmatrix.sync.aligned.m8n8.b16` (sm_90): the inverse of `ldmatrix` without `.trans`. Lane
//! `8*i + r` gives the address of row `r` of matrix `i`; each lane's register `i` fills 4 bytes
//! of matrix `i`: row `lane / 4`, bytes `4 * (lane % 4)`.

/// Four 8x8 matrices (all lanes give addresses).
#[inline(always)]
pub unsafe fn stmatrix_x4(addr: u32, v: [u32; 4]) {
    unsafe {
        core::arch::asm!("stmatrix.sync.aligned.m8n8.x4.shared.b16 [{addr}], {{{a}, {b}, {c}, {d}}};",
            addr = in(reg32) addr, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack))
    }
}
