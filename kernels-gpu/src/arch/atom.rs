//! Global atomics.

/// `@leader atom.acq_rel.gpu.global.add.u32` then `@leader st.shared.b32`: where `leader`
/// holds, adds 1 to the counter at `ctr` and stores the value it had to the shared address
/// `dst`; elsewhere does nothing. Acquire-release at GPU scope: what the CTA wrote before a
/// barrier that precedes this is published with the count, and what other CTAs published with
/// their counts is seen after a barrier that follows it (the barrier pattern of CUTLASS's
/// semaphores). Predicated instead of branched so that no thread-dependent branch comes before
/// that barrier (LLVM may duplicate a barrier into both arms of one).
#[inline(always)]
pub unsafe fn atom_acq_rel_gpu_add1_u32_to_shared(leader: bool, ctr: *mut u32, dst: u32) {
    unsafe {
        core::arch::asm!(
            "{{ .reg .pred p; .reg .b32 old;",
            "setp.ne.u32 p, {l}, 0;",
            "@p atom.acq_rel.gpu.global.add.u32 old, [{c}], 1;",
            "@p st.shared.b32 [{d}], old; }}",
            l = in(reg32) leader as u32, c = in(reg64) ctr, d = in(reg32) dst, options(nostack))
    }
}

/// `atom.relaxed.gpu.global.add.u32`: adds `v` to the counter at `ctr`, returns the value it
/// had. Relaxed: orders nothing else (a work counter whose claims need no data published).
#[inline(always)]
pub unsafe fn atom_relaxed_gpu_add_u32(ctr: *mut u32, v: u32) -> u32 {
    let old: u32;
    unsafe {
        core::arch::asm!("atom.relaxed.gpu.global.add.u32 {o}, [{c}], {v};",
            o = out(reg32) old, c = in(reg64) ctr, v = in(reg32) v, options(nostack))
    }
    old
}

/// `atom.acq_rel.gpu.global.add.u32`: adds `v` to the counter at `ctr`, returns the value it
/// had. This thread's earlier memory operations (atomics on other counters included) are seen
/// by whoever acquires a later value, and it sees what earlier adders released.
#[inline(always)]
pub unsafe fn atom_acq_rel_gpu_add_u32(ctr: *mut u32, v: u32) -> u32 {
    let old: u32;
    unsafe {
        core::arch::asm!("atom.acq_rel.gpu.global.add.u32 {o}, [{c}], {v};",
            o = out(reg32) old, c = in(reg64) ctr, v = in(reg32) v, options(nostack))
    }
    old
}

/// `red.relaxed.gpu.global.or.b32`: sets the bits of `v` in the word at `ptr` (bitmaps built
/// by many threads; relaxed: a barrier or the kernel's end publishes them).
#[inline(always)]
pub unsafe fn red_relaxed_gpu_or_u32(ptr: *mut u32, v: u32) {
    unsafe { core::arch::asm!("red.relaxed.gpu.global.or.b32 [{p}], {v};", p = in(reg64) ptr, v = in(reg32) v, options(nostack)) }
}

/// `red.relaxed.gpu.global.add.f32`: adds `v` to the f32 at `ptr`, returning nothing (the
/// dQ accumulation's reduction; relaxed: the order of concurrent adds is the hardware's).
#[inline(always)]
pub unsafe fn red_relaxed_gpu_add_f32(ptr: *mut f32, v: f32) {
    unsafe { core::arch::asm!("red.relaxed.gpu.global.add.f32 [{p}], {v};", p = in(reg64) ptr, v = in(reg32) v, options(nostack)) }
}

/// `red.relaxed.gpu.global.add.v2.f32` (sm_90): adds `v` to the two f32 at `ptr` (8-byte
/// aligned), returning nothing.
#[cfg(target_feature = "sm_90a")]
#[inline(always)]
pub unsafe fn red_relaxed_gpu_add_v2_f32(ptr: *mut f32, v: [f32; 2]) {
    unsafe { core::arch::asm!("red.relaxed.gpu.global.add.v2.f32 [{p}], {{{a}, {b}}};", p = in(reg64) ptr, a = in(reg32) v[0], b = in(reg32) v[1], options(nostack)) }
}

/// `red.relaxed.gpu.global.add.v4.f32` (sm_90): adds `v` to the four f32 at `ptr` (16-byte
/// aligned), returning nothing. One instruction per 16 bytes, so that a warp adds 512
/// contiguous bytes at once (the Hopper backward's dQ from registers).
#[cfg(target_feature = "sm_90a")]
#[inline(always)]
pub unsafe fn red_relaxed_gpu_add_v4_f32(ptr: *mut f32, v: [f32; 4]) {
    unsafe {
        core::arch::asm!("red.relaxed.gpu.global.add.v4.f32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg64) ptr,
            a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack))
    }
}

/// `ld.acquire.gpu.global.u32`: a counter's value; what its writers released before storing
/// it is seen by this thread's later memory operations (and, after a barrier, by its CTA's).
#[inline(always)]
pub unsafe fn ld_acquire_gpu_u32(ptr: *const u32) -> u32 {
    let v: u32;
    unsafe { core::arch::asm!("ld.acquire.gpu.global.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) ptr, options(nostack)) }
    v
}
