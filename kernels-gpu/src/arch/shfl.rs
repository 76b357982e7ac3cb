//! Warp shuffles and votes (all 32 lanes take part).

/// `shfl.sync.bfly.b32` on an f32: the value of lane `lane ^ mask`.
#[inline(always)]
pub fn shfl_sync_bfly_f32(v: f32, mask: u32) -> f32 {
    let r: f32;
    unsafe {
        core::arch::asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 0x1f, -1;",
            r = out(reg32) r, v = in(reg32) v, m = in(reg32) mask, options(pure, nomem, nostack))
    }
    r
}

/// `shfl.sync.idx.b32`: the value of lane `src`.
#[inline(always)]
pub fn shfl_sync_idx_u32(v: u32, src: u32) -> u32 {
    let r: u32;
    unsafe {
        core::arch::asm!("shfl.sync.idx.b32 {r}, {v}, {s}, 0x1f, -1;",
            r = out(reg32) r, v = in(reg32) v, s = in(reg32) src, options(pure, nomem, nostack))
    }
    r
}

/// Max over the 4 lanes of a quad (lanes `4g .. 4g+4`): where MMA fragments keep one row.
#[inline(always)]
pub fn quad_max_f32(v: f32) -> f32 {
    let v = v.max(shfl_sync_bfly_f32(v, 1));
    v.max(shfl_sync_bfly_f32(v, 2))
}

/// Sum over the 4 lanes of a quad.
#[inline(always)]
pub fn quad_sum_f32(v: f32) -> f32 {
    let v = v + shfl_sync_bfly_f32(v, 1);
    v + shfl_sync_bfly_f32(v, 2)
}

/// Sum over each aligned group of `lanes` lanes (a power of two up to 32; 32: the whole warp),
/// five butterfly `shfl.sync`s whatever `lanes` is, the adds past the group predicated off. Not
/// `pure`: LLVM must not sink it into a branch that only some lanes take (as it may a pure
/// shuffle whose result one lane uses), where the other lanes would never join the shuffle.
#[inline(always)]
pub fn group_sum_f32(v: f32, lanes: u32) -> f32 {
    let r: f32;
    unsafe {
        core::arch::asm!(
            "{{ .reg .f32 t; .reg .f32 s; .reg .pred p;",
            "mov.f32 s, {v};",
            "shfl.sync.bfly.b32 t, s, 16, 0x1f, -1; setp.gt.u32 p, {n}, 16; @p add.f32 s, s, t;",
            "shfl.sync.bfly.b32 t, s, 8, 0x1f, -1; setp.gt.u32 p, {n}, 8; @p add.f32 s, s, t;",
            "shfl.sync.bfly.b32 t, s, 4, 0x1f, -1; setp.gt.u32 p, {n}, 4; @p add.f32 s, s, t;",
            "shfl.sync.bfly.b32 t, s, 2, 0x1f, -1; setp.gt.u32 p, {n}, 2; @p add.f32 s, s, t;",
            "shfl.sync.bfly.b32 t, s, 1, 0x1f, -1; setp.gt.u32 p, {n}, 1; @p add.f32 s, s, t;",
            "mov.f32 {r}, s; }}",
            v = in(reg32) v, n = in(reg32) lanes, r = out(reg32) r, options(nomem, nostack))
    }
    r
}

/// `vote.sync.ballot.b32`: bit `l` set where lane `l`'s `p` is true. Not `pure`, as
/// [`group_sum_f32`]: every lane must reach it.
#[inline(always)]
pub fn ballot_sync(p: bool) -> u32 {
    let r: u32;
    unsafe {
        core::arch::asm!("{{ .reg .pred p; setp.ne.u32 p, {v}, 0; vote.sync.ballot.b32 {r}, p, -1; }}",
            r = out(reg32) r, v = in(reg32) p as u32, options(nomem, nostack))
    }
    r
}

/// `redux.sync.min.u32` (sm_80 and newer): the least of the warp's `v`. On a value every lane
/// holds alike, ptxas learns that it is warp-uniform and keeps it (and what derives from it) in
/// a uniform register, as it keeps values computed from the launch parameters: a value loaded
/// from memory would otherwise take a register of every thread.
#[inline(always)]
pub fn redux_min_u32(v: u32) -> u32 {
    let r: u32;
    unsafe { core::arch::asm!("redux.sync.min.u32 {r}, {v}, -1;", r = out(reg32) r, v = in(reg32) v, options(nomem, nostack)) }
    r
}
