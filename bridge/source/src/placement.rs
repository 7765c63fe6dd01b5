//! Where a ProviderConfig's provider process runs: the operator's default placement, the
//! floor a ProviderConfig may not go below, and how a `local` process or a `pods` runner is
//! started.

use std::sync::Arc;

use kraken_core_kinds::ProviderConfig;
use kraken_core_kinds::provider_config::Placement;
use kraken_provider::Via;

use super::pods::PodSettings;

/// How a ProviderConfig's provider is started where its placement puts it.
#[derive(Debug, Clone)]
pub enum Start {
    /// A child of this process.
    Child,
    /// Through `kraken runner` on this machine.
    Via(Via),
    /// A runner Deployment in the ProviderConfig's namespace, dialed.
    Pods(Arc<PodSettings>),
}

/// The operator's placement settings (`kraken operator --runner-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placements {
    /// The placement of ProviderConfigs that do not name one, and the least confined one a
    /// ProviderConfig may name: namespace users write ProviderConfigs, so theirs may ask for
    /// more confinement, never less.
    pub default: Placement,
    /// How a `local` provider is started: `kraken runner` and its sandbox's arguments.
    pub local: Option<Via>,
    /// How `pods` runners are made; `None`: the placement is not offered
    /// (`kraken operator --runner-image` unset).
    pub pods: Option<Arc<PodSettings>>,
}

impl Default for Placements {
    /// Providers as children of this process (`kraken plan`, tests of the layers).
    fn default() -> Self {
        Self {
            default: Placement::InProcess,
            local: None,
            pods: None,
        }
    }
}

impl Placements {
    /// The placement `pc` gets, and how to start it there; an error names what was refused.
    pub fn for_config(&self, pc: &ProviderConfig) -> Result<(Placement, Start), String> {
        let asked = pc.spec.runner.as_ref().and_then(|r| r.placement);
        let placement = asked.unwrap_or(self.default);
        if placement < self.default {
            return Err(format!(
                "spec.runner.placement {placement} is less confined than this cluster allows \
                 (kraken operator --runner-placement {}); remove it or ask for {} or more",
                self.default, self.default
            ));
        }
        let named = pc
            .spec
            .runner
            .as_ref()
            .is_some_and(|r| r.service_account_name.is_some());
        if named && placement != Placement::Pods {
            return Err(format!(
                "spec.runner.serviceAccountName is for the pods placement only (this \
                 ProviderConfig runs {placement}); set spec.runner.placement: pods or remove it"
            ));
        }
        match placement {
            Placement::InProcess => Ok((placement, Start::Child)),
            Placement::Local => match &self.local {
                Some(via) => Ok((placement, Start::Via(via.clone()))),
                None => Err(
                    "spec.runner.placement local is not available here (this process cannot \
                     start kraken runner)"
                        .to_owned(),
                ),
            },
            Placement::Pods => match &self.pods {
                Some(settings) => Ok((placement, Start::Pods(settings.clone()))),
                None => Err(
                    "spec.runner.placement pods is not available on this cluster (the operator \
                     runs without --runner-image)"
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
        pc.spec.runner = Some(RunnerSpec {
            placement,
            ..RunnerSpec::default()
        });
        pc
    }

    fn local() -> Placements {
        Placements {
            default: Placement::Local,
            local: Some(Via {
                program: "/bin/kraken".into(),
                args: vec!["runner".into()],
            }),
            pods: None,
        }
    }

    #[test]
    fn the_default_applies_and_a_provider_config_may_ask_for_more_never_less() {
        let (p, start) = local().for_config(&pc(None)).expect("default");
        assert_eq!(p, Placement::Local);
        assert!(matches!(start, Start::Via(_)));
        let err = local()
            .for_config(&pc(Some(Placement::InProcess)))
            .expect_err("less confined");
        assert!(err.contains("less confined"), "{err}");
        let lenient = Placements {
            default: Placement::InProcess,
            ..local()
        };
        let (p, start) = lenient
            .for_config(&pc(Some(Placement::Local)))
            .expect("more confined");
        assert_eq!(p, Placement::Local);
        assert!(matches!(start, Start::Via(_)));
        let (p, start) = lenient.for_config(&pc(None)).expect("in process");
        assert_eq!(p, Placement::InProcess);
        assert!(matches!(start, Start::Child));
    }

    #[test]
    fn pods_needs_a_runner_image_and_a_named_account_needs_pods() {
        let err = local()
            .for_config(&pc(Some(Placement::Pods)))
            .expect_err("no image");
        assert!(err.contains("--runner-image"), "{err}");
        let with_pods = Placements {
            pods: Some(Arc::new(PodSettings::for_tests())),
            ..local()
        };
        let (p, start) = with_pods
            .for_config(&pc(Some(Placement::Pods)))
            .expect("pods");
        assert_eq!(p, Placement::Pods);
        assert!(matches!(start, Start::Pods(_)));
        let mut named = pc(Some(Placement::Local));
        if let Some(r) = named.spec.runner.as_mut() {
            r.service_account_name = Some("team-a-aws".into());
        }
        let err = with_pods
            .for_config(&named)
            .expect_err("local with an account");
        assert!(err.contains("pods placement only"), "{err}");
    }

    #[test]
    fn local_without_a_runner_is_refused() {
        let err = Placements::default()
            .for_config(&pc(Some(Placement::Local)))
            .expect_err("no runner");
        assert!(err.contains("not available"), "{err}");
    }
}
