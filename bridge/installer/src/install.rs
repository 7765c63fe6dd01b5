//! One install pass: the steps in order, filling the Provider's status as they learn.

use super::*;

use super::crds::{apply_crds, not_established};
use super::generate::generated;
use super::package::fetch_package;

pub(super) enum Pass {
    /// Installed, with this many kinds Established.
    Ready(usize),
    /// CRDs applied, not all Established yet.
    Waiting(String),
}

/// Steps 1–5: fetch, schema, generate, apply, check Established. Fills `status` as it learns.
pub(super) async fn install(
    p: &Provider,
    inst: &Installer,
    status: &mut ProviderStatus,
) -> Result<Pass, Failure> {
    let started = std::time::Instant::now();
    let installed = fetch_package(p, inst, status).await?;
    tracing::debug!(provider = %p.name_any(), elapsed = ?started.elapsed(), cached = installed.from_cache, "package installed");
    let applied_before = record_package(p, inst, status, &installed).await;
    let address = installed.provider.to_string();
    let version = installed.version.to_string();
    let binary = installed.executable.clone().ok_or_else(|| {
        Failure::new(
            reason::VERIFICATION_FAILED,
            format!("the package of {address} {version} holds no terraform-provider-* executable"),
            false,
        )
    })?;
    let generated = generated(inst, p, (&address, &version), binary).await?;
    tracing::debug!(provider = %p.name_any(), elapsed = ?started.elapsed(), "CRDs generated");
    status.protocol = i32::try_from(generated.protocol).ok();
    status.resource_types = i64::try_from(generated.resource_types).ok();
    let crds = &generated.crds;
    // While waiting for Established, the CRDs this generation applied are not applied again.
    let names: Vec<&str> = crds.iter().map(|c| c.type_name.as_str()).collect();
    let known: Vec<&str> = status
        .kinds
        .iter()
        .map(|k| k.resource_type.as_str())
        .collect();
    let waiting = status
        .conditions
        .iter()
        .any(|c| c.type_ == READY && c.reason == reason::INSTALLING);
    let skip = applied_before && waiting && names == known;
    let kinds = if skip {
        status.kinds.clone()
    } else {
        apply_crds(p, inst, crds).await?
    };
    status.kind_count = i64::try_from(kinds.len()).ok();
    status.kinds = kinds;
    tracing::debug!(provider = %p.name_any(), elapsed = ?started.elapsed(), crds = crds.len(), applied = !skip, "CRDs generated and applied");
    let (pending, missing) = not_established(inst, crds).await?;
    if skip && missing {
        // Deleted by hand since this generation applied it: apply again.
        apply_crds(p, inst, crds).await?;
    }
    if !pending.is_empty() {
        return Ok(Pass::Waiting(format!(
            "waiting for {} of {} CRDs to be Established: {}",
            pending.len(),
            crds.len(),
            pending.join(", ")
        )));
    }
    Ok(Pass::Ready(crds.len()))
}

/// Records the installed package in `status` (address, version, hashes, signer) and says
/// whether this generation already applied its CRDs for that same version.
async fn record_package(
    p: &Provider,
    inst: &Installer,
    status: &mut ProviderStatus,
    installed: &fetch::Installed,
) -> bool {
    let address = installed.provider.to_string();
    let version = installed.version.to_string();
    let same = status.address.as_deref() == Some(address.as_str())
        && status.version.as_deref() == Some(version.as_str());
    // A cache hit knows only the local h1: and no signer: keep the zh: hashes and the signer
    // recorded when the package was fetched.
    let mut hashes: std::collections::BTreeSet<String> = installed
        .lock_hashes
        .iter()
        .map(ToString::to_string)
        .collect();
    if installed.from_cache {
        // The object this pass got may predate the status the fetching pass wrote: read it.
        let recorded = if same {
            Some(status.clone())
        } else {
            api(inst)
                .get_status(&p.name_any())
                .await
                .ok()
                .and_then(|fresh| fresh.status)
                .filter(|s| {
                    s.address.as_deref() == Some(address.as_str())
                        && s.version.as_deref() == Some(version.as_str())
                })
        };
        if let Some(recorded) = recorded {
            hashes.extend(recorded.hashes.iter().cloned());
            status.signed_by = recorded.signed_by;
            status.mirror = recorded.mirror;
        }
    } else {
        status.signed_by = installed.signed_by.clone();
        status.mirror = super::package::mirror(p, inst).cloned();
    }
    let applied_before =
        same && status.observed_generation == p.metadata.generation && !status.kinds.is_empty();
    status.address = Some(address);
    status.version = Some(version);
    status.hashes = hashes.into_iter().collect();
    applied_before
}
