#![no_std]
#![feature(abi_ptx, asm_experimental_arch, stdarch_nvptx)]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! { loop {} }

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn add_one(x: *mut f32, n: u32) {
    let i = unsafe { core::arch::nvptx::_block_idx_x() * core::arch::nvptx::_block_dim_x() + core::arch::nvptx::_thread_idx_x() } as u32;
    if i < n { unsafe { *x.add(i as usize) += 1.0; } }
}
