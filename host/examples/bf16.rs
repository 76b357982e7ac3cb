//! bf16 inputs with a custom softmax scale: `cargo run --release --example bf16`.
mod common;

use flashrs::{AttentionParams, DType};
use half::bf16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = common::open_gpu();
    let params = AttentionParams::new(2, 777, 1025, 4, 256).dtype(DType::Bf16).softmax_scale(0.05);
    let [q, k, v, out] = common::random_forward::<bf16>(&gpu, &params)?;
    common::check_against_reference(&params, &q, &k, &v, &out, 1.5e-2);
    Ok(())
}
