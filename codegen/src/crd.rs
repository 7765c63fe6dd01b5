//! IR → a CustomResourceDefinition (`apiextensions.k8s.io/v1`) as JSON.
//!
//! The provider-specific parts (`forProvider`, `atProvider`, the rules on `spec`)
//! come from the IR; everything else is the same for every kind: the reference to a
//! ProviderConfig, `valuesFrom`, the policies, conditions and the last plan.
//!
//! Data sources (group `data.<provider>.tf.kraken.dev`) only read, so their spec has no
//! management, deletion or replace policy and no import id, and their status no `lastPlan`.

use serde_json::{Map, Value as Json, json};

use crate::cel::{
    VALUES_FROM_MAX_ITEMS, VALUES_FROM_PATH_MAX_LENGTH, conflict_rules, exactly_one_source_rule,
    required_rule,
};
use crate::ir::{KindIr, KindNames};
use crate::openapi::object_schema;

/// The one version every generated kind is served and stored as.
pub const VERSION: &str = "v1alpha1";

/// The provider's source address (`registry.terraform.io/hashicorp/random`).
pub const ANNOTATION_PROVIDER: &str = "tf.kraken.dev/provider";
/// The Terraform resource (or data source) type (`random_pet`).
pub const ANNOTATION_RESOURCE_TYPE: &str = "tf.kraken.dev/resource-type";
/// The type's schema version, which state upgrades are measured against.
pub const ANNOTATION_SCHEMA_VERSION: &str = "tf.kraken.dev/schema-version";
/// JSON object: Kubernetes field path → Terraform name, for irregular names only
/// ([`crate::ir::irregular_names`]); absent when every name is regular.
pub const ANNOTATION_FIELD_NAMES: &str = "tf.kraken.dev/field-names";
/// Comma-separated Terraform paths of sensitive attributes ([`crate::ir::sensitive_paths`]),
/// which the runtime publishes to a Secret; absent when there are none.
pub const ANNOTATION_SENSITIVE_OUTPUTS: &str = "tf.kraken.dev/sensitive-outputs";
/// What was trimmed to fit the size limit; absent when nothing was.
pub const ANNOTATION_TRIMMED: &str = "tf.kraken.dev/trimmed";
/// The provider type (`random`), for selecting a provider's CRDs.
pub const LABEL_PROVIDER: &str = "tf.kraken.dev/provider";

/// The complete CRD for one kind.
pub fn render(ir: &KindIr, address: &str, provider_type: &str) -> Json {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata(ir, address, provider_type),
        "spec": {
            "group": ir.names.group,
            "names": names_json(&ir.names),
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": printer_columns(ir.data_source),
                "schema": {"openAPIV3Schema": root_schema(ir, address)},
            }],
        },
    })
}

fn metadata(ir: &KindIr, address: &str, provider_type: &str) -> Json {
    let mut annotations = Map::new();
    annotations.insert(ANNOTATION_PROVIDER.into(), address.into());
    annotations.insert(ANNOTATION_RESOURCE_TYPE.into(), ir.type_name.clone().into());
    annotations.insert(
        ANNOTATION_SCHEMA_VERSION.into(),
        ir.schema_version.to_string().into(),
    );
    if !ir.irregular_names.is_empty() {
        // A BTreeMap serializes with sorted keys, so the text is deterministic.
        let names = serde_json::to_string(&ir.irregular_names).unwrap_or_default();
        annotations.insert(ANNOTATION_FIELD_NAMES.into(), names.into());
    }
    if !ir.sensitive_paths.is_empty() {
        annotations.insert(
            ANNOTATION_SENSITIVE_OUTPUTS.into(),
            ir.sensitive_paths.join(",").into(),
        );
    }
    json!({
        "name": format!("{}.{}", ir.names.plural, ir.names.group),
        "labels": {LABEL_PROVIDER: provider_type},
        "annotations": annotations,
    })
}

fn names_json(names: &KindNames) -> Json {
    let mut map = Map::new();
    map.insert("kind".into(), names.kind.clone().into());
    map.insert("listKind".into(), names.list_kind.clone().into());
    map.insert("plural".into(), names.plural.clone().into());
    map.insert("singular".into(), names.singular.clone().into());
    if !names.short_names.is_empty() {
        map.insert("shortNames".into(), names.short_names.clone().into());
    }
    map.insert("categories".into(), names.categories.clone().into());
    Json::Object(map)
}

/// READY, SYNCED, EXTERNAL-ID, PLAN (resources only: a data source plans nothing), AGE.
fn printer_columns(data_source: bool) -> Json {
    let condition = |name: &str, ty: &str| {
        json!({"name": name.to_ascii_uppercase(), "type": "string",
               "jsonPath": format!(".status.conditions[?(@.type=='{ty}')].status")})
    };
    let mut columns = vec![
        condition("Ready", "Ready"),
        condition("Synced", "Synced"),
        json!({"name": "EXTERNAL-ID", "type": "string", "jsonPath": ".status.externalId"}),
    ];
    if !data_source {
        columns.push(
            json!({"name": "PLAN", "type": "string", "jsonPath": ".status.plan.action",
            "description": "The action of the plan waiting for approval (spec.planPolicy)."}),
        );
    }
    columns.push(json!({"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"}));
    Json::Array(columns)
}

fn root_schema(ir: &KindIr, address: &str) -> Json {
    let what = if ir.data_source {
        "data source"
    } else {
        "resource"
    };
    let note = format!(
        "Terraform {what} {} of {address}, managed by Kraken.",
        ir.type_name
    );
    let description = if ir.description.is_empty() {
        note
    } else {
        format!("{}\n\n{note}", ir.description)
    };
    json!({
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(ir),
            "status": status_schema(ir),
        },
    })
}

fn spec_schema(ir: &KindIr) -> Json {
    let mut for_provider = object_schema(&ir.for_provider, false);
    for_provider["default"] = json!({});
    for_provider["description"] = format!(
        "The arguments of {}, named in lowerCamelCase. A sensitive argument x is given as \
         xSecretRef, a key of a Secret.",
        ir.type_name
    )
    .into();
    let mut properties = Map::new();
    properties.insert("forProvider".into(), for_provider);
    properties.insert(
        "providerConfigRef".into(),
        json!({"type": "object", "default": {"name": "default"}, "required": ["name"],
               "description": "The ProviderConfig, in the same namespace, that configures the provider.",
               "properties": {"name": {"type": "string", "minLength": 1,
                                       "description": "Name of the ProviderConfig."}}}),
    );
    properties.insert("valuesFrom".into(), values_from_schema());
    let (interval, what) = if ir.data_source {
        (
            "refreshInterval",
            "How often the data source is read again, as a Go duration (10m, 1h30m); 0 reads it only when the spec or an input changes.",
        )
    } else {
        (
            "driftInterval",
            "How often the external object is re-read and drift corrected, as a Go duration (10m, 1h30m).",
        )
    };
    properties.insert(
        interval.into(),
        json!({"type": "string", "default": "10m",
               "pattern": r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$",
               "description": what}),
    );
    if !ir.data_source {
        resource_policies(&mut properties);
    }
    let mut spec = json!({
        "type": "object",
        "description": "The desired state.",
        "required": ["forProvider"],
        "properties": properties,
    });
    let rules: Vec<Json> = ir
        .required
        .iter()
        .map(required_rule)
        .chain(conflict_rules(&ir.arguments))
        .map(|rule| rule.to_json())
        .collect();
    if !rules.is_empty() {
        spec["x-kubernetes-validations"] = rules.into();
    }
    spec
}

fn resource_policies(properties: &mut Map<String, Json>) {
    let policy = |values: &[&str], description: &str| json!({"type": "string", "enum": values, "default": values[0], "description": description});
    properties.insert(
        "managementPolicy".into(),
        policy(
            &["Full", "ObserveOnly"],
            "Full creates, updates and deletes the external object; ObserveOnly only reads it.",
        ),
    );
    properties.insert(
        "deletionPolicy".into(),
        policy(
            &["Delete", "Orphan"],
            "Whether deleting this object destroys the external object (Delete) or leaves it (Orphan).",
        ),
    );
    properties.insert(
        "replacePolicy".into(),
        policy(
            &["Allow", "CreateBeforeDestroy", "Refuse"],
            "Whether a change that needs the external object replaced proceeds by destroying the old one and then creating the new one (Allow), proceeds by creating the new one first and destroying the old one once it exists (CreateBeforeDestroy, Terraform's lifecycle create_before_destroy), or is refused (Refuse).",
        ),
    );
    properties.insert(
        "planPolicy".into(),
        json!({"type": "string", "enum": ["Auto", "Manual", "ManualForDestructive"],
               "description": "Which changes wait for approval of their plan (status.plan; kubectl kraken approve): none (Auto), every create, update, replacement, drift correction and delete (Manual), or replacements and deletes (ManualForDestructive). The strictest of this, the ProviderConfig's spec.planPolicy and the Namespace's label kraken.dev/plan-policy applies: a resource may ask for more review, never less."}),
    );
    properties.insert(
        "ignoreChanges".into(),
        json!({"type": "array", "maxItems": 64,
               "items": {"type": "string", "minLength": 1, "maxLength": VALUES_FROM_PATH_MAX_LENGTH},
               "description": "Arguments whose changes are not applied once the external object exists (Terraform's lifecycle ignore_changes), as dotted paths below forProvider (tags, tags.Name, rules.0.port): neither a change of this spec nor drift made outside is acted on there."}),
    );
    properties.insert(
        "importId".into(),
        json!({"type": "string",
               "description": "Adopt the existing external object with this import id instead of creating one."}),
    );
    properties.insert(
        "importIdentity".into(),
        json!({"type": "object",
               "x-kubernetes-preserve-unknown-fields": true,
               "description": "Adopt the existing external object with this resource identity instead of creating one: the attributes the provider's identity schema for the type declares (hashicorp/aws: id, and optionally region and account_id). Takes precedence over importId. For providers that declare identities (protocol 5.9/6.9); otherwise the import is refused with the reason."}),
    );
}

/// The description of the optional `namespace` of every `valuesFrom` source reference.
const NAMESPACE: &str = "Namespace of the referenced object. References must stay in the \
    object's own namespace; any other value is refused with the condition CrossNamespace.";

const API_VERSION: &str = "API version of the referenced kind (random.tf.kraken.dev/v1alpha1). \
    Needed only when two installed providers have a kind of this name; otherwise the \
    reference is refused with the condition Ambiguous.";

/// The schema of `spec.valuesFrom`, shared by every generated kind and the native kinds.
pub fn values_from_schema() -> Json {
    let string = |d: &str| json!({"type": "string", "minLength": 1, "description": d});
    let reference = |keys: &[(&str, &str)], description: &str| {
        let mut properties: Map<String, Json> = keys
            .iter()
            .map(|(k, d)| ((*k).to_owned(), string(d)))
            .collect();
        properties.insert("namespace".into(), string(NAMESPACE));
        if keys.iter().any(|(k, _)| *k == "kind") {
            properties.insert("apiVersion".into(), string(API_VERSION));
        }
        let required: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
        json!({"type": "object", "required": required, "properties": properties,
               "description": description})
    };
    let path =
        "A dotted path of field names, with list indices and map keys as segments (rules.0.port).";
    json!({
        "type": "array",
        "maxItems": VALUES_FROM_MAX_ITEMS,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["path"],
        "description": "Arguments taken from other objects instead of forProvider, one entry per argument path.",
        "items": {
            "type": "object",
            "required": ["path"],
            "x-kubernetes-validations": [exactly_one_source_rule().to_json()],
            "properties": {
                "path": {"type": "string", "minLength": 1, "maxLength": VALUES_FROM_PATH_MAX_LENGTH,
                         "description": format!("The argument to set, below forProvider. {path}")},
                "resource": reference(
                    &[("kind", "Kind of a Kraken-managed object in this namespace."),
                      ("name", "Its name."),
                      ("path", format!("The output to take, in its status.atProvider. {path}").as_str())],
                    "An output of another Kraken-managed object."),
                "stateDeclaration": reference(
                    &[("name", "Name of the StateDeclaration."), ("path", "The value to take from it.")],
                    "A value of a StateDeclaration in this namespace."),
                "configMapKeyRef": reference(
                    &[("name", "Name of the ConfigMap."), ("key", "The key.")],
                    "A key of a ConfigMap in this namespace."),
                "secretKeyRef": reference(
                    &[("name", "Name of the Secret."), ("key", "The key.")],
                    "A key of a Secret in this namespace."),
                "template": {"type": "string", "maxLength": crate::cel::TEMPLATE_MAX_LENGTH,
                             "description": "A literal value, parsed as the argument's Terraform type; use it for numbers beyond 64-bit precision."},
            },
        },
    })
}

fn status_schema(ir: &KindIr) -> Json {
    let mut at_provider = object_schema(&ir.at_provider, true);
    at_provider["description"] = format!(
        "The last observed state of {}; sensitive attributes are published to a Secret instead.",
        ir.type_name
    )
    .into();
    let mut properties = Map::new();
    properties.insert("atProvider".into(), at_provider);
    properties.insert("conditions".into(), conditions_schema());
    properties.insert(
        "observedGeneration".into(),
        json!({"type": "integer", "format": "int64",
               "description": "The metadata.generation the status reflects."}),
    );
    properties.insert(
        "externalId".into(),
        json!({"type": "string", "description": "The id of the external object."}),
    );
    if !ir.data_source {
        properties.insert(
            "lastPlan".into(),
            json!({"type": "object", "description": "The last change planned for the external object.",
                   "properties": {
                       "action": {"type": "string",
                                  "enum": ["Create", "Update", "Replace", "Delete", "NoOp"]},
                       "paths": {"type": "array", "items": {"type": "string"},
                                 "description": "The argument paths that change."}}}),
        );
        properties.insert("plan".into(), plan_schema());
        properties.insert(
            "lastAppliedPlan".into(),
            applied_plan_schema("The last plan applied after approval."),
        );
        properties.insert(
            "planHistory".into(),
            json!({"type": "array", "maxItems": 10,
                   "description": "The plans applied after approval, newest first (at most 10).",
                   "items": applied_plan_schema("A plan applied after approval.")}),
        );
        properties.insert(
            "dependencyRequest".into(),
            json!({"type": "string",
                   "description": "The DependencyRequest (same namespace) that resolves spec.valuesFrom, while there is one."}),
        );
        properties.insert(
            "stateDeclaration".into(),
            json!({"type": "object",
                   "description": "The StateDeclaration publishing this object's outputs for others to reference.",
                   "properties": {
                       "name": {"type": "string", "description": "Its name, <kind>-<name>.<group>."},
                       "hash": {"type": "string", "description": "A hash of what was last published, to skip unchanged writes."}}}),
        );
    }
    json!({"type": "object", "description": "The observed state.", "properties": properties})
}

/// A plan applied after approval, with who approved it.
fn applied_plan_schema(description: &str) -> Json {
    let text = |d: &str| json!({"type": "string", "description": d});
    json!({"type": "object", "description": description, "properties": {
        "id": text("The plan's id."),
        "action": text("What it did: Create, Update, Replace or Delete."),
        "approvedBy": text("Who approved it (the annotation kraken.dev/approved-by, which the admission policy kraken-plan-approval admits only as the approving user's own name; marked unverified when that policy is not installed)."),
        "appliedAt": {"type": "string", "format": "date-time", "description": "When it was carried out."},
    }})
}

/// `status.plan`: the change waiting for approval under `spec.planPolicy`.
fn plan_schema() -> Json {
    let text = |d: &str| json!({"type": "string", "description": d});
    json!({
        "type": "object",
        "description": "The change waiting for approval (spec.planPolicy); absent when none waits. \
            Approve it by annotating the object with kraken.dev/approve-plan: <id>.",
        "properties": {
            "id": text("The plan's id: a digest, keyed with the operator's secret plan key, of the generation, the prior state, the resolved inputs, the provider and its ProviderConfig."),
            "action": {"type": "string", "enum": ["Create", "Update", "Replace", "Delete", "NoOp"]},
            "reason": {"type": "string", "enum": ["PlanPending", "DriftPending", "DeletePending"],
                       "description": "What waits: a change of the spec (PlanPending), putting back a change made outside Kraken (DriftPending), or destroying the external object of a deleted resource (DeletePending)."},
            "changes": {
                "type": "array",
                "maxItems": 256,
                "description": "What changes, per top-level attribute and policy field, values whole up to 64 KiB (at most 256 changes and 512 KiB of values; see omitted).",
                "items": {"type": "object", "required": ["path"], "properties": {
                    "path": text("The field, in Kubernetes names."),
                    "before": text("The value now, as JSON; (sensitive) when redacted."),
                    "after": text("The value planned, as JSON; (known after apply) when the provider knows it only then."),
                    "unknown": {"type": "boolean", "description": "Part of the value is known only after apply."},
                    "forcesReplacement": {"type": "boolean", "description": "Changing it replaces the external object."},
                }},
            },
            "omitted": {"type": "integer", "description": "Changes not listed."},
            "staleApproval": {"type": "object", "description": "An approval given for another plan, and why it no longer applies.",
                              "properties": {"id": text("The plan id approved."), "why": text("What moved since.")}},
            "basis": {"type": "object", "description": "What the plan was made from (keyed digests), to say why an approval is stale.",
                      "x-kubernetes-preserve-unknown-fields": true},
        },
    })
}

fn conditions_schema() -> Json {
    json!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "description": "Ready and Synced.",
        "items": {
            "type": "object",
            "required": ["type", "status"],
            "properties": {
                "type": {"type": "string"},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string"},
                "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "observedGeneration": {"type": "integer", "format": "int64"},
            },
        },
    })
}
