//! Where a ProviderConfig's provider process runs: the operator's default placement, the
//! floor a ProviderConfig may not go below, and how a `local` process is started.

use kraken_core_kinds::ProviderConfig;
use kraken_core_kinds::provider_config::Placement;
use kraken_provider::Via;

/// The operator's placement settings (`kraken operator --runner-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placements {
    /// The placement of ProviderConfigs that do not name one, and the least confined one a
    /// ProviderConfig may name: namespace users write ProviderConfigs, so theirs may ask for
    /// more confinement, never less.
    pub default: Placement,
    /// How a `local` provider is started: `kraken runner` and its sandbox's arguments.
    pub local: Option<Via>,
}

impl Default for Placements {
    /// Providers as children of this process (`kraken plan`, tests of the layers).
    fn default() -> Self {
        Self {
            default: Placement::InProcess,
            local: None,
        }
    }
}

impl Placements {
    /// The placement `pc` gets, and how to start it there; an error names what was refused.
    pub fn for_config(&self, pc: &ProviderConfig) -> Result<(Placement, Option<Via>), String> {
        let asked = pc.spec.runner.as_ref().and_then(|r| r.placement);
        let placement = asked.unwrap_or(self.default);
        if placement < self.default {
            return Err(format!(
                "spec.runner.placement {placement} is less confined than this cluster allows \
                 (kraken operator --runner-placement {}); remove it or ask for {} or more",
                self.default, self.default
            ));
        }
        match placement {
            Placement::InProcess => Ok((placement, None)),
            Placement::Local => match &self.local {
                Some(via) => Ok((placement, Some(via.clone()))),
                None => Err(
                    "spec.runner.placement local is not available here (this process cannot \
                     start kraken runner)"
                        .to_owned(),
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kraken_core_kinds::provider_config::{ProviderConfigSpec, RunnerSpec};

    fn pc(placement: Option<Placement>) -> ProviderConfig {
        let spec: ProviderConfigSpec = serde_json::from_value(serde_json::json!({
            "source": "hashicorp/random"
        }))
        .expect("spec");
        let mut pc = ProviderConfig::new("p", spec);
        pc.spec.runner = Some(RunnerSpec { placement });
        pc
    }

    fn local() -> Placements {
        Placements {
            default: Placement::Local,
            local: Some(Via {
                program: "/bin/kraken".into(),
                args: vec!["runner".into()],
            }),
        }
    }

    #[test]
    fn the_default_applies_and_a_provider_config_may_ask_for_more_never_less() {
        let (p, via) = local().for_config(&pc(None)).expect("default");
        assert_eq!(p, Placement::Local);
        assert!(via.is_some());
        let err = local()
            .for_config(&pc(Some(Placement::InProcess)))
            .expect_err("less confined");
        assert!(err.contains("less confined"), "{err}");
        let lenient = Placements {
            default: Placement::InProcess,
            ..local()
        };
        let (p, via) = lenient
            .for_config(&pc(Some(Placement::Local)))
            .expect("more confined");
        assert_eq!((p, via.is_some()), (Placement::Local, true));
        assert_eq!(
            lenient.for_config(&pc(None)).expect("in process"),
            (Placement::InProcess, None)
        );
    }

    #[test]
    fn local_without_a_runner_is_refused() {
        let err = Placements::default()
            .for_config(&pc(Some(Placement::Local)))
            .expect_err("no runner");
        assert!(err.contains("not available"), "{err}");
    }
}
