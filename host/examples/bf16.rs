//! bf16 inputs with a custom softmax scale: `cargo run --release --example bf16`.
mod common;

use flashrs::AttentionParams;
use half::bf16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let params = AttentionParams::builder().batch(2).seqlen_q(777).seqlen_k(1025).heads_q(4).head_dim(256).softmax_scale(0.05).build()?;
    let [q, k, v, out] = common::random_forward::<bf16>(&gpu, &params)?;
    common::check_against_reference(&params, &q, &k, &v, &out, 1.5e-2);
    Ok(())
}
