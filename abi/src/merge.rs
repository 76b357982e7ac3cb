//! The merge kernel: folds one partial attention result into a running one.
//!
//! A call that sees its keys in parts (the host library's ring attention, where each step
//! brings another GPU's keys) gets from each part the output rows and their log-sum-exps, as a
//! forward call returns them. Parts merge as `lse = log(exp(lse_a) + exp(lse_b))`, `O =
//! exp(lse_a - lse) O_a + exp(lse_b - lse) O_b`; a row a part saw no key for has `lse = -inf`
//! and weight 0 there. The running result is kept in f32 (`acc`, `acc_lse`), so that rounding
//! each part to 16 bits happens once per part, not once per merge; the last merge writes the
//! output in the element type instead.
//!
//! Layouts: `acc`, `part` and `out` are contiguous `[batch, rows, heads, head_dim]`; `acc_lse`
//! and `out_lse` `[batch, heads, rows]`; `part_lse` `[batch, heads, part_rows]` (only the part's
//! rows). A launch covers rows `row0 .. row0 + n_rows` of each (batch, head), one warp per
//! (batch, row, head), each lane [`MERGE_COLS`] columns.

/// Threads per CTA of the merge kernel.
pub const MERGE_THREADS: usize = 256;

/// Columns of a row each lane merges (16 bytes of a 16-bit row): a warp covers head_dim 256.
pub const MERGE_COLS: usize = 8;

/// `flags`: `acc` and `acc_lse` hold nothing yet (the first part): they are not read.
pub const MERGE_FIRST: u32 = 1;
/// `flags`: the last part: the merged rows go to `out` (and `out_lse`), not to `acc`.
pub const MERGE_LAST: u32 = 2;

/// The merge kernel's one by-value parameter.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MergeParams {
    /// f32 running output, `[batch, rows, heads, head_dim]`.
    pub acc: u64,
    /// f32 running log-sum-exp, `[batch, heads, rows]`.
    pub acc_lse: u64,
    /// The part's output (element type), laid out as `acc`; only its rows `part_row0 ..
    /// part_row0 + part_rows` are read.
    pub part: u64,
    /// The part's log-sum-exp, `[batch, heads, part_rows]`.
    pub part_lse: u64,
    /// With [`MERGE_LAST`]: the output (element type), laid out as `acc`.
    pub out: u64,
    /// With [`MERGE_LAST`]: the output's log-sum-exp, laid out as `acc_lse` (0: none).
    pub out_lse: u64,
    /// Batch entries.
    pub batch: u32,
    /// Rows per batch entry of `acc` and `out`.
    pub rows: u32,
    /// Heads.
    pub heads: u32,
    /// Columns per row (a multiple of 8, at most 256).
    pub head_dim: u32,
    /// The first row the launch covers.
    pub row0: u32,
    /// Rows the launch covers, from `row0`.
    pub n_rows: u32,
    /// The part's first row.
    pub part_row0: u32,
    /// The part's rows.
    pub part_rows: u32,
    /// [`MERGE_FIRST`], [`MERGE_LAST`].
    pub flags: u32,
}

impl MergeParams {
    /// (Batch, row, head) triples the launch covers: one warp each.
    pub const fn warps(&self) -> u64 {
        self.batch as u64 * self.n_rows as u64 * self.heads as u64
    }

    /// CTAs of the launch.
    pub const fn grid(&self) -> u64 {
        self.warps().div_ceil((MERGE_THREADS / 32) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One warp per (batch, row, head) of the launch's rows, whole CTAs of warps.
    #[test]
    fn a_launch_has_a_warp_per_row_and_head() {
        let p = MergeParams { batch: 2, rows: 100, heads: 3, head_dim: 128, row0: 50, n_rows: 50, ..Default::default() };
        assert_eq!(p.warps(), 2 * 50 * 3);
        assert_eq!(p.grid(), (300u64).div_ceil(MERGE_THREADS as u64 / 32));
        assert_eq!(MergeParams { n_rows: 0, ..p }.grid(), 0);
        // A warp's lanes cover the widest row.
        assert!(32 * MERGE_COLS >= 256 && MERGE_COLS * 2 == 16);
    }
}
