use flashrs::tiles::{CONFIGS, SPLIT_CONFIGS};
use flashrs::{AttentionParams, BufferRef, Buffers, Target};

fn bufs(p: &AttentionParams) -> Buffers {
    let (nq, nk, nl) = p.contiguous_lens().unwrap();
    let r = |i: u64, len: usize| BufferRef { ptr: i << 40, len };
    Buffers { q: r(1, nq), k: r(2, nk), v: r(3, nk), o: r(4, nq), lse: Some(r(5, nl)) }
}

#[test]
fn probe() {
    for t in Target::PRESETS {
        let p = AttentionParams::new(1, 1, 8192, 8, 64).config(SPLIT_CONFIGS[1]);
        let r = p.plan(&bufs(&p), &t);
        println!("{:?}: forced d128 split cfg for d64: {:?}", t.compute_capability, r.as_ref().map(|pl| (pl.kernel.to_string(), pl.split.clone())));
        let p = AttentionParams::new(1, 1, 8192, 8, 128).config(CONFIGS[3]);
        let r = p.plan(&bufs(&p), &t);
        println!("  forced non-split: {:?}", r.as_ref().map(|pl| (pl.kernel.to_string(), pl.split.clone())));
        let p = AttentionParams::new(1, 1, 64, (1 << 32) + 16, 8).heads_kv(1);
        let r = p.plan(&bufs(&p), &t);
        println!("  gqa hole: {:?}", r.as_ref().map(|pl| (pl.kernel.to_string(), pl.params.seqlen_q)));
    }
}
