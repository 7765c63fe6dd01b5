//! The API server's limits: CEL cost, CRD size (trimming), and samples that pass validation.

use serde_json::json;

use super::schemas::{self, all_schemas, kitchen, with_data_sources};
use super::{open_api, validate};
use crate::{DEFAULT_MAX_CRD_BYTES, Options, TrimStep, cel, crd, generate, sample_object, trim};

#[test]
fn samples_satisfy_their_crds() {
    for (address, schema) in all_schemas() {
        let generated = generate(&address, &schema, &Options::default()).expect("generate");
        for crd in &generated.crds {
            let rs = &schema.resources[&crd.type_name];
            let sample = sample_object(crd, rs, "sample", "team-a");
            assert_eq!(sample["kind"], crd.kind.as_str());
            let mut errors = Vec::new();
            validate::value(
                &sample["spec"],
                &open_api(crd)["properties"]["spec"],
                "spec",
                &mut errors,
            );
            validate::required_rules(
                &sample["spec"],
                &open_api(crd)["properties"]["spec"],
                &mut errors,
            );
            assert!(
                errors.is_empty(),
                "{}: {errors:#?}\n{sample:#}",
                crd.type_name
            );
        }
    }
    let (address, schema) = kitchen();
    let generated = generate(&address, &schema, &Options::default()).expect("generate");
    let sink = generated
        .crds
        .iter()
        .find(|c| c.type_name == "kitchen_sink")
        .expect("sink");
    let sample = sample_object(sink, &schema.resources["kitchen_sink"], "s", "ns");
    let fp = &sample["spec"]["forProvider"];
    assert_eq!(
        fp["tokenSecretRef"],
        json!({"name": "s-secrets", "key": "token"})
    );
    assert_eq!(fp["disk"].as_array().map(Vec::len), Some(2));
    assert_eq!(fp["rules"], json!([{"port": 1}]));
    assert_eq!(fp["requiredList"], json!(["sample"]));
    assert!(
        fp.get("settings").is_none(),
        "optional arguments are left out"
    );
}

#[test]
fn cel_rules_stay_far_below_the_cel_cost_limits() {
    // Every rule counts: the required-argument rules, the conflict rule over all arguments
    // and the rule on each valuesFrom item.
    let mut worst = (String::new(), cel::CostBound::default());
    for (address, schema) in all_schemas() {
        for crd in generate(&address, &schema, &with_data_sources())
            .expect("generate")
            .crds
        {
            let bound = cel::schema_cost_bound(open_api(&crd)).expect("bounded");
            if bound.total > worst.1.total {
                worst = (crd.type_name.clone(), bound);
            }
        }
    }
    assert!(worst.1.total > 0, "no rules found");
    assert_cost_within_limits(&worst.0, worst.1);
    // A type with 400 required arguments (far beyond any real provider; the most in
    // hashicorp/aws is 75 arguments in all) still fits, its conflict rule in one expression.
    let (address, schema) = schemas::many_required(400);
    let generated = generate(&address, &schema, &Options::default()).expect("generate");
    let spec = &open_api(&generated.crds[0])["properties"]["spec"];
    let conflict_rules = spec["x-kubernetes-validations"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| r["message"] == cel::CONFLICT_MESSAGE)
        .count();
    assert_eq!(conflict_rules, 1);
    let bound = cel::schema_cost_bound(open_api(&generated.crds[0])).expect("bounded");
    assert_cost_within_limits("many_required", bound);
}

fn assert_cost_within_limits(name: &str, bound: cel::CostBound) {
    assert!(
        bound.max_rule <= cel::STATIC_ESTIMATED_COST_LIMIT,
        "{name}: {bound:?}"
    );
    assert!(
        bound.total <= cel::STATIC_ESTIMATED_CRD_COST_LIMIT,
        "{name}: {bound:?}"
    );
    assert!(bound.total <= cel::RUNTIME_COST_BUDGET, "{name}: {bound:?}");
}

#[test]
fn huge_schemas_are_trimmed_to_fit_and_reported() {
    let (address, schema) = schemas::huge(900);
    let generated = generate(&address, &schema, &Options::default()).expect("generate");
    assert!(generated.report.errors.is_empty(), "{}", generated.report);
    let crd = &generated.crds[0];
    assert!(
        crd.json_bytes <= DEFAULT_MAX_CRD_BYTES,
        "{}",
        crd.json_bytes
    );
    assert_eq!(crd.json_bytes, trim::json_size(&crd.crd));
    let trimmed = &generated.report.trimmed[0];
    assert!(trimmed.bytes_before > DEFAULT_MAX_CRD_BYTES);
    assert_eq!(trimmed.steps[0].scope, "status.atProvider");
    let note = crd.crd["metadata"]["annotations"][crd::ANNOTATION_TRIMMED]
        .as_str()
        .expect("trimmed annotation");
    assert!(note.contains("status.atProvider"), "{note}");
    // Fields are never dropped: every argument is still in forProvider.
    let fp = &open_api(crd)["properties"]["spec"]["properties"]["forProvider"]["properties"];
    assert_eq!(fp.as_object().map(|m| m.len()), Some(900));
    assert!(
        generated
            .report
            .to_string()
            .starts_with("trimmed huge_thing: ")
    );

    let tiny = Options {
        max_crd_bytes: 20_000,
        ..Options::default()
    };
    let generated = generate(&address, &schema, &tiny).expect("generate");
    assert!(generated.crds.is_empty());
    assert_eq!(generated.report.errors[0].0, "huge_thing");
    assert!(
        generated
            .report
            .to_string()
            .contains("error: huge_thing: the crd is")
    );
}

/// A WAFv2-like schema has no descriptions to trim: the status schema and then the deepest
/// spec objects collapse to untyped objects, and the result is still structural.
#[test]
fn description_free_giants_collapse_until_they_fit() {
    // Three levels of statements make a 1.5 MB CRD; a third of the default limit forces both
    // collapse steps while keeping the test fast.
    let (address, schema) = schemas::waf(3);
    let limit = DEFAULT_MAX_CRD_BYTES / 3;
    let opts = Options {
        max_crd_bytes: limit,
        ..Options::default()
    };
    let generated = generate(&address, &schema, &opts).expect("generate");
    assert!(generated.report.errors.is_empty(), "{}", generated.report);
    let crd = &generated.crds[0];
    let trimmed = &generated.report.trimmed[0];
    assert!(
        trimmed.bytes_before > DEFAULT_MAX_CRD_BYTES,
        "{}",
        trimmed.bytes_before
    );
    assert!(crd.json_bytes <= limit);
    let scopes: Vec<String> = trimmed.steps.iter().map(TrimStep::to_string).collect();
    assert!(
        scopes
            .iter()
            .any(|s| s.contains("object schemas collapsed in status.atProvider"))
            && scopes
                .iter()
                .any(|s| s.contains("object schemas collapsed in spec.forProvider")),
        "{scopes:?}"
    );
    let mut errors = Vec::new();
    validate::structural(open_api(crd), "", &mut errors);
    assert!(errors.is_empty(), "{errors:#?}");
    // The top levels keep their schema, so required arguments are still enforced.
    let fp = &open_api(crd)["properties"]["spec"]["properties"]["forProvider"];
    assert_eq!(
        fp["properties"]["rule"]["items"]["required"],
        json!(["name", "statement"])
    );
    let sample = sample_object(crd, &schema.resources["waf_web_acl"], "w", "ns");
    validate::value(
        &sample["spec"],
        &open_api(crd)["properties"]["spec"],
        "spec",
        &mut errors,
    );
    assert!(errors.is_empty(), "{errors:#?}");
}
