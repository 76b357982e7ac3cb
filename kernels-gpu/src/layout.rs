//! Shared-memory tile layouts.
//!
//! A tile is `ROWS` rows of `COLS` 16-bit elements, stored row-major in 16-byte chunks (8
//! elements). `ldmatrix` reads 8 rows x 16 bytes at a time; with rows 128 or 256 bytes apart
//! those 8 reads would all fall in the same 4 banks. XOR-ing the chunk index with `row % 8`
//! (the "128-byte swizzle") spreads any 8 consecutive rows over all 32 banks, both for the
//! row-wise cp.async writes and for the column-wise ldmatrix reads.

/// A swizzled `ROWS x COLS` tile of 16-bit elements at a shared-memory byte address.
#[derive(Clone, Copy)]
pub struct SmemTile<const ROWS: usize, const COLS: usize> {
    /// 32-bit shared address of the tile's first byte (1024-byte aligned).
    pub base: u32,
}

impl<const ROWS: usize, const COLS: usize> SmemTile<ROWS, COLS> {
    /// 16-byte chunks per row.
    pub const CHUNKS: usize = COLS / 8;
    /// Size of the tile in bytes.
    pub const BYTES: usize = ROWS * COLS * 2;

    /// Byte address of 16-byte chunk `chunk` of row `row`. Rows of fewer than 8 chunks (FP8
    /// staging tiles of head_dim 64, which only row-wise copies touch) are not swizzled.
    #[inline(always)]
    pub fn chunk_addr(self, row: usize, chunk: usize) -> u32 {
        const { assert!(COLS % 64 == 0 || COLS == 32, "swizzle needs rows of at least 8 chunks") };
        let swizzle = if COLS >= 64 { row % 8 } else { 0 };
        self.base + ((row * Self::CHUNKS + (chunk ^ swizzle)) * 16) as u32
    }

    /// A lane's address at (`row`, `chunk`), from which [`LaneAddr::at`] reaches the lane's
    /// element in any other 8-row group and even chunk offset with constant arithmetic.
    #[inline(always)]
    pub fn lane_addr(self, row: usize, chunk: usize) -> LaneAddr<COLS> {
        LaneAddr { addr: self.chunk_addr(row, chunk) }
    }
}

/// A lane's swizzled address in a tile, at a lane-dependent row and a chunk of 0 or 1 (or of
/// `c0` or `c0 + 1`, where `c0` is a multiple of 8, or of a power of two larger than every
/// `dchunk` the address then moves by: the bits `at` flips are then still the lane's alone).
///
/// Moving it by `drow` rows (a multiple of 8: `row % 8` is unchanged) and `dchunk` chunks (even:
/// the lane's own chunk bit is unchanged) changes only the chunk bits the swizzle does not
/// touch or flips those it does, so the new address is `(addr ^ c1) + c2` with constants
/// `c1`, `c2`: one or two ALU operations in the unrolled loops instead of a live register per
/// address.
#[derive(Clone, Copy)]
pub struct LaneAddr<const COLS: usize> {
    addr: u32,
}

impl<const COLS: usize> LaneAddr<COLS> {
    /// The address `drow` rows (multiple of 8) and `dchunk` chunks (even) further.
    #[inline(always)]
    pub fn at(self, drow: usize, dchunk: usize) -> u32 {
        (self.addr ^ ((dchunk % 8) * 16) as u32) + ((dchunk / 8) * 128 + drow * COLS * 2) as u32
    }

    /// The address `drow` rows further, `drow` a multiple of 8 (any chunk offset of the lane).
    #[inline(always)]
    pub fn at_row(self, drow: usize) -> u32 {
        self.addr + (drow * COLS * 2) as u32
    }

    /// Wraps a raw address (see [`LaneAddr::raw`]).
    #[inline(always)]
    pub fn from_raw(addr: u32) -> Self {
        LaneAddr { addr }
    }

    /// The raw address; adding a multiple of 1024 (a whole tile) keeps it a valid `LaneAddr`.
    #[inline(always)]
    pub fn raw(self) -> u32 {
        self.addr
    }

    /// The same address, hidden from the optimiser: called once per main-loop iteration it
    /// keeps LLVM from hoisting every derived address out of the loop into its own register.
    #[inline(always)]
    pub fn opaque(self) -> Self {
        let mut addr = self.addr;
        unsafe { core::arch::asm!("// opaque {0}", inout(reg32) addr, options(nomem, nostack)) };
        LaneAddr { addr }
    }
}

/// `v`, hidden from the optimiser (see [`LaneAddr::opaque`]).
#[inline(always)]
pub fn opaque_i64(mut v: i64) -> i64 {
    unsafe { core::arch::asm!("// opaque {0}", inout(reg64) v, options(nomem, nostack)) };
    v
}
