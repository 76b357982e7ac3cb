//! `ldmatrix.sync.aligned.m8n8.b16`: 8x8 16-bit matrices from shared memory into the
//! fragment layout `mma.sync` expects. Lane `8*i + r` gives the address of row `r` of matrix `i`.

macro_rules! ldmatrix {
    ($(#[$doc:meta])* $name:ident, $instr:literal, $n:literal, [$($reg:ident),+]) => {
        $(#[$doc])*
        #[inline(always)]
        pub unsafe fn $name(addr: u32) -> [u32; $n] {
            $(let $reg: u32;)+
            unsafe {
                core::arch::asm!(concat!($instr, " {{", ldmatrix!(@list $($reg),+), "}}, [{addr}];"),
                    $($reg = out(reg32) $reg,)+ addr = in(reg32) addr, options(readonly, nostack))
            }
            [$($reg),+]
        }
    };
    (@list $first:ident $(, $rest:ident)*) => { concat!("{", stringify!($first), "}" $(, ", {", stringify!($rest), "}")*) };
}

ldmatrix!(/// One 8x8 matrix (lanes 0-7 give addresses).
    ldmatrix_x1, "ldmatrix.sync.aligned.m8n8.x1.shared.b16", 1, [a]);
ldmatrix!(/// Two 8x8 matrices (lanes 0-15 give addresses).
    ldmatrix_x2, "ldmatrix.sync.aligned.m8n8.x2.shared.b16", 2, [a, b]);
ldmatrix!(/// Four 8x8 matrices (all lanes give addresses).
    ldmatrix_x4, "ldmatrix.sync.aligned.m8n8.x4.shared.b16", 4, [a, b, c, d]);
ldmatrix!(/// One 8x8 matrix, transposed.
    ldmatrix_x1_trans, "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16", 1, [a]);
ldmatrix!(/// Two 8x8 matrices, transposed.
    ldmatrix_x2_trans, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", 2, [a, b]);
ldmatrix!(/// Four 8x8 matrices, transposed.
    ldmatrix_x4_trans, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", 4, [a, b, c, d]);
