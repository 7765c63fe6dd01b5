//! Reading what a request's references name: each object once, and a StateDeclaration's
//! sensitive outputs Secret only when the hub believes the declaration ([`crate::trust`]).

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};

use super::Hub;
use crate::resolve::Sources;
use crate::{Failure, Parsed, Source};
use kraken_core_kinds::hub::ValueReference;

/// Reads every object the references name, each once (with the Secret of a StateDeclaration's
/// sensitive outputs when a reference reads one of those).
pub(super) async fn gather(
    hub: &Hub,
    ns: &str,
    parsed: &[(&ValueReference, Result<Parsed, Failure>)],
) -> Result<Sources, kube::Error> {
    let mut sources = Sources::default();
    let all = parsed
        .iter()
        .filter_map(|(_, p)| p.as_ref().ok())
        .flat_map(Parsed::sources);
    for source in all {
        match source {
            Source::Output { declaration, path } => {
                if !sources.declarations.contains_key(declaration) {
                    let sd = hub.declaration(ns, declaration).await?;
                    if sd.is_none() {
                        // Producers publish once read: tell this one it is.
                        hub.index.wake_producer(ns, declaration);
                    }
                    sources.declarations.insert(declaration.clone(), sd);
                }
                if let Some(secret) = sources.outputs_secret(declaration, path) {
                    fetch_secret(&hub.client, ns, &secret, &mut sources).await?;
                }
            }
            Source::ConfigMap { name, .. } => {
                if !sources.config_maps.contains_key(name) {
                    let cm = Api::<ConfigMap>::namespaced(hub.client.clone(), ns)
                        .get_opt(name)
                        .await?;
                    sources.config_maps.insert(name.clone(), cm);
                }
            }
            Source::Secret { name, .. } => {
                fetch_secret(&hub.client, ns, name, &mut sources).await?
            }
        }
    }
    Ok(sources)
}

async fn fetch_secret(
    client: &Client,
    ns: &str,
    name: &str,
    sources: &mut Sources,
) -> Result<(), kube::Error> {
    if !sources.secrets.contains_key(name) {
        let s = Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await?;
        sources.secrets.insert(name.to_owned(), s);
    }
    Ok(())
}
