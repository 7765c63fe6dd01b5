//! The one way a controller writes an object's status: to the `/status` subresource, with
//! Kraken's field manager named (so `kubectl get -o yaml --show-managed-fields` says who wrote
//! it), counted in `kraken_api_writes_total` under the resource's plural.

use std::fmt::Debug;

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::FIELD_MANAGER;
use super::metrics::Metrics;

/// Parameters of Kraken's patches: its field manager named.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Merges `status` into the status of `name` (fields it leaves out stay; a `null` removes one).
pub async fn merge<K, S>(
    api: &Api<K>,
    metrics: &Metrics,
    plural: &str,
    name: &str,
    status: &S,
) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Debug,
    S: Serialize,
{
    metrics.api_write(plural, "patch-status");
    api.patch_status(
        name,
        &patch_params(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
}

/// Replaces the status with the one in `obj`, guarded by its resourceVersion: a concurrent
/// writer makes it fail with 409 rather than be overwritten.
pub async fn replace<K>(
    api: &Api<K>,
    metrics: &Metrics,
    plural: &str,
    name: &str,
    obj: &K,
) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Serialize + Debug,
{
    metrics.api_write(plural, "update-status");
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    api.replace_status(name, &params, obj).await
}
