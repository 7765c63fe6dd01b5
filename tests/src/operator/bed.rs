//! One end-to-end test's world: its own control plane with the core and fixture CRDs, a
//! namespace, a fixture ledger directory (the "cloud"), the ProviderConfig `default` pointing
//! at it, and a ready operator — plus the readers tests assert with (conditions, Events, the
//! state Secret).
//!
//! A control plane per test, because the operator watches every namespace and its metrics are
//! process-wide: two tests sharing one would see each other's reconciles and API writes.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use serde_json::{Value, json};

use super::{Operator, OperatorOptions, metric_samples, metric_sum};
use crate::{ControlPlane, wait_for};

/// API group/version and kind of the fixture provider's `fixture_object`.
pub const OBJECT_API_VERSION: &str = "fixture.tf.kraken.dev/v1alpha1";
pub const OBJECT_KIND: &str = "Object";
/// The resource name kubectl takes, fully qualified (Object is a common word).
pub const OBJECTS: &str = "objects.fixture.tf.kraken.dev";

/// How long the operator gets to become ready after a start.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Drop order is field order: the operator is killed before its control plane goes down and
/// before the ledger directory is removed.
pub struct FixtureBed {
    pub op: Operator,
    pub cp: ControlPlane,
    /// The test's namespace; the ProviderConfig `default` lives here.
    pub ns: String,
    ledger: tempfile::TempDir,
}

impl FixtureBed {
    /// Control plane `op-<name>`, CRDs, namespace `op-<name>`, ledger, ProviderConfig
    /// `default` (`ledgerDir` only), and an operator that answers `/readyz`.
    pub fn start(name: &str, opts: OperatorOptions) -> anyhow::Result<Self> {
        let started = std::time::Instant::now();
        let ns = format!("op-{name}");
        let cp = ControlPlane::with_fixture_kinds(&ns, &ns)?;
        let ledger = crate::fixture_dir("kraken-ledger-")?;
        let op = Operator::start(&cp, opts)?;
        let mut bed = Self { op, cp, ns, ledger };
        bed.apply_provider_config("default", json!({}))?;
        bed.op.wait_ready(READY_TIMEOUT)?;
        eprintln!(
            "[{name}] bed ready in {:.1}s: namespace {}, ledger {}, operator log {}",
            started.elapsed().as_secs_f64(),
            bed.ns,
            bed.ledger_dir().display(),
            bed.op.log_path().display()
        );
        Ok(bed)
    }

    /// The fixture ledger: `objects/<id>.json` and `events.log`.
    pub fn ledger_dir(&self) -> &Path {
        self.ledger.path()
    }

    /// Apply the ProviderConfig `name` for the fixture provider: `ledgerDir` (this bed's
    /// ledger) merged with the fields of `extra` (`failApply`, `applyDelayMs`, `token`, ...).
    pub fn apply_provider_config(&self, name: &str, extra: Value) -> anyhow::Result<()> {
        let mut config = json!({"ledgerDir": self.ledger_dir().to_string_lossy()});
        if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        let pc = provider_config_manifest(&self.ns, name, config);
        self.cp.apply_yaml(&self.ns, &pc.to_string())?;
        Ok(())
    }

    /// `kubectl apply` of one or more manifests in this namespace.
    pub fn apply(&self, yaml: &str) -> anyhow::Result<String> {
        self.cp.apply_yaml(&self.ns, yaml)
    }

    /// Wait until exactly `n` Objects exist, each reconciled at its generation with
    /// `status.atProvider.size` equal to `size`.
    pub fn wait_all_at_size(&self, n: usize, size: u64, timeout: Duration) -> anyhow::Result<()> {
        wait_for(
            timeout,
            &format!("all {n} objects reconciled at size {size}"),
            || {
                let out = self
                    .cp
                    .kubectl(&["-n", &self.ns, "get", OBJECTS, "-o", "json"])?;
                let list: Value = serde_json::from_str(&out)?;
                let items = list["items"].as_array().cloned().unwrap_or_default();
                let behind: Vec<&Value> = items
                    .iter()
                    .filter(|o| !is_reconciled(o) || o["status"]["atProvider"]["size"] != size)
                    .collect();
                if items.len() == n && behind.is_empty() {
                    Ok(Some(()))
                } else {
                    let some: Vec<String> = behind.iter().take(3).map(|o| describe(o)).collect();
                    bail!("{} objects, {} behind: {some:?}", items.len(), behind.len())
                }
            },
        )
    }

    /// `kubectl patch --type=merge` of the Objects `names` with `patch`, in one call.
    pub fn patch_objects(&self, names: &[String], patch: &Value) -> anyhow::Result<()> {
        let patch = patch.to_string();
        let mut args = vec![
            "-n",
            &self.ns,
            "patch",
            OBJECTS,
            "--type=merge",
            "-p",
            &patch,
        ];
        args.extend(names.iter().map(String::as_str));
        self.cp.kubectl(&args)?;
        Ok(())
    }

    /// Apply the Object `name` with this `spec`.
    pub fn apply_object(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        self.apply(&object_manifest(&self.ns, name, spec).to_string())?;
        Ok(())
    }

    /// Apply the Object `name` with this `spec`, expecting refusal: the kubectl error.
    pub fn apply_object_refused(&self, name: &str, spec: Value) -> anyhow::Result<String> {
        let manifest = object_manifest(&self.ns, name, spec);
        match self.cp.try_apply_yaml(&self.ns, &manifest.to_string())? {
            Ok(out) => bail!(
                "the API server admitted {name} ({}): {manifest}",
                out.trim()
            ),
            Err(stderr) => Ok(stderr),
        }
    }

    /// The Object `name`, or None.
    pub fn object_opt(&self, name: &str) -> anyhow::Result<Option<Value>> {
        self.cp.get_json_opt(&self.ns, OBJECTS, name)
    }

    /// The Object `name`.
    pub fn object(&self, name: &str) -> anyhow::Result<Value> {
        self.cp.get_json(&self.ns, OBJECTS, name)
    }

    /// Wait until the Object is Ready=True/Available and Synced=True/ReconcileSuccess with
    /// status.observedGeneration == metadata.generation; returns it.
    pub fn wait_reconciled(&self, name: &str, timeout: Duration) -> anyhow::Result<Value> {
        wait_reconciled(&self.cp, (&self.ns, OBJECTS, name), timeout)
    }

    /// Wait until the Object's Synced condition has this status and reason; returns it.
    pub fn wait_synced(
        &self,
        name: &str,
        status: &str,
        reason: &str,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let what = format!("Object {name} to be Synced={status}/{reason}");
        wait_for(timeout, &what, || {
            let obj = self
                .object_opt(name)?
                .context("the Object does not exist")?;
            match condition(&obj, "Synced") {
                Some((s, r, _)) if s == status && r == reason => Ok(Some(obj)),
                _ => bail!("{}", describe(&obj)),
            }
        })
    }

    /// Wait until the Object no longer exists (its finalizer was released).
    pub fn wait_gone(&self, name: &str, timeout: Duration) -> anyhow::Result<()> {
        wait_for(
            timeout,
            &format!("Object {name} to be gone"),
            || match self.object_opt(name)? {
                None => Ok(Some(())),
                Some(obj) => bail!(
                    "still there: deletionTimestamp {}, finalizers {}; {}",
                    obj["metadata"]["deletionTimestamp"],
                    obj["metadata"]["finalizers"],
                    describe(&obj)
                ),
            },
        )
    }

    /// The Events about `name` as (reason, message).
    pub fn events(&self, name: &str) -> anyhow::Result<Vec<(String, String)>> {
        events_for(&self.cp, &self.ns, name)
    }

    /// The Events about `name`, oldest first, as `<time> <reporting instance> <reason>`: which
    /// replica did what when, to tell a failure's story.
    pub fn event_trail(&self, name: &str) -> anyhow::Result<Vec<String>> {
        let selector = format!("involvedObject.name={name}");
        let list: Value = serde_json::from_str(&self.cp.kubectl(&[
            "get",
            "events",
            "-n",
            &self.ns,
            "--field-selector",
            &selector,
            "-o",
            "json",
        ])?)?;
        let mut trail: Vec<String> = list["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or("?");
                format!(
                    "{} {} {}",
                    s("eventTime"),
                    s("reportingInstance"),
                    s("reason")
                )
            })
            .collect();
        trail.sort();
        Ok(trail)
    }

    /// Wait for an Event with this reason about `name`; returns its message.
    pub fn wait_event(
        &self,
        name: &str,
        reason: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        wait_for(timeout, &format!("an Event {reason} about {name}"), || {
            let events = self.events(name)?;
            match events.iter().find(|(r, _)| r == reason) {
                Some((_, message)) => Ok(Some(message.clone())),
                None => bail!("Events about {name}: {events:?}"),
            }
        })
    }

    /// The state Secret of the Object `name` (`object-<name>-tfstate`), or None.
    pub fn state_secret(&self, name: &str) -> anyhow::Result<Option<Value>> {
        self.cp
            .get_json_opt(&self.ns, "secret", &state_secret_name(OBJECT_KIND, name))
    }

    /// Takes the mark "states sealed" off the operator's key Secret (in `default`, the
    /// harness's lease namespace), as a cluster upgrading from a Kraken before sealing has
    /// it: the operator's next start seals every unsealed state Secret, then marks it again.
    pub fn unmark_states_sealed(&self) -> anyhow::Result<()> {
        self.cp.kubectl(&[
            "annotate",
            "secret",
            "kraken-plan-key",
            "-n",
            "default",
            "kraken.dev/states-sealed-",
        ])?;
        Ok(())
    }

    /// What the operator and the provider have done so far (see [`Activity`]).
    pub fn activity(&self) -> anyhow::Result<Activity> {
        let text = self.op.metrics()?;
        let mut writes = std::collections::BTreeMap::new();
        for (labels, n) in metric_samples(&text, "kraken_api_writes_total") {
            let label = |key: &str| super::label(&labels, key);
            if label("resource") != "leases" {
                let key = format!("{} {}", label("verb"), label("resource"));
                *writes.entry(key).or_insert(0.0) += n;
            }
        }
        Ok(Activity {
            reconciles: metric_sum(&text, "kraken_reconcile_runs_total").unwrap_or(0.0),
            writes,
            ledger_events: crate::ledger::event_log(self.ledger_dir())?.len(),
            apply_calls: crate::ledger::apply_calls(self.ledger_dir())?.len(),
        })
    }

    /// "No hot loop", as a count: wait until the operator's [`Activity`] has stayed unchanged
    /// for [`SETTLE_QUIET`] (the trailing writes of what the test waited for), then require it
    /// to stay exactly unchanged for a further `window`: no reconcile, no API write (Lease
    /// renewals aside), no provider apply, no change in the cloud. Settling is bounded by
    /// [`SETTLE_TIMEOUT`], so an operator that never goes quiet fails here too. `what` says
    /// what is waiting, for the failure message. Returns the activity it stayed at.
    pub fn expect_idle(&self, window: Duration, what: &str) -> anyhow::Result<Activity> {
        let started = std::time::Instant::now();
        let seen = self
            .settle(SETTLE_QUIET, crate::WAIT_POLL_INTERVAL)
            .with_context(|| what.to_string())?;
        let settled = started.elapsed();
        let window_start = std::time::Instant::now();
        while window_start.elapsed() < window {
            std::thread::sleep(crate::WAIT_POLL_INTERVAL);
            let now = self.activity()?;
            if now != seen {
                bail!(
                    "{what}: the operator was idle for {SETTLE_QUIET:?} (settled after \
                     {:.1}s), then acted again {:.1}s into the {window:?} window:\n  before \
                     {seen:?}\n  after  {now:?}",
                    settled.as_secs_f64(),
                    window_start.elapsed().as_secs_f64()
                );
            }
        }
        Ok(seen)
    }

    /// Wait until the [`Activity`] has stayed unchanged for `quiet` (polled every `poll`, at
    /// most [`SETTLE_TIMEOUT`]) and return it.
    pub fn settle(&self, quiet: Duration, poll: Duration) -> anyhow::Result<Activity> {
        let started = std::time::Instant::now();
        let mut seen = self.activity()?;
        let mut since = std::time::Instant::now();
        while since.elapsed() < quiet {
            if started.elapsed() > SETTLE_TIMEOUT {
                bail!(
                    "the operator never stayed idle for {quiet:?} within {SETTLE_TIMEOUT:?}; \
                     last activity {seen:?}"
                );
            }
            std::thread::sleep(poll);
            let now = self.activity()?;
            if now != seen {
                (seen, since) = (now, std::time::Instant::now());
            }
        }
        Ok(seen)
    }

    /// Wait until the operator has run `n` more reconciles than it had when called (drift
    /// checks, retries): the operator has had `n` more chances to act.
    pub fn wait_reconciles(&self, n: u32, timeout: Duration) -> anyhow::Result<()> {
        let from = self.activity()?.reconciles;
        wait_for(timeout, &format!("{n} more reconciles than {from}"), || {
            let now = self.activity()?.reconciles;
            if now >= from + f64::from(n) {
                Ok(Some(()))
            } else {
                bail!("{} more so far", now - from)
            }
        })
    }

    /// Finish a test: on failure, attach the operator's log tail to the error; on success,
    /// also fail if the operator log shows a panic.
    pub fn finish<T>(&self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        self.finish_with(result, &[])
    }

    /// [`finish`](Self::finish) for a test that runs `more` operators beside the bed's own
    /// (replicas, each with its label): each one's log is checked for a panic, and on failure
    /// each one's log tail follows the bed operator's.
    pub fn finish_with<T>(
        &self,
        result: anyhow::Result<T>,
        more: &[(&str, &Operator)],
    ) -> anyhow::Result<T> {
        let ops: Vec<(&str, &Operator)> = std::iter::once(("operator", &self.op))
            .chain(more.iter().copied())
            .collect();
        match result {
            Ok(v) => {
                for (label, op) in &ops {
                    let logs = op.logs()?;
                    if let Some(line) = logs.lines().find(|l| l.contains("panicked at")) {
                        bail!("{label} panicked: {line}\nlog tail:\n{}", op.log_tail(60));
                    }
                }
                Ok(v)
            }
            Err(e) => Err(super::with_log_tails(e, &ops, 60)),
        }
    }
}

/// How long [`FixtureBed::expect_idle`] needs the operator to have been idle before its window.
pub const SETTLE_QUIET: Duration = Duration::from_secs(2);
/// How long [`FixtureBed::expect_idle`] waits for the operator to settle at most.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the operator and the provider have done so far: the operator's own counters
/// (`kraken_reconcile_runs_total`, and `kraken_api_writes_total` without Lease renewals, which
/// leader election makes on a timer) and the fixture ledger (real mutations in `events.log`,
/// ApplyResourceChange calls in `applies.log`). Equal activities mean nothing happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub reconciles: f64,
    /// API writes by `"<verb> <resource>"`, Lease renewals left out.
    pub writes: std::collections::BTreeMap<String, f64>,
    pub ledger_events: usize,
    pub apply_calls: usize,
}

impl Activity {
    /// The API writes made since `earlier`, by `"<verb> <resource>"` (only those that grew).
    pub fn writes_since(&self, earlier: &Activity) -> std::collections::BTreeMap<String, f64> {
        self.writes
            .iter()
            .filter_map(|(k, n)| {
                let d = n - earlier.writes.get(k).copied().unwrap_or(0.0);
                (d != 0.0).then(|| (k.clone(), d))
            })
            .collect()
    }
}

/// Ready=True/Available, Synced=True/ReconcileSuccess, observedGeneration == generation.
pub fn is_reconciled(obj: &Value) -> bool {
    let ok = |t: &str, reason: &str| {
        condition(obj, t).is_some_and(|(s, r, _)| s == "True" && r == reason)
    };
    ok("Ready", "Available")
        && ok("Synced", "ReconcileSuccess")
        && obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
}

/// A one-line summary of an object's status, for observations in timeout errors.
pub fn describe(obj: &Value) -> String {
    let cond = |t: &str| match condition(obj, t) {
        Some((s, r, m)) => format!("{t}={s}/{r} {m:?}"),
        None => format!("{t}=<none>"),
    };
    format!(
        "generation {}, observedGeneration {}, {}, {}, externalId {}, lastPlan {}",
        obj["metadata"]["generation"],
        obj["status"]["observedGeneration"],
        cond("Ready"),
        cond("Synced"),
        obj["status"]["externalId"],
        obj["status"]["lastPlan"]
    )
}

/// The condition `type` of an object's status as (status, reason, message).
pub fn condition(obj: &Value, type_: &str) -> Option<(String, String, String)> {
    let c = obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// Waits until the object `resource`/`name` in `ns` (empty: cluster-scoped) is
/// Ready=True/Available and Synced=True/ReconcileSuccess at its generation; returns it.
pub fn wait_reconciled(
    cp: &ControlPlane,
    (ns, resource, name): (&str, &str, &str),
    timeout: Duration,
) -> anyhow::Result<Value> {
    let what = format!(
        "{resource} {name} to be Ready/Available and Synced/ReconcileSuccess at its generation"
    );
    wait_for(timeout, &what, || {
        let obj = cp
            .get_json_opt(ns, resource, name)?
            .context("it does not exist")?;
        if is_reconciled(&obj) {
            Ok(Some(obj))
        } else {
            bail!("{}", describe(&obj))
        }
    })
}

/// Waits until the object `resource`/`name` in `ns` (empty: cluster-scoped) has condition
/// `type_` = `status`/`reason` with a message containing `text`; returns the message.
pub fn wait_condition(
    cp: &ControlPlane,
    (ns, resource, name): (&str, &str, &str),
    (type_, status, reason): (&str, &str, &str),
    text: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    let what = format!("{resource} {name}: {type_}={status}/{reason} saying {text:?}");
    wait_for(timeout, &what, || {
        let obj = cp
            .get_json_opt(ns, resource, name)?
            .context("does not exist")?;
        match condition(&obj, type_) {
            Some((s, r, m)) if s == status && r == reason && m.contains(text) => Ok(Some(m)),
            other => bail!("{type_} {other:?}"),
        }
    })
}

/// The Events whose involved object is named `name` in `ns`, oldest first, as
/// (reason, message). Read through core/v1, which also shows events.k8s.io/v1 Events.
pub fn events_for(
    cp: &ControlPlane,
    ns: &str,
    name: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let selector = format!("involvedObject.name={name}");
    let list: Value = serde_json::from_str(&cp.kubectl(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        &selector,
        "-o",
        "json",
    ])?)?;
    let mut items = list["items"].as_array().cloned().unwrap_or_default();
    let time = |e: &Value| {
        [
            &e["eventTime"],
            &e["firstTimestamp"],
            &e["metadata"]["creationTimestamp"],
        ]
        .into_iter()
        .find_map(|t| t.as_str().map(str::to_string))
        .unwrap_or_default()
    };
    items.sort_by_key(time);
    Ok(items
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("reason"), s("message"))
        })
        .collect())
}

/// The state Secret of the fixture provider's object `name` of `kind`:
/// `<kind>-<name>.fixture-tfstate`, lowercased (docs/operator.md; names here stay far below
/// the 253 characters where it would be hashed).
pub fn state_secret_name(kind: &str, name: &str) -> String {
    format!("{kind}-{name}.fixture-tfstate").to_lowercase()
}

/// A key of a Secret's data, base64-decoded; None when the key is absent.
pub fn secret_data(secret: &Value, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
    match secret["data"][key].as_str() {
        Some(b64) => Ok(Some(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .with_context(|| format!("Secret data {key} is not base64"))?,
        )),
        None => Ok(None),
    }
}

/// A fixture Object manifest.
pub fn object_manifest(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": OBJECT_API_VERSION,
        "kind": OBJECT_KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// A ProviderConfig for the fixture provider with this provider block (`config`).
pub fn provider_config_manifest(ns: &str, name: &str, config: Value) -> Value {
    json!({
        "apiVersion": "core.kraken.dev/v1alpha1",
        "kind": "ProviderConfig",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "source": crate::FIXTURE_ADDRESS,
            "version": "1.0.0",
            "config": config,
        },
    })
}

/// Applies the fixture ProviderConfig `name` writing to `ledger`, with `maxConcurrency:
/// level` (what the benches set at each parallelism level).
pub fn apply_fixture_config_at(
    cp: &crate::ControlPlane,
    ns: &str,
    name: &str,
    ledger: &std::path::Path,
    level: usize,
) -> anyhow::Result<()> {
    let mut pc = provider_config_manifest(ns, name, json!({"ledgerDir": ledger.to_string_lossy()}));
    pc["spec"]["maxConcurrency"] = json!(level);
    cp.apply_yaml(ns, &pc.to_string())?;
    Ok(())
}

/// A multi-document YAML stream of these manifests (each document in JSON, which is YAML).
pub fn yaml_documents(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| format!("---\n{d}\n"))
        .collect::<String>()
}
