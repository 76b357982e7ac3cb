//! Tile configurations on the command line: their tags and which ones a row runs.

use flashrs::TileConfig;
use flashrs::tiles::{CONFIGS, padded_head_dim};

/// Short name of a configuration, e.g. `d128_128x64w8s2`: the kernel name without its
/// `flash_fwd_<dtype>_` prefix.
pub fn tag(c: &TileConfig) -> String {
    format!("d{}_{}x{}w{}s{}", c.head_dim, c.block_m, c.block_n, c.warps, c.stages)
}

/// The configuration of [`CONFIGS`] named `s` (clap value parser for `--config`).
pub fn parse_tag(s: &str) -> Result<TileConfig, String> {
    CONFIGS.iter().find(|c| tag(c) == s).copied().ok_or_else(|| {
        let known: Vec<String> = CONFIGS.iter().map(tag).collect();
        format!("unknown configuration '{s}'; known: {}", known.join(", "))
    })
}

/// How each row picks its tile configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigChoice {
    /// The library's default for the head dimension.
    Default,
    /// This one, for every row.
    Forced(TileConfig),
    /// Every configuration compiled for the row's padded head dimension (for tuning).
    All,
}

impl ConfigChoice {
    /// The configurations a row of `head_dim` runs; `None` stands for the library's default.
    /// Configurations of a larger padded head dimension would also work but only waste
    /// compute, so `All` leaves them out.
    pub fn for_head_dim(self, head_dim: usize) -> Vec<Option<TileConfig>> {
        let compiled = || CONFIGS.iter().filter(move |c| Some(c.head_dim) == padded_head_dim(head_dim)).map(|&c| Some(c));
        match self {
            ConfigChoice::Forced(c) => vec![Some(c)],
            ConfigChoice::All if compiled().next().is_some() => compiled().collect(),
            // Also for a head_dim no configuration serves: the planner then says why.
            ConfigChoice::Default | ConfigChoice::All => vec![None],
        }
    }

    /// The head dimensions to sweep when none are given: a forced configuration serves only
    /// its own, so the sweep keeps to that one instead of failing on the others.
    pub fn default_head_dims(self) -> Vec<usize> {
        match self {
            ConfigChoice::Forced(c) => vec![c.head_dim],
            ConfigChoice::Default | ConfigChoice::All => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrs::{DType, Flavor, Kernel, Variant};

    #[test]
    fn tags_are_kernel_name_suffixes_and_round_trip() {
        for c in &CONFIGS {
            assert!(Kernel::Mma { dtype: DType::Bf16, variant: Variant::Plain, config: *c, flavor: Flavor::Plain }.to_string().ends_with(&format!("_{}", tag(c))));
            assert_eq!(parse_tag(&tag(c)), Ok(*c));
        }
        let err = parse_tag("d128_1x1w1s1").unwrap_err();
        assert!(err.contains(&tag(&CONFIGS[0])), "{err}");
    }

    #[test]
    fn all_means_every_config_of_the_padded_head_dim() {
        let tags = |d| ConfigChoice::All.for_head_dim(d).iter().map(|c| tag(&c.unwrap())).collect::<Vec<_>>();
        let d128 = tags(128);
        assert!(d128.len() >= 2 && d128.iter().all(|t| t.starts_with("d128_")));
        assert_eq!(tags(96), d128);
        assert!(tags(64).iter().all(|t| t.starts_with("d64_")));
        assert_eq!(ConfigChoice::Default.for_head_dim(64), vec![None]);
        assert_eq!(ConfigChoice::All.for_head_dim(512), vec![None]);
    }

    #[test]
    fn forced_config_keeps_the_sweep_to_its_head_dim() {
        let c = *CONFIGS.last().unwrap();
        assert_eq!(ConfigChoice::Forced(c).default_head_dims(), vec![c.head_dim]);
        assert!(ConfigChoice::All.default_head_dims().is_empty());
    }
}
