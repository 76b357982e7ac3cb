//! Dynamic shared memory, and 16-byte shared- and global-memory accesses.

/// Declares `dsmem`, the one extern array of dynamic shared memory that kernels carve up by
/// byte offsets ([`dsmem_base`]). Every PTX module with kernels declares it once: this crate
/// does here, and a crate that declares its own entry points with [`crate::mma_forward_kernel`]
/// or [`crate::sm90_forward_kernel`] invokes this at its root (its module holds only its own
/// code).
#[macro_export]
macro_rules! dynamic_shared_memory {
    () => {
        core::arch::global_asm!(".extern .shared .align 1024 .b8 dsmem[];");
    };
}

crate::dynamic_shared_memory!();

/// 32-bit shared-state-space address of the start of dynamic shared memory.
#[inline(always)]
pub fn dsmem_base() -> u32 {
    let r: u32;
    unsafe { core::arch::asm!("mov.u32 {r}, dsmem;", r = out(reg32) r, options(pure, nomem, nostack)) }
    r
}

/// `ld.shared.v4.b32`
#[inline(always)]
pub unsafe fn ld_shared_v4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    unsafe {
        core::arch::asm!("ld.shared.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            p = in(reg32) addr, options(readonly, nostack))
    }
    [a, b, c, d]
}

/// `ld.shared.v2.b32`
#[inline(always)]
pub unsafe fn ld_shared_v2(addr: u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    unsafe {
        core::arch::asm!("ld.shared.v2.b32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, p = in(reg32) addr,
            options(readonly, nostack))
    }
    [a, b]
}

/// `ld.shared.b32`
#[inline(always)]
pub unsafe fn ld_shared_b32(addr: u32) -> u32 {
    let v: u32;
    unsafe { core::arch::asm!("ld.shared.b32 {v}, [{p}];", v = out(reg32) v, p = in(reg32) addr, options(readonly, nostack)) }
    v
}

/// `st.shared.b32`
#[inline(always)]
pub unsafe fn st_shared_b32(addr: u32, v: u32) {
    unsafe { core::arch::asm!("st.shared.b32 [{p}], {v};", p = in(reg32) addr, v = in(reg32) v, options(nostack)) }
}

/// `st.shared.v4.b32`
#[inline(always)]
pub unsafe fn st_shared_v4(addr: u32, v: [u32; 4]) {
    unsafe {
        core::arch::asm!("st.shared.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};",
            p = in(reg32) addr, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
            options(nostack))
    }
}

/// `st.global.v4.b32`
#[inline(always)]
pub unsafe fn st_global_v4(ptr: *mut u32, v: [u32; 4]) {
    unsafe {
        core::arch::asm!("st.global.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};",
            p = in(reg64) ptr, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
            options(nostack))
    }
}

/// `ld.global.cg.f32`: one float, cached in L2 only (never a stale L1 line of data other CTAs
/// of the same launch wrote).
#[inline(always)]
pub unsafe fn ld_global_cg_f32(ptr: *const f32) -> f32 {
    let v: f32;
    unsafe { core::arch::asm!("ld.global.cg.f32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) ptr, options(readonly, nostack)) }
    v
}

/// `ld.global.cg.v2.f32`: two floats from an 8-byte aligned address, cached in L2 only.
#[inline(always)]
pub unsafe fn ld_global_cg_v2_f32(ptr: *const f32) -> [f32; 2] {
    let (a, b): (f32, f32);
    unsafe {
        core::arch::asm!("ld.global.cg.v2.f32 {{{a}, {b}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, p = in(reg64) ptr, options(readonly, nostack))
    }
    [a, b]
}

/// `ld.global.cg.v4.f32`: four floats from a 16-byte aligned address, cached in L2 only.
#[inline(always)]
pub unsafe fn ld_global_cg_v4_f32(ptr: *const f32) -> [f32; 4] {
    let (a, b, c, d): (f32, f32, f32, f32);
    unsafe {
        core::arch::asm!("ld.global.cg.v4.f32 {{{a}, {b}, {c}, {d}}}, [{p}];",
            a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
            p = in(reg64) ptr, options(readonly, nostack))
    }
    [a, b, c, d]
}
