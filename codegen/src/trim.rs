//! Keeping a CRD under the size limit: descriptions go first, then schema detail, never
//! fields.
//!
//! The API server stores a CRD as one etcd value (1.5 MiB by default), and server-side apply
//! adds managed-fields bookkeeping on top, so codegen keeps the JSON of each CRD under
//! [`crate::Options::max_crd_bytes`]. When a CRD is larger, these steps run in order,
//! measuring after each and stopping as soon as it fits:
//!
//! 1. every description in `status.atProvider` (mostly duplicates of `forProvider`'s);
//! 2. descriptions in `spec.forProvider`, deepest level first, one level per step (depth
//!    counts schema nodes below `forProvider`: properties, list items and map values);
//! 3. every remaining description (the resource's own and Kraken's fields');
//! 4. the schema of `status.atProvider` becomes `x-kubernetes-preserve-unknown-fields`:
//!    status is written only by the controller, so nothing is lost but `kubectl explain`
//!    of status;
//! 5. objects in `spec.forProvider` at depth ≥ d, for d from the deepest level up to 1,
//!    become `x-kubernetes-preserve-unknown-fields` objects: every field below is still
//!    accepted and stored, and the runtime still checks it against the provider schema (with
//!    an error naming the path), but admission no longer does.
//!
//! Steps 4 and 5 only matter for schemas like AWS WAFv2's, whose nested statements are
//! megabytes of structure without a single description. No field ever disappears from what
//! a user can write or read. What was done is recorded in the `tf.kraken.dev/trimmed`
//! annotation and returned for the report; a CRD still too large is an error for the caller
//! to report.
//!
//! Schema nodes are edited only where a node's schema is, never by key name anywhere: a
//! Terraform attribute called `description` is a property and stays.

use serde_json::Value as Json;

use crate::crd::ANNOTATION_TRIMMED;

/// What a trimming step removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrimKind {
    /// Descriptions were removed.
    Descriptions,
    /// Object schemas were replaced by `x-kubernetes-preserve-unknown-fields`.
    CollapsedObjects,
}

/// One trimming step that was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrimStep {
    pub kind: TrimKind,
    /// Where, e.g. `status.atProvider` or `spec.forProvider depth >= 3`.
    pub scope: String,
    /// How many descriptions or object schemas.
    pub count: usize,
}

impl std::fmt::Display for TrimStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            TrimKind::Descriptions => "descriptions removed",
            TrimKind::CollapsedObjects => "object schemas collapsed",
        };
        write!(f, "{} {what} in {}", self.count, self.scope)
    }
}

/// A CRD that fits: what was done, and its sizes before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    pub steps: Vec<TrimStep>,
    pub bytes_before: usize,
    pub bytes: usize,
}

/// Why a CRD could not be made small enough.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    pub bytes: usize,
    pub limit: usize,
}

/// The compact JSON size of a value: what the API server receives and stores.
pub fn json_size(value: &Json) -> usize {
    serde_json::to_vec(value).map_or(0, |v| v.len())
}

/// Shrinks `crd` until its JSON is at most `limit` bytes.
pub fn fit(crd: &mut Json, limit: usize) -> Result<Fitted, TooLarge> {
    let bytes_before = json_size(crd);
    let mut size = bytes_before;
    let mut steps = Vec::new();
    if size <= limit {
        return Ok(Fitted {
            steps,
            bytes_before,
            bytes: size,
        });
    }
    let for_provider = schema_at(crd, &["spec", "forProvider"]);
    let described = for_provider.map_or(0, |n| max_depth(n, &|n| n.get("description").is_some()));
    let objects = for_provider.map_or(0, |n| max_depth(n, &|n| n.get("properties").is_some()));
    let mut plan: Vec<Step> = vec![Step::AtProviderDescriptions];
    plan.extend((0..=described).rev().map(Step::ForProviderDescriptionsFrom));
    plan.push(Step::AllDescriptions);
    plan.push(Step::CollapseAtProvider);
    plan.extend((1..=objects).rev().map(Step::CollapseForProviderFrom));
    for step in plan {
        let count = apply(crd, step);
        if count == 0 {
            continue;
        }
        steps.push(step.record(count));
        annotate(crd, &steps);
        size = json_size(crd);
        if size <= limit {
            return Ok(Fitted {
                steps,
                bytes_before,
                bytes: size,
            });
        }
    }
    Err(TooLarge { bytes: size, limit })
}

#[derive(Debug, Clone, Copy)]
enum Step {
    AtProviderDescriptions,
    ForProviderDescriptionsFrom(usize),
    AllDescriptions,
    CollapseAtProvider,
    CollapseForProviderFrom(usize),
}

impl Step {
    fn record(self, count: usize) -> TrimStep {
        let (kind, scope) = match self {
            Step::AtProviderDescriptions => {
                (TrimKind::Descriptions, "status.atProvider".to_owned())
            }
            Step::ForProviderDescriptionsFrom(d) => (
                TrimKind::Descriptions,
                format!("spec.forProvider depth >= {d}"),
            ),
            Step::AllDescriptions => (TrimKind::Descriptions, "the whole schema".to_owned()),
            Step::CollapseAtProvider => {
                (TrimKind::CollapsedObjects, "status.atProvider".to_owned())
            }
            Step::CollapseForProviderFrom(d) => (
                TrimKind::CollapsedObjects,
                format!("spec.forProvider depth >= {d}"),
            ),
        };
        TrimStep { kind, scope, count }
    }
}

fn apply(crd: &mut Json, step: Step) -> usize {
    let at_provider = ["status", "atProvider"];
    let for_provider = ["spec", "forProvider"];
    match step {
        Step::AtProviderDescriptions => {
            schema_at_mut(crd, &at_provider).map_or(0, |node| strip(node, 0, 0))
        }
        Step::ForProviderDescriptionsFrom(depth) => {
            schema_at_mut(crd, &for_provider).map_or(0, |node| strip(node, 0, depth))
        }
        Step::AllDescriptions => root_schema_mut(crd).map_or(0, |node| strip(node, 0, 0)),
        Step::CollapseAtProvider => {
            schema_at_mut(crd, &at_provider).map_or(0, |node| collapse(node, 0, 0))
        }
        Step::CollapseForProviderFrom(depth) => {
            schema_at_mut(crd, &for_provider).map_or(0, |node| collapse(node, 0, depth))
        }
    }
}

fn annotate(crd: &mut Json, steps: &[TrimStep]) {
    let text: Vec<String> = steps.iter().map(TrimStep::to_string).collect();
    if let Some(annotations) = crd
        .pointer_mut("/metadata/annotations")
        .and_then(Json::as_object_mut)
    {
        annotations.insert(ANNOTATION_TRIMMED.into(), text.join("; ").into());
    }
}

fn root_schema_mut(crd: &mut Json) -> Option<&mut Json> {
    crd.pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
}

/// The schema node at a path of property names below the root schema.
fn schema_at<'a>(crd: &'a Json, path: &[&str]) -> Option<&'a Json> {
    let mut node = crd.pointer("/spec/versions/0/schema/openAPIV3Schema")?;
    for name in path {
        node = node.get("properties")?.get(*name)?;
    }
    Some(node)
}

fn schema_at_mut<'a>(crd: &'a mut Json, path: &[&str]) -> Option<&'a mut Json> {
    let mut node = root_schema_mut(crd)?;
    for name in path {
        node = node.get_mut("properties")?.get_mut(*name)?;
    }
    Some(node)
}

/// The schema nodes directly below `node`: property schemas, items and map values.
fn children_mut(node: &mut Json) -> Vec<&mut Json> {
    let Json::Object(map) = node else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (key, value) in map.iter_mut() {
        match key.as_str() {
            "properties" => {
                if let Json::Object(props) = value {
                    out.extend(props.values_mut());
                }
            }
            "items" | "additionalProperties" => out.push(value),
            _ => {}
        }
    }
    out
}

fn children(node: &Json) -> Vec<&Json> {
    let mut out = Vec::new();
    if let Some(Json::Object(props)) = node.get("properties") {
        out.extend(props.values());
    }
    out.extend(node.get("items"));
    out.extend(node.get("additionalProperties"));
    out
}

/// Removes the descriptions of `node` and its descendants that are at least `from` deep.
fn strip(node: &mut Json, depth: usize, from: usize) -> usize {
    let mut removed = 0;
    if depth >= from
        && let Some(map) = node.as_object_mut()
        && map.remove("description").is_some()
    {
        removed += 1;
    }
    for child in children_mut(node) {
        removed += strip(child, depth + 1, from);
    }
    removed
}

/// Replaces every object schema (a node with properties) of `node` and its descendants that
/// is at least `from` deep by an object that preserves unknown fields. Returns how many.
fn collapse(node: &mut Json, depth: usize, from: usize) -> usize {
    if depth >= from && node.get("properties").is_some() {
        let mut collapsed = serde_json::json!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        });
        if let Some(description) = node.get("description") {
            collapsed["description"] = description.clone();
        }
        *node = collapsed;
        return 1;
    }
    children_mut(node)
        .into_iter()
        .map(|child| collapse(child, depth + 1, from))
        .sum()
}

/// The depth of the deepest node (`node` itself is depth 0) matching `pred`, or 0.
fn max_depth(node: &Json, pred: &dyn Fn(&Json) -> bool) -> usize {
    fn walk(node: &Json, depth: usize, pred: &dyn Fn(&Json) -> bool, max: &mut usize) {
        if pred(node) {
            *max = (*max).max(depth);
        }
        for child in children(node) {
            walk(child, depth + 1, pred, max);
        }
    }
    let mut max = 0;
    walk(node, 0, pred, &mut max);
    max
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(for_provider: Json, at_provider: Json) -> Json {
        json!({"metadata": {"annotations": {}}, "spec": {"versions": [{"schema": {"openAPIV3Schema": {
        "type": "object", "description": "root",
        "properties": {
            "spec": {"type": "object", "description": "spec",
                     "properties": {"forProvider": for_provider}},
            "status": {"type": "object", "properties": {"atProvider": at_provider}},
        }}}}]}})
    }

    fn described(text: &str, extra: Json) -> Json {
        let mut node = json!({"type": "object", "description": text});
        if let (Some(map), Json::Object(more)) = (node.as_object_mut(), extra) {
            map.extend(more);
        }
        node
    }

    #[test]
    fn depth_counts_described_levels() {
        let leaf = described("leaf", json!({}));
        let mid = described("mid", json!({"properties": {"a": leaf}}));
        let top = json!({"type": "object", "properties": {"m": mid, "s": {"type": "string"}}});
        let described = |n: &Json| n.get("description").is_some();
        assert_eq!(max_depth(&top, &described), 2);
        assert_eq!(max_depth(&json!({"type": "string"}), &described), 0);
    }

    #[test]
    fn fitting_crds_are_untouched() {
        let mut c = crd(json!({"type": "object"}), json!({"type": "object"}));
        let before = c.clone();
        let fitted = fit(&mut c, 1 << 20).expect("fits");
        assert!(fitted.steps.is_empty());
        assert_eq!(fitted.bytes, json_size(&before));
        assert_eq!(fitted.bytes_before, fitted.bytes);
        assert_eq!(c, before);
    }

    #[test]
    fn status_goes_first_then_spec_deepest_first() {
        let long = "x".repeat(1000);
        let deep = described(&long, json!({}));
        let field = described(&long, json!({"properties": {"deep": deep}}));
        // A property literally named "description" must survive.
        let prop = json!({"type": "string", "description": long});
        let fp = json!({"type": "object", "properties": {"field": field, "description": prop}});
        let mut c = crd(fp.clone(), fp);
        let full = json_size(&c);
        // Room for everything except status descriptions and the deepest spec level.
        let Fitted {
            steps, bytes: size, ..
        } = fit(&mut c, full - 3500).expect("fits");
        let scopes: Vec<&str> = steps.iter().map(|s| s.scope.as_str()).collect();
        assert_eq!(scopes, ["status.atProvider", "spec.forProvider depth >= 2"]);
        assert_eq!(steps[0].count, 3);
        assert_eq!(steps[0].kind, TrimKind::Descriptions);
        assert!(size <= full - 3500);
        let spec = schema_at(&c, &["spec", "forProvider"]).expect("spec");
        assert!(spec["properties"]["field"]["description"].is_string());
        assert!(
            spec["properties"]["field"]["properties"]["deep"]
                .get("description")
                .is_none()
        );
        assert!(spec["properties"]["description"]["description"].is_string());
        let status = schema_at(&c, &["status", "atProvider"]).expect("status");
        assert!(status["properties"]["description"].is_object());
        let note = c["metadata"]["annotations"][ANNOTATION_TRIMMED]
            .as_str()
            .expect("annotated");
        assert!(
            note.contains("3 descriptions removed in status.atProvider"),
            "{note}"
        );
    }

    #[test]
    fn too_large_without_descriptions_is_an_error() {
        let mut c = crd(json!({"type": "object"}), json!({"type": "object"}));
        let err = fit(&mut c, 10).expect_err("cannot fit");
        assert_eq!(err.limit, 10);
        assert!(err.bytes > 10);
        // The last resort removed even the root's description.
        assert!(
            c.pointer("/spec/versions/0/schema/openAPIV3Schema/description")
                .is_none()
        );
    }

    #[test]
    fn deep_schemas_collapse_status_then_deepest_spec_objects() {
        // A chain of nested objects without descriptions, 12 levels deep.
        let mut leaf = json!({"type": "object", "properties": {"x": {"type": "string"}}});
        for i in 0..12 {
            let pad = "p".repeat(200);
            leaf = json!({"type": "object", "required": ["next"],
                          "properties": {"next": leaf, format!("{pad}{i}"): {"type": "string"}}});
        }
        let mut c = crd(leaf.clone(), leaf);
        let full = json_size(&c);
        let Fitted {
            steps,
            bytes: size,
            bytes_before,
        } = fit(&mut c, full / 3).expect("fits");
        assert_eq!(bytes_before, full);
        assert!(size <= full / 3);
        // The two descriptions of the test scaffold go first; then status, then the deepest.
        let scopes: Vec<(TrimKind, &str)> =
            steps.iter().map(|s| (s.kind, s.scope.as_str())).collect();
        assert_eq!(scopes[0], (TrimKind::Descriptions, "the whole schema"));
        assert_eq!(scopes[1], (TrimKind::CollapsedObjects, "status.atProvider"));
        assert_eq!(
            scopes[2],
            (TrimKind::CollapsedObjects, "spec.forProvider depth >= 12")
        );
        let status = schema_at(&c, &["status", "atProvider"]).expect("status");
        assert_eq!(
            status,
            &json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
        );
        // The top of forProvider keeps its typed properties.
        let spec = schema_at(&c, &["spec", "forProvider"]).expect("spec");
        assert_eq!(spec["required"], json!(["next"]));
        assert_eq!(spec["properties"]["next"]["type"], "object");
    }
}
