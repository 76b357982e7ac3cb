//! The backward pass's contract: its launch parameters ([`BwdParams`]) and the tile
//! configurations its `mma.sync` kernel is instantiated for ([`BwdConfig`], [`BWD_CONFIGS`]).
//!
//! A backward call is three launches on one stream, each taking [`BwdParams`] by value:
//!
//! 1. `flash_bwd_prep_*`: per (query row, head), `dsum = dot(dO, O)` (f32, the log-sum-exp's
//!    layout), and zeroes the row's f32 dQ accumulator and, in deterministic mode, the dQ
//!    semaphores.
//! 2. `flash_bwd_*` (the main kernel): one CTA per (batch, K/V head, key block). It keeps its
//!    keys' dK and dV in registers while walking every query block of every query head of its
//!    GQA group, recomputing `P = exp(scale * Q K^T - lse)`; it adds `dS K` to the dQ
//!    accumulator (f32 atomics; in deterministic mode in key-block order, see
//!    [`BwdParams::dq_semaphore`]) and writes dK and dV at the end: summed over the group
//!    without copies of K or V, and deterministic by construction.
//! 3. `flash_bwd_dq_*`: dQ = scale * accumulator, rounded to the element type.
use crate::params::FwdParams;

/// Everything one backward launch needs, passed by value as each backward kernel's only
/// parameter.
///
/// `fwd` describes the forward call whose gradients are taken, exactly as the forward kernels
/// saw it (Q, K, V, O, the log-sum-exp, strides, lengths, scale, masking, variable-length
/// offsets); its `o` is O and its `lse` the forward's log-sum-exp, both read here. The
/// gradients have their own strides (in elements, `(batch, row, head)`, the last dimension
/// contiguous): dO is laid out like O, dQ like Q, dK and dV like K and V.
///
/// The workspace holds, per (batch, query head, query row) in the log-sum-exp's order
/// (`[batch, heads_q, seqlen_q]`, or `[heads_q, total_q]` for variable-length launches): the
/// f32 `dsum`, and `accum_dim` f32 of dQ accumulator; and in deterministic mode one u32
/// semaphore per (batch, query head, query block).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwdParams {
    /// The forward call (see above).
    pub fwd: FwdParams,
    /// Device address of dO, the loss's gradient with respect to the output.
    pub dout: u64,
    /// Device address of dQ (written).
    pub dq: u64,
    /// Device address of dK (written).
    pub dk: u64,
    /// Device address of dV (written).
    pub dv: u64,
    /// dO strides (batch, row, head) in elements.
    pub dout_strides: [i64; 3],
    /// dQ strides (batch, row, head) in elements.
    pub dq_strides: [i64; 3],
    /// dK strides (batch, row, head) in elements.
    pub dk_strides: [i64; 3],
    /// dV strides (batch, row, head) in elements.
    pub dv_strides: [i64; 3],
    /// Device address of the f32 dQ accumulator, `accum_dim` per log-sum-exp row.
    pub dq_accum: u64,
    /// Device address of the f32 `dot(dO, O)` per log-sum-exp row.
    pub dsum: u64,
    /// Deterministic mode: device address of one u32 per (batch, query head, query block),
    /// `[batch * heads_q, m_blocks]`, zeroed by the prep kernel; each key block adds its dQ
    /// part to a query block only after the key blocks before it have (and counts itself), so
    /// the accumulator sums in one order every run. 0: atomics in any order.
    pub dq_semaphore: u64,
    /// The softmax scale itself (dQ and dK are scaled by it).
    pub scale: f32,
    /// Row length of the dQ accumulator: the main kernel's padded head dimension.
    pub accum_dim: u32,
    /// Key blocks per (batch, K/V head): the main kernel's grid is `batch * heads_kv *
    /// n_blocks` CTAs, key blocks fastest.
    pub n_blocks: u32,
    /// Query rows the prep and dQ kernels cover per head: `batch * seqlen_q`, or `total_q`
    /// for variable-length launches (one warp per (row, head)).
    pub rows: u32,
}

/// Tile shape of one backward (`mma.sync`) kernel instantiation. Eight warps; each of the
/// three GEMM shapes spreads them its own way (see the device crate's `bwd` module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BwdConfig {
    /// Padded head dimension.
    pub head_dim: usize,
    /// Query rows per step of the walk over query blocks.
    pub block_m: usize,
    /// Keys per CTA.
    pub block_n: usize,
    /// Shared-memory stages of the query-side tiles (Q, dO, lse, dsum): with 2 the next query
    /// block's copies overlap the current one's compute.
    pub stages: usize,
}

/// Warps of every backward main kernel.
pub const BWD_WARPS: usize = 8;

/// Threads of the prep and dQ kernels' CTAs (one warp per row and head).
pub const BWD_ROW_THREADS: usize = 256;

impl BwdConfig {
    /// Threads per CTA.
    pub const fn threads(&self) -> usize {
        BWD_WARPS * 32
    }
    /// Dynamic shared memory in bytes: K and V, the query-side stages (Q and dO tiles, then
    /// the lse and dsum rows at the end), P and dS.
    pub const fn smem_bytes(&self) -> usize {
        let kv = 2 * self.block_n * self.head_dim * 2;
        let q_side = 2 * self.stages * self.block_m * self.head_dim * 2;
        let p_ds = 2 * self.block_m * self.block_n * 2;
        kv + q_side + p_ds + 2 * self.stages * self.block_m * 4
    }
    /// Warps along the query rows in the `S = Q K^T` and `dP = dO V^T` GEMMs (32 rows each);
    /// the others split the keys.
    pub const fn warps_m_sdp(&self) -> usize {
        self.block_m / 32
    }
    /// Warps along the keys in the `dV += P^T dO` and `dK += dS^T Q` GEMMs (32 keys each);
    /// the others split the head dimension.
    pub const fn warps_n_dkv(&self) -> usize {
        self.block_n / 32
    }
    /// Warps along the query rows in the `dQ += dS K` GEMM (32 rows each); the others split
    /// the head dimension.
    pub const fn warps_m_dq(&self) -> usize {
        self.block_m / 32
    }
    /// 8-column tiles per warp in each pass of the `dQ += dS K` GEMM: at most 4, so that its
    /// accumulators fit beside dK and dV.
    pub const fn dq_tiles(&self) -> usize {
        let all = self.head_dim / (BWD_WARPS / self.warps_m_dq()) / 8;
        if all > 4 { 4 } else { all }
    }
    /// True when the shape is one the kernel body takes: whole 32-row warp tiles in every
    /// GEMM, an even number of 8-column tiles per warp (B fragments load in pairs), swizzled
    /// P and dS rows of at least 64 keys, and copies covering whole 8-row swizzle groups.
    pub const fn is_valid(&self) -> bool {
        let (d, m, n) = (self.head_dim, self.block_m, self.block_n);
        let w = BWD_WARPS;
        if d % 64 != 0 || m % 32 != 0 || n % 64 != 0 || !(self.stages == 1 || self.stages == 2) {
            return false;
        }
        let rows_per_copy = w * 32 / (d / 8);
        even_tiles(n, self.warps_m_sdp()) && even_tiles(d, self.warps_n_dkv()) && even_tiles(d, self.warps_m_dq())
            && rows_per_copy.is_multiple_of(8) && m.is_multiple_of(rows_per_copy) && n.is_multiple_of(rows_per_copy)
    }
}

/// True when `warps` of the [`BWD_WARPS`] divide them and the rest split `cols` into even
/// numbers of 8-column tiles.
const fn even_tiles(cols: usize, warps: usize) -> bool {
    warps > 0 && BWD_WARPS.is_multiple_of(warps) && cols.is_multiple_of(BWD_WARPS / warps * 16)
}

/// Every instantiated backward configuration (each for f16 and bf16), the first of each head
/// dimension its default; the planner takes the first of a head dimension that fits the GPU.
/// Head_dim 128's one-stage twin fits the 163 KB of an A100's CTA, the last the 99 KB of
/// sm_86 and sm_89 (the default needs 194 KB). Head_dim 128 walks 128 query rows per step
/// against 64 keys: 64 x 128 (FlashAttention-2's choice) would hold 128 dK and dV registers
/// per thread and spills; 64 x 64 reloads more operand fragments per MMA.
pub const BWD_CONFIGS: [BwdConfig; 5] = [
    BwdConfig { head_dim: 64, block_m: 64, block_n: 128, stages: 2 },
    BwdConfig { head_dim: 128, block_m: 128, block_n: 64, stages: 2 },
    BwdConfig { head_dim: 256, block_m: 64, block_n: 64, stages: 1 },
    BwdConfig { head_dim: 128, block_m: 128, block_n: 64, stages: 1 },
    BwdConfig { head_dim: 128, block_m: 64, block_n: 64, stages: 1 },
];

const _: () = {
    let mut i = 0;
    while i < BWD_CONFIGS.len() {
        assert!(BWD_CONFIGS[i].is_valid());
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_adds_up() {
        // head_dim 128, 64 x 128, two stages: K, V 32 KB each; Q, dO 2 x 16 KB each; P, dS 16
        // KB each; lse and dsum 2 x 256 B each.
        let c = BwdConfig { head_dim: 128, block_m: 64, block_n: 128, stages: 2 };
        assert_eq!(c.smem_bytes(), 64 * 1024 + 64 * 1024 + 32 * 1024 + 1024);
        assert!(BWD_CONFIGS[4].smem_bytes() <= 99 * 1024 && BWD_CONFIGS[3].smem_bytes() <= 163 * 1024);
        assert!(!BwdConfig { head_dim: 64, block_m: 48, block_n: 128, stages: 2 }.is_valid());
        assert!(!BwdConfig { head_dim: 64, block_m: 64, block_n: 32, stages: 2 }.is_valid());
    }
}
