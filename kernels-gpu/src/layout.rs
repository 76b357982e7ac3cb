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

    /// Byte address of 16-byte chunk `chunk` of row `row`.
    #[inline(always)]
    pub fn chunk_addr(self, row: usize, chunk: usize) -> u32 {
        const { assert!(COLS % 64 == 0, "swizzle needs rows of at least 8 chunks") };
        self.base + ((row * Self::CHUNKS + (chunk ^ (row % 8))) * 16) as u32
    }
}
