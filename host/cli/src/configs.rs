//! Tile configurations on the command line: their tags and which ones a row runs.

use flashrs::tiles::{CONFIGS, padded_head_dim};
use flashrs::{AttentionParamsBuilder, DType, Flavor, HopperConfig, Kernel, KernelChoice, TileConfig, sm90};

/// A tile configuration the command line can force: one of the `mma.sync` kernels'
/// ([`CONFIGS`]) or one of the Hopper kernels' ([`sm90::CONFIGS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    /// An `mma.sync` configuration.
    Mma(TileConfig),
    /// A Hopper configuration (the call then takes the Hopper path).
    Hopper(HopperConfig),
}

impl Config {
    /// Every configuration, `mma.sync` then Hopper (16-bit, then the FP8 kernels' own).
    fn all() -> impl Iterator<Item = Config> {
        let fp8_only = sm90::FP8_CONFIGS.into_iter().filter(|c| !sm90::CONFIGS.contains(c));
        CONFIGS.into_iter().map(Config::Mma).chain(sm90::CONFIGS.into_iter().chain(fp8_only).map(Config::Hopper))
    }

    /// The Q/K head dimension it is compiled for.
    pub fn head_dim(&self) -> usize {
        match self {
            Config::Mma(c) => c.head_dim,
            Config::Hopper(c) => c.head_dim,
        }
    }

    /// `b` forced onto this configuration (and its kernel family).
    pub fn apply(self, b: AttentionParamsBuilder<'static>) -> AttentionParamsBuilder<'static> {
        match self {
            Config::Mma(c) => b.config(c),
            Config::Hopper(c) => b.kernel(KernelChoice::Wgmma { config: Some(c), persistent: None }),
        }
    }
}

/// Short name of an `mma.sync` configuration, e.g. `d128_128x64w8s2`: the kernel name without
/// its `flash_fwd_<dtype>_` prefix.
pub fn tag(c: &TileConfig) -> String {
    format!("d{}_{}x{}w{}s{}", c.head_dim, c.block_m, c.block_n, c.warps, c.stages)
}

/// Short name of a configuration: [`tag`], or for a Hopper one the kernel name without its
/// `flash_fwd_sm90_<dtype>_` prefix, e.g. `d64_192x128s3` or `d128_128x128s2_serial`.
pub fn config_tag(c: &Config) -> String {
    match c {
        Config::Mma(c) => tag(c),
        Config::Hopper(c) => {
            let name = Kernel::Sm90 { dtype: DType::Bf16, inputs: None, varlen: false, paged: false, config: *c, flavor: Flavor::Plain }.to_string();
            name.trim_start_matches("flash_fwd_sm90_bf16_").to_string()
        }
    }
}

/// The configuration named `s` (clap value parser for `--config`).
pub fn parse_tag(s: &str) -> Result<Config, String> {
    Config::all().find(|c| config_tag(c) == s).ok_or_else(|| {
        let known: Vec<String> = Config::all().map(|c| config_tag(&c)).collect();
        format!("unknown configuration '{s}'; known: {}", known.join(", "))
    })
}

/// How each row picks its tile configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigChoice {
    /// The library's default for the head dimension.
    Default,
    /// This one, for every row.
    Forced(Config),
    /// Every `mma.sync` configuration compiled for the row's padded head dimension (for tuning).
    All,
    /// Every Hopper configuration of the row's head dimension padded to 64 columns, Q/K and V
    /// alike (`--all-configs --path wgmma`).
    AllHopper,
}

impl ConfigChoice {
    /// The configurations a row of `head_dim` runs; `None` stands for the library's default.
    /// Configurations of a larger padded head dimension would also work but only waste
    /// compute, so `All` leaves them out.
    pub fn for_head_dim(self, head_dim: usize) -> Vec<Option<Config>> {
        let compiled = || CONFIGS.iter().filter(move |c| Some(c.head_dim) == padded_head_dim(head_dim)).map(|&c| Some(Config::Mma(c)));
        let hopper = || {
            let padded = head_dim.next_multiple_of(64);
            sm90::CONFIGS.iter().filter(move |c| c.head_dim == padded && c.head_dim_v == padded).map(|&c| Some(Config::Hopper(c)))
        };
        match self {
            ConfigChoice::Forced(c) => vec![Some(c)],
            ConfigChoice::All if compiled().next().is_some() => compiled().collect(),
            ConfigChoice::AllHopper if hopper().next().is_some() => hopper().collect(),
            // Also for a head_dim no configuration serves: the planner then says why.
            ConfigChoice::Default | ConfigChoice::All | ConfigChoice::AllHopper => vec![None],
        }
    }

    /// The head dimensions to sweep when none are given: a forced configuration serves only
    /// its own, so the sweep keeps to that one instead of failing on the others.
    pub fn default_head_dims(self) -> Vec<usize> {
        match self {
            ConfigChoice::Forced(c) => vec![c.head_dim()],
            ConfigChoice::Default | ConfigChoice::All | ConfigChoice::AllHopper => Vec::new(),
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
            assert!(Kernel::Mma { dtype: DType::Bf16, kv: None, variant: Variant::Plain, config: *c, flavor: Flavor::Plain }.to_string().ends_with(&format!("_{}", tag(c))));
            assert_eq!(parse_tag(&tag(c)), Ok(Config::Mma(*c)));
        }
        for c in &flashrs::sm90::CONFIGS {
            let t = config_tag(&Config::Hopper(*c));
            assert!(Kernel::Sm90 { dtype: DType::F16, inputs: None, varlen: false, paged: false, config: *c, flavor: Flavor::Plain }.to_string().ends_with(&format!("_{t}")), "{t}");
            assert_eq!(parse_tag(&t), Ok(Config::Hopper(*c)));
        }
        assert_eq!(parse_tag("d64_192x128s3"), Ok(Config::Hopper(flashrs::sm90::CONFIGS[0])));
        let err = parse_tag("d128_1x1w1s1").unwrap_err();
        assert!(err.contains(&tag(&CONFIGS[0])), "{err}");
    }

    #[test]
    fn all_means_every_config_of_the_padded_head_dim() {
        let tags = |d| ConfigChoice::All.for_head_dim(d).iter().map(|c| config_tag(&c.unwrap())).collect::<Vec<_>>();
        let d128 = tags(128);
        assert!(d128.len() >= 2 && d128.iter().all(|t| t.starts_with("d128_")));
        assert_eq!(tags(96), d128);
        assert!(tags(64).iter().all(|t| t.starts_with("d64_")));
        assert_eq!(ConfigChoice::Default.for_head_dim(64), vec![None]);
        assert_eq!(ConfigChoice::All.for_head_dim(512), vec![None]);
        let hopper = |d| ConfigChoice::AllHopper.for_head_dim(d).iter().map(|c| config_tag(&c.unwrap())).collect::<Vec<_>>();
        assert_eq!(hopper(64).len(), 4);
        assert!(hopper(56).iter().chain(&hopper(64)).all(|t| t.starts_with("d64_")) && hopper(128).iter().all(|t| t.starts_with("d128_")));
        // No square Hopper configuration of 192 columns (only Q/K 192 with V 128): the default.
        assert_eq!(ConfigChoice::AllHopper.for_head_dim(192), vec![None]);
    }

    #[test]
    fn forced_config_keeps_the_sweep_to_its_head_dim() {
        let c = *CONFIGS.last().unwrap();
        assert_eq!(ConfigChoice::Forced(Config::Mma(c)).default_head_dims(), vec![c.head_dim]);
        assert_eq!(ConfigChoice::Forced(Config::Hopper(flashrs::sm90::CONFIGS[8])).default_head_dims(), vec![192]);
        assert!(ConfigChoice::All.default_head_dims().is_empty());
    }
}
