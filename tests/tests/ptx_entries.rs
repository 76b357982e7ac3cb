//! The host's view of the kernels matches the PTX it embeds (no GPU needed): every tile
//! configuration has its entry point in both modules, and every default is instantiated.
use flashrs::DType;
use flashrs::attention::config::{CONFIGS, DEFAULTS, HEAD_DIMS, default_config};
use flashrs::attention::kernel_name;
use flashrs::ptx::{PTX_SM80, PTX_SM90A};

fn has_entry(ptx: &str, name: &str) -> bool {
    ptx.lines().any(|l| l.trim_start().starts_with(".visible .entry") && l.contains(&format!("{name}(")))
}

#[test]
fn every_configuration_has_its_entry_in_both_modules() {
    for c in CONFIGS {
        for dtype in [DType::F16, DType::Bf16] {
            let name = kernel_name(dtype, &c);
            assert!(has_entry(PTX_SM80, &name), "{name} missing from the sm_80 module");
            assert!(has_entry(PTX_SM90A, &name), "{name} missing from the sm_90a module");
        }
    }
}

#[test]
fn defaults_are_instantiated_and_serve_every_head_dim() {
    for (d, c) in HEAD_DIMS.iter().zip(DEFAULTS) {
        assert!(CONFIGS.contains(&c), "default {c:?} is not in CONFIGS");
        assert_eq!(c.head_dim, *d);
    }
    for head_dim in (8..=256).step_by(8) {
        let c = default_config(head_dim).expect("every multiple of 8 up to 256 is served");
        assert!(c.head_dim >= head_dim && c.head_dim - head_dim < 128);
    }
    assert_eq!(default_config(264), None);
}
