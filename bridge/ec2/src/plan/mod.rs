//! What one pass must do, decided from what EC2 shows: pure, so every rule is unit-tested.
//!
//! An EC2Instance holds `count` *indices*. Each instance Kraken launches carries the tags
//! `kraken.dev/owner-uid` (the object's uid), `kraken.dev/index` and `kraken.dev/launch` (how
//! many instances were launched for that index before it), set atomically by RunInstances.
//! So every pass starts from EC2 itself — the instances tagged with the object's uid — and
//! never from a memory of what it did:
//!
//! - an index without a live instance gets one launched (a relaunch, with an Event, when an
//!   instance it had was terminated outside Kraken);
//! - of several live instances at one index the newest launch stays and the others are
//!   terminated (that is how a replacement finishes: create first, then destroy);
//! - instances at indices at or above `count` are terminated (scale down);
//! - the live one is compared with the spec: imageId, subnetId, keyName, userData or rootVolume
//!   differ → replaced (unless `replacePolicy: Refuse`); instanceType differs → stop, modify,
//!   start; stopped → started; security groups and tags differ → set in place.
//!
//! A launch's idempotency token is `<uid>-<index>-<launch>-<digest of the launch parameters>`:
//! a retried or crash-interrupted launch repeats the token and EC2 returns the instance it
//! launched before, a changed spec gets a new token.

use std::collections::BTreeMap;

use sha2::{Digest as _, Sha256};

use super::client::{CONFIG_TAG, INDEX_TAG, Instance, LAUNCH_TAG, Launch, NAME_TAG, OWNER_TAG};
use kraken_core_kinds::ec2::{EC2InstanceSpec, InstanceStatus, RootVolume};

/// The spec with `valuesFrom` merged in and defaults applied: what the instances must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub count: i64,
    pub image_id: String,
    pub instance_type: String,
    pub subnet_id: Option<String>,
    /// Empty: not managed (the VPC's default group at launch, left alone after).
    pub security_group_ids: Vec<String>,
    pub key_name: Option<String>,
    pub user_data: Option<String>,
    pub root_volume: Option<RootVolume>,
    pub tags: BTreeMap<String, String>,
    pub import_ids: Vec<String>,
    pub refuse_replace: bool,
}

impl Desired {
    /// The desired state of a resolved spec, or what is missing.
    pub fn from_spec(spec: &EC2InstanceSpec) -> Result<Self, String> {
        let required = |v: &Option<String>, name: &str| {
            v.clone().filter(|s| !s.is_empty()).ok_or_else(|| {
                format!("spec.{name} is required: set it, or take it from spec.valuesFrom")
            })
        };
        let count = spec.count.unwrap_or(1);
        if !(0..=kraken_core_kinds::ec2::COUNT_MAX).contains(&count) {
            return Err(format!(
                "spec.count is {count}; it must be between 0 and {}",
                kraken_core_kinds::ec2::COUNT_MAX
            ));
        }
        if spec.import_ids.len() as i64 > count {
            return Err(format!(
                "spec.importIds lists {} ids for {count} instances; list at most spec.count",
                spec.import_ids.len()
            ));
        }
        Ok(Self {
            count,
            image_id: required(&spec.image_id, "imageId")?,
            instance_type: required(&spec.instance_type, "instanceType")?,
            subnet_id: spec.subnet_id.clone().filter(|s| !s.is_empty()),
            security_group_ids: {
                let mut g = spec.security_group_ids.clone().unwrap_or_default();
                g.sort();
                g.dedup();
                g
            },
            key_name: spec.key_name.clone().filter(|s| !s.is_empty()),
            user_data: spec.user_data.clone().filter(|s| !s.is_empty()),
            root_volume: spec
                .root_volume
                .clone()
                .filter(|r| r.size.is_some() || r.r#type.is_some()),
            tags: spec.tags.clone().unwrap_or_default(),
            import_ids: spec.import_ids.clone(),
            refuse_replace: spec.replace_policy
                == Some(kraken_core_kinds::ec2::ReplacePolicy::Refuse),
        })
    }

    /// The digest of what EC2 does not show back (user data, root volume), kept in the
    /// [`CONFIG_TAG`] tag: `u=<16 hex>,r=<size>/<type>`.
    pub fn config_tag(&self) -> String {
        let user_data = match &self.user_data {
            Some(d) => hex16(d.as_bytes()),
            None => "-".to_owned(),
        };
        let root = match &self.root_volume {
            Some(r) => format!(
                "{}/{}",
                r.size.map_or("-".to_owned(), |s| s.to_string()),
                r.r#type.as_deref().unwrap_or("-")
            ),
            None => "-".to_owned(),
        };
        format!("u={user_data},r={root}")
    }

    /// Every tag instance `index` (launch `launch`) of `owner` should carry.
    pub fn tags_for(&self, owner: &Owner, index: i64, launch: i64) -> BTreeMap<String, String> {
        let mut tags = self.tags.clone();
        tags.entry("Name".to_owned())
            .or_insert_with(|| format!("{}-{index}", owner.name));
        tags.insert(OWNER_TAG.to_owned(), owner.uid.clone());
        tags.insert(INDEX_TAG.to_owned(), index.to_string());
        tags.insert(LAUNCH_TAG.to_owned(), launch.to_string());
        tags.insert(
            NAME_TAG.to_owned(),
            format!("{}/{}", owner.namespace, owner.name),
        );
        tags.insert(CONFIG_TAG.to_owned(), self.config_tag());
        tags
    }

    /// The launch of instance `index`, `launch`.
    pub fn launch(&self, owner: &Owner, index: i64, launch: i64) -> Launch {
        let mut l = Launch {
            client_token: String::new(),
            image_id: self.image_id.clone(),
            instance_type: self.instance_type.clone(),
            subnet_id: self.subnet_id.clone(),
            security_group_ids: self.security_group_ids.clone(),
            key_name: self.key_name.clone(),
            user_data: self.user_data.clone(),
            root_volume_size: self.root_volume.as_ref().and_then(|r| r.size),
            root_volume_type: self.root_volume.as_ref().and_then(|r| r.r#type.clone()),
            tags: self.tags_for(owner, index, launch),
        };
        // Everything that shapes the instance (the user data by digest, like the tag).
        let params = format!(
            "{:?}|{}|{}",
            (
                &l.image_id,
                &l.instance_type,
                &l.subnet_id,
                &l.security_group_ids,
                &l.key_name
            ),
            self.config_tag(),
            serde_json::to_string(&self.tags).unwrap_or_default()
        );
        l.client_token = client_token(&owner.uid, index, launch, &params);
        l
    }

    /// A digest of the whole desired state, to tell a correction of drift (the spec did not
    /// change since the last pass) from carrying out a change.
    pub fn digest(&self) -> String {
        hex16(format!("{self:?}").as_bytes())
    }
}

fn hex16(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// RunInstances' ClientToken: at most 64 ASCII characters.
pub fn client_token(uid: &str, index: i64, launch: i64, params: &str) -> String {
    let digest = &hex16(params.as_bytes())[..8];
    let mut t = format!("{uid}-{index}-{launch}-{digest}");
    t.truncate(64);
    t
}

/// The object the instances belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

/// Why an instance is terminated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surplus {
    /// Its index is at or above `count`.
    ScaleDown,
    /// A newer launch serves its index (a replacement finished, or a crash left two).
    Superseded,
}

/// One EC2 call (or a few, for a resize) the pass makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Launch for `index`. `replaces`: the live instance a replacement supersedes, with the
    /// fields that force it; `relaunch_of`: the instance that was terminated outside Kraken.
    Launch {
        index: i64,
        launch: i64,
        replaces: Option<(String, Vec<String>)>,
        relaunch_of: Option<String>,
    },
    /// Take `importIds[index]` over: check it, then tag it as this object's.
    Adopt {
        index: i64,
        id: String,
    },
    Terminate {
        id: String,
        why: Surplus,
    },
    /// Stop a running instance whose type must change.
    StopToResize {
        id: String,
    },
    /// A stopped instance: set its type, then start it.
    Resize {
        id: String,
        to: String,
    },
    /// A stopped instance with the right type: started again.
    Start {
        id: String,
    },
    SetGroups {
        id: String,
        groups: Vec<String>,
    },
    Retag {
        id: String,
        set: BTreeMap<String, String>,
        remove: Vec<String>,
    },
}

/// A replacement the spec asks for but `replacePolicy: Refuse` forbids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub index: i64,
    pub id: String,
    pub paths: Vec<String>,
}

/// The outcome of planning one pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub refused: Vec<Refused>,
    /// One entry per index below count, from what EC2 shows.
    pub slots: Vec<InstanceStatus>,
    /// Every index has a running instance as declared, and nothing is left to do.
    pub settled: bool,
    /// Some instance is between states (pending, stopping, shutting-down): look again soon.
    pub transitional: bool,
}

fn parse_tag(i: &Instance, key: &str) -> Option<i64> {
    i.tag(key).and_then(|v| v.parse().ok())
}

/// The launch number of an instance (adopted ones count as 0).
pub fn launch_of(i: &Instance) -> i64 {
    parse_tag(i, LAUNCH_TAG).unwrap_or(0)
}

/// The status entry describing `i` at `index`.
pub fn slot_of(index: i64, i: &Instance) -> InstanceStatus {
    InstanceStatus {
        index,
        launch: launch_of(i),
        id: i.id.clone(),
        state: i.state.clone(),
        instance_type: i.instance_type.clone(),
        image_id: i.image_id.clone(),
        subnet_id: i.subnet_id.clone(),
        private_ip: i.private_ip.clone(),
        public_ip: i.public_ip.clone(),
        private_dns: i.private_dns.clone(),
        public_dns: i.public_dns.clone(),
        pending_launch: None,
    }
}

/// Decides the pass. `observed`: the instances tagged with the owner's uid; `previous`: the
/// status entries of the last pass (their `pendingLaunch` fences launches in flight).
pub fn plan(
    desired: &Desired,
    owner: &Owner,
    observed: &[Instance],
    previous: &[InstanceStatus],
) -> Plan {
    let mut out = Plan::default();
    let ours: Vec<&Instance> = observed
        .iter()
        .filter(|i| i.tag(OWNER_TAG) == Some(owner.uid.as_str()))
        .collect();
    // Surplus: live instances at an index outside 0..count, or with no readable index.
    for i in &ours {
        let index = parse_tag(i, INDEX_TAG);
        if i.is_live() && !index.is_some_and(|x| (0..desired.count).contains(&x)) {
            out.steps.push(Step::Terminate {
                id: i.id.clone(),
                why: Surplus::ScaleDown,
            });
        }
        if matches!(i.state.as_str(), "pending" | "stopping" | "shutting-down") {
            out.transitional = true;
        }
    }
    let mut settled = true;
    for index in 0..desired.count {
        let at: Vec<&Instance> = ours
            .iter()
            .copied()
            .filter(|i| parse_tag(i, INDEX_TAG) == Some(index))
            .collect();
        let prev = previous.iter().find(|s| s.index == index);
        let newest = at
            .iter()
            .copied()
            .filter(|i| i.is_live())
            .max_by_key(|i| (launch_of(i), i.id.clone()));
        let Some(current) = newest else {
            settled = false;
            plan_empty_index(desired, index, &at, prev, &mut out);
            continue;
        };
        if !plan_live_index(desired, owner, index, &at, prev, current, &mut out) {
            settled = false;
        }
    }
    out.settled = settled && out.steps.is_empty();
    out
}

/// The steps for an index with a live instance, `current` (the newest of `at`); whether the
/// index is settled (nothing to do, running).
fn plan_live_index(
    desired: &Desired,
    owner: &Owner,
    index: i64,
    at: &[&Instance],
    prev: Option<&InstanceStatus>,
    current: &Instance,
    out: &mut Plan,
) -> bool {
    let mut settled = true;
    for old in at.iter().filter(|i| i.is_live() && i.id != current.id) {
        out.steps.push(Step::Terminate {
            id: old.id.clone(),
            why: Surplus::Superseded,
        });
        settled = false;
    }
    let mut slot = slot_of(index, current);
    let steps_before = out.steps.len();
    let paths = replace_paths(desired, current);
    if !paths.is_empty() {
        if desired.refuse_replace {
            out.refused.push(Refused {
                index,
                id: current.id.clone(),
                paths,
            });
        } else {
            let next = next_launch(at, prev);
            slot.pending_launch = Some(next);
            out.steps.push(Step::Launch {
                index,
                launch: next,
                replaces: Some((current.id.clone(), paths)),
                relaunch_of: None,
            });
        }
    }
    if slot.pending_launch.is_some() {
        // Being replaced: nothing to change in place on an instance that is going away.
        out.slots.push(slot);
        return false;
    }
    let type_ok = current.instance_type == desired.instance_type;
    match current.state.as_str() {
        // A pending instance cannot be stopped yet: the next look will.
        "running" if !type_ok => out.steps.push(Step::StopToResize {
            id: current.id.clone(),
        }),
        "stopped" if !type_ok => out.steps.push(Step::Resize {
            id: current.id.clone(),
            to: desired.instance_type.clone(),
        }),
        "stopped" => out.steps.push(Step::Start {
            id: current.id.clone(),
        }),
        _ => {}
    }
    if !desired.security_group_ids.is_empty() {
        let mut have = current.security_group_ids.clone();
        have.sort();
        have.dedup();
        if have != desired.security_group_ids {
            out.steps.push(Step::SetGroups {
                id: current.id.clone(),
                groups: desired.security_group_ids.clone(),
            });
        }
    }
    out.steps.extend(retag(desired, owner, index, current));
    if out.steps.len() != steps_before || current.state != "running" {
        settled = false;
    }
    out.slots.push(slot);
    settled
}

/// The tag changes that make `current` carry exactly the tags of `index`.
fn retag(desired: &Desired, owner: &Owner, index: i64, current: &Instance) -> Option<Step> {
    let mut want = desired.tags_for(owner, index, launch_of(current));
    // The digest tag records what the instance was launched with: rewriting it would hide
    // a replacement that is refused or still to come. Only an adopted instance gets it.
    if let Some(have) = current.tag(CONFIG_TAG) {
        want.insert(CONFIG_TAG.to_owned(), have.to_owned());
    }
    let set: BTreeMap<String, String> = want
        .iter()
        .filter(|(k, v)| current.tags.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let remove: Vec<String> = current
        .tags
        .keys()
        .filter(|k| !want.contains_key(*k) && !k.starts_with("aws:"))
        .cloned()
        .collect();
    (!set.is_empty() || !remove.is_empty()).then(|| Step::Retag {
        id: current.id.clone(),
        set,
        remove,
    })
}

/// The fields whose difference replaces `current`. A digest tag that is missing (an adopted
/// instance) compares equal: it is written by the retag that follows.
pub fn replace_paths(desired: &Desired, current: &Instance) -> Vec<String> {
    let mut paths = Vec::new();
    if current.image_id != desired.image_id {
        paths.push("imageId".to_owned());
    }
    if desired
        .subnet_id
        .as_ref()
        .is_some_and(|s| *s != current.subnet_id)
    {
        paths.push("subnetId".to_owned());
    }
    if desired.key_name.as_deref().unwrap_or_default() != current.key_name {
        paths.push("keyName".to_owned());
    }
    if let Some(have) = current.tag(CONFIG_TAG) {
        let want = desired.config_tag();
        let part = |s: &str, p: &str| {
            s.split(',')
                .find_map(|kv| kv.strip_prefix(p))
                .unwrap_or_default()
                .to_owned()
        };
        if part(have, "u=") != part(&want, "u=") {
            paths.push("userData".to_owned());
        }
        if part(have, "r=") != part(&want, "r=") {
            paths.push("rootVolume".to_owned());
        }
    }
    paths
}

/// The launch number for a new instance at an index whose instances are `at`: the fenced one
/// when a launch was in flight and EC2 does not show it (the same token then finds it, or
/// launches it once), else one past every launch known.
fn next_launch(at: &[&Instance], prev: Option<&InstanceStatus>) -> i64 {
    if let Some(p) = prev.and_then(|p| p.pending_launch)
        && !at.iter().any(|i| launch_of(i) == p)
    {
        return p;
    }
    let seen = at.iter().map(|i| launch_of(i));
    let recorded = prev.filter(|p| !p.id.is_empty()).map(|p| p.launch);
    seen.chain(recorded).max().map_or(0, |m| m + 1)
}

fn plan_empty_index(
    desired: &Desired,
    index: i64,
    at: &[&Instance],
    prev: Option<&InstanceStatus>,
    out: &mut Plan,
) {
    let import = usize::try_from(index)
        .ok()
        .and_then(|i| desired.import_ids.get(i))
        .filter(|id| !id.is_empty());
    // An import id not yet ours is adopted; once adopted (tagged) it is one of `at`, and
    // if it was terminated since, the index gets a new launch like any other.
    if let Some(id) = import
        && !at.iter().any(|i| i.id == *id)
    {
        out.steps.push(Step::Adopt {
            index,
            id: id.clone(),
        });
        out.slots.push(InstanceStatus {
            index,
            id: id.clone(),
            state: "adopting".into(),
            ..Default::default()
        });
        return;
    }
    let launch = next_launch(at, prev);
    // The index had an instance at the last pass and it is gone: terminated outside Kraken.
    // (An index dropped by a scale-down has no status entry, so scaling up again is not this.)
    let relaunch_of = prev.filter(|p| !p.id.is_empty()).map(|p| p.id.clone());
    out.steps.push(Step::Launch {
        index,
        launch,
        replaces: None,
        relaunch_of,
    });
    out.slots.push(InstanceStatus {
        index,
        launch,
        state: "launching".into(),
        pending_launch: Some(launch),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests;
