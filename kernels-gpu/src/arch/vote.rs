//! Warp votes.

/// `vote.sync.any.pred` over all 32 lanes: true if `pred` holds in any lane.
#[inline(always)]
pub fn vote_sync_any(pred: bool) -> bool {
    let r: u32;
    unsafe {
        core::arch::asm!(
            "{{ .reg .pred p, q; setp.ne.u32 p, {v}, 0; vote.sync.any.pred q, p, -1; selp.u32 {r}, 1, 0, q; }}",
            v = in(reg32) pred as u32, r = out(reg32) r, options(nomem, nostack))
    }
    r != 0
}
