//! `kubectl kraken get`: every Kraken object in one table, with what waits for approval.

use std::collections::HashMap;

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value as Json;

use super::connect::{self, Global, Session};
use super::discover::{self, KrakenKind};
use super::render::{self, condition, short_id};
use crate::kit::conditions::{READY, SYNCED};
use crate::managed::plan_status;

pub(super) const ABOUT: &str = "List every Kraken object with its readiness and pending plan.

Every kind of the API groups kraken.dev and *.kraken.dev (the generated kinds of every provider,
Providers, ProviderConfigs, EC2Instances, ...), found by API discovery, in one table:
NAMESPACE, KIND, NAME, READY, SYNCED, PLAN and AGE. PLAN shows the action and short id of a plan
waiting for approval (`kubectl kraken show-plan KIND/NAME` shows it whole). KIND is qualified
with its group where two groups have a kind of that name.

Objects of the namespace (-n, else the context's namespace) and cluster-scoped ones (Providers);
-A lists every namespace. Kinds you may not list are left out, and named on stderr.

Examples:

    kubectl kraken get
    kubectl kraken get -n team-a
    kubectl kraken get -A";

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// List the objects of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

const HEADER: [&str; 7] = [
    "NAMESPACE",
    "KIND",
    "NAME",
    "READY",
    "SYNCED",
    "PLAN",
    "AGE",
];

pub(super) async fn run(global: &Global, args: GetArgs) -> anyhow::Result<()> {
    let session = connect::connect(global).await?;
    let kinds = discover::kraken_kinds(&session.client).await?;
    let scope = (!args.all_namespaces).then_some(session.namespace.as_str());
    let labels = kind_labels(&kinds);
    let listed: Vec<(usize, Option<Vec<DynamicObject>>)> =
        futures::stream::iter(kinds.iter().enumerate())
            .map(|(i, kind)| {
                let session = &session;
                async move { anyhow::Ok((i, list(session, kind, scope).await?)) }
            })
            .buffer_unordered(8)
            .try_collect()
            .await?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let (mut rows, mut forbidden) = (Vec::new(), Vec::new());
    for (i, objects) in listed {
        match objects {
            Some(objects) => rows.extend(objects.iter().map(|o| row(&labels[i], o, now))),
            None => forbidden.push(kinds[i].qualified()),
        }
    }
    rows.sort();
    if rows.is_empty() {
        let place = match scope {
            Some(ns) => format!("in namespace {ns}"),
            None => "in any namespace".to_owned(),
        };
        eprintln!("No Kraken objects found {place}.");
    } else {
        print!("{}", render::table(&HEADER, &rows));
    }
    if !forbidden.is_empty() {
        forbidden.sort();
        eprintln!(
            "Not listed (you may not list them): {}",
            forbidden.join(", ")
        );
    }
    Ok(())
}

/// The objects of `kind` in `namespace` (all of them for a cluster-scoped kind, or with
/// `None`); `None` when the caller may not list them.
async fn list(
    session: &Session,
    kind: &KrakenKind,
    namespace: Option<&str>,
) -> anyhow::Result<Option<Vec<DynamicObject>>> {
    let client = session.client.clone();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) if kind.namespaced => Api::namespaced_with(client, ns, &kind.resource),
        _ => Api::all_with(client, &kind.resource),
    };
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(Some(list.items)),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
        // The kind went away between discovery and the list (its Provider was removed).
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Some(Vec::new())),
        Err(e) => Err(e).with_context(|| format!("failed to list {}", kind.qualified())),
    }
}

/// The KIND column of each kind: its kind, qualified with its group where another group has a
/// kind of the same name (`Object` of a provider and its data source).
fn kind_labels(kinds: &[KrakenKind]) -> Vec<String> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for k in kinds {
        *count.entry(k.resource.kind.as_str()).or_default() += 1;
    }
    kinds
        .iter()
        .map(|k| {
            let r = &k.resource;
            if count.get(r.kind.as_str()).copied().unwrap_or(0) > 1 {
                format!("{}.{}", r.kind, r.group)
            } else {
                r.kind.clone()
            }
        })
        .collect()
}

fn row(kind: &str, obj: &DynamicObject, now: k8s_openapi::jiff::Timestamp) -> Vec<String> {
    let status = obj.data.get("status").cloned().unwrap_or(Json::Null);
    let cond = |t: &str| condition(&status, t).map(|c| c.status).unwrap_or_default();
    let plan = plan_status::read(&status)
        .ok()
        .and_then(|p| p.pending)
        .map(|p| format!("{} {}", p.action, short_id(&p.id)))
        .unwrap_or_default();
    let age = obj
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| render::age(now.as_second() - t.0.as_second()))
        .unwrap_or_default();
    vec![
        obj.metadata.namespace.clone().unwrap_or_default(),
        kind.to_owned(),
        obj.metadata.name.clone().unwrap_or_default(),
        cond(READY),
        cond(SYNCED),
        plan,
        age,
    ]
}
