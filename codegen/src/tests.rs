//! Tests of the whole pipeline on the committed test schemas (`testdata/schemas`, read from
//! the real providers) and the hand-written `testdata/synthetic` ones that use every schema
//! feature.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value as Json, json};

use super::*;

mod limits;
mod placement;
mod schemas;
mod validate;

use schemas::{all_schemas, kitchen, with_data_sources};

/// This crate's directory, from the `CARGO_MANIFEST_DIR` cargo sets when it runs the tests (not
/// the one compiled in: a build cache shared between two checkouts may run a binary compiled in
/// the other one).
pub(crate) fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        std::path::PathBuf::from,
    )
}

fn open_api(crd: &GeneratedCrd) -> &Json {
    &crd.crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

#[test]
fn group_for_provider() {
    assert_eq!(api_group("random"), "random.tf.kraken.dev");
    assert_eq!(
        provider_type("registry.terraform.io/hashicorp/random"),
        "random"
    );
    assert_eq!(provider_type("random"), "random");
}

#[test]
fn every_test_schema_generates_without_errors() {
    for (address, schema) in all_schemas() {
        let generated = generate(&address, &schema, &with_data_sources()).expect("generate");
        assert!(generated.report.errors.is_empty(), "{}", generated.report);
        let want = schema.resources.len() + schema.data_sources.len();
        assert_eq!(generated.crds.len(), want, "{address}");
    }
}

#[test]
fn every_schema_node_is_structural() {
    for (address, schema) in all_schemas() {
        for crd in generate(&address, &schema, &with_data_sources())
            .expect("generate")
            .crds
        {
            let mut errors = Vec::new();
            validate::structural(open_api(&crd), "", &mut errors);
            assert!(errors.is_empty(), "{}: {errors:#?}", crd.type_name);
        }
    }
}

#[test]
fn kitchen_sink_maps_every_feature() {
    let (address, schema) = kitchen();
    let generated = generate(&address, &schema, &with_data_sources()).expect("generate");
    let sink = generated
        .crds
        .iter()
        .find(|c| c.type_name == "kitchen_sink")
        .expect("kitchen_sink");
    let spec = &open_api(sink)["properties"]["spec"];
    let fp = &spec["properties"]["forProvider"]["properties"];
    assert_eq!(fp["fooBar"]["type"], "string");
    assert_eq!(fp["fooBar2"]["type"], "string");
    assert_eq!(fp["fooBar3"]["type"], "number");
    assert!(fp.get("tokenSecretRef").is_some() && fp.get("tokenSecretRef2").is_some());
    assert_eq!(fp["labels"]["x-kubernetes-list-type"], "set");
    assert_eq!(fp["counts"]["items"]["type"], "number");
    assert!(fp["unique"].get("x-kubernetes-list-type").is_none());
    assert_eq!(
        fp["pair"],
        json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(fp["network"]["minItems"], 1);
    assert_eq!(fp["network"]["maxItems"], 1);
    assert_eq!(fp["network"]["items"]["required"], json!(["subnetId"]));
    assert_eq!(fp["disk"]["minItems"], 2);
    assert_eq!(fp["meta"]["additionalProperties"]["type"], "object");
    assert_eq!(fp["timeouts"]["type"], "object");
    assert_eq!(fp["marker"]["description"], "Deprecated.");
    assert_eq!(fp["legacy"]["description"], "Deprecated.");
    assert_eq!(
        fp["settings"]["required"],
        json!(["level", "mustSecretSecretRef"])
    );
    assert!(fp["settings"]["properties"].get("computedOnly").is_none());
    assert!(fp.get("statusOnly").is_none() && fp.get("id").is_none());
    let rules = spec["x-kubernetes-validations"].as_array().expect("rules");
    let paths: Vec<&str> = rules
        .iter()
        .map(|r| r["fieldPath"].as_str().expect("fieldPath"))
        .collect();
    assert_eq!(
        paths,
        [
            ".forProvider.disk",
            ".forProvider.name",
            ".forProvider.namespace",
            ".forProvider.network",
            ".forProvider.requiredList",
            ".forProvider.rules",
            ".forProvider.tokenSecretRef",
            ".valuesFrom",
        ]
    );
    // The conflict rule covers every argument, required or not, under its valuesFrom name.
    let conflict = rules.last().and_then(|r| r["rule"].as_str()).expect("rule");
    for field in fp.as_object().expect("forProvider").keys() {
        assert!(
            conflict.contains(&format!(
                "has(self.forProvider.{}) ",
                names::cel_field(field)
            )),
            "{field}: {conflict}"
        );
    }
    assert!(conflict.contains("(has(self.forProvider.tokenSecretRef) && v.path == 'token')"));
    assert!(conflict.contains("v.path.startsWith('disk.')"));
    assert!(!conflict.contains("v.path.startsWith('name.')"));
    let annotations = &sink.crd["metadata"]["annotations"];
    assert_eq!(
        annotations[crd::ANNOTATION_SENSITIVE_OUTPUTS],
        "api_key,secret_out,settings.must_secret,settings.secret,token,write_only_pw"
    );
    let names: BTreeMap<String, String> = serde_json::from_str(
        annotations[crd::ANNOTATION_FIELD_NAMES]
            .as_str()
            .expect("field names"),
    )
    .expect("json");
    assert_eq!(names["fooBar3"], "foo__bar");
    assert_eq!(names["tokenSecretRef2"], "token_secret_ref");
    assert_eq!(names["config.inner.aB2"], "a__b");
    assert_eq!(names["config.items.x1"], "x_1");
    assert_eq!(
        open_api(sink)["description"]
            .as_str()
            .expect("description")
            .split('\n')
            .next(),
        Some("Deprecated. Every schema feature codegen maps.")
    );
}

#[test]
fn data_sources_get_their_own_group_and_a_reading_spec() {
    let (address, schema) = kitchen();
    let without = generate(&address, &schema, &Options::default()).expect("generate");
    assert!(without.crds.iter().all(|c| !c.data_source));
    let with = generate(&address, &schema, &with_data_sources()).expect("generate");
    let info = with
        .crds
        .iter()
        .find(|c| c.type_name == "kitchen_info")
        .expect("data source");
    assert!(info.data_source);
    assert_eq!(info.group, "data.kitchen.tf.kraken.dev");
    assert_eq!(info.kind, "DataInfo");
    assert_eq!(info.file_name, "data.kitchen.tf.kraken.dev_datainfos.yaml");
    let spec = &open_api(info)["properties"]["spec"]["properties"];
    assert!(spec.get("deletionPolicy").is_none() && spec.get("importId").is_none());
    assert!(spec.get("driftInterval").is_none());
    assert_eq!(spec["refreshInterval"]["default"], json!("10m"));
    assert!(
        open_api(info)["properties"]["status"]["properties"]
            .get("lastPlan")
            .is_none()
    );
    assert_eq!(
        info.crd["spec"]["names"]["shortNames"],
        json!(["kitchendatainfo"])
    );
}

/// A data source and a resource of the same type name (`aws_ami` is both) get kinds of their
/// own, and a resource whose kind is a data source kind's (`kitchen_data_sink`) takes a numbered
/// one: no kind name is used twice by one provider. Data source patterns apart from resource
/// patterns select only data sources, and one that matches nothing is reported as such.
#[test]
fn data_source_kinds_never_share_a_name_with_a_resource_kind() {
    let (address, mut schema) = kitchen();
    let sink = schema.resources["kitchen_sink"].clone();
    schema
        .data_sources
        .insert("kitchen_sink".into(), sink.clone());
    schema.resources.insert("kitchen_data_sink".into(), sink);
    let opts = Options {
        resources: vec!["kitchen_sink".into(), "kitchen_data_sink".into()],
        data_sources: true,
        data_source_types: Some(vec!["kitchen_sink".into(), "kitchen_nothing".into()]),
        ..Options::default()
    };
    let generated = generate(&address, &schema, &opts).expect("generate");
    let kinds: Vec<(&str, bool, &str)> = generated
        .crds
        .iter()
        .map(|c| (c.type_name.as_str(), c.data_source, c.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("kitchen_data_sink", false, "DataSink"),
            ("kitchen_sink", false, "Sink"),
            ("kitchen_sink", true, "DataSink2"),
        ]
    );
    assert_eq!(
        generated.report.errors,
        [(
            "data source kitchen_nothing".to_owned(),
            "the pattern matches no resource type".to_owned()
        )]
    );
}

#[test]
fn names_follow_the_conventions() {
    let (address, schema) = kitchen();
    let generated = generate(&address, &schema, &Options::default()).expect("generate");
    let by_type: BTreeMap<&str, &GeneratedCrd> = generated
        .crds
        .iter()
        .map(|c| (c.type_name.as_str(), c))
        .collect();
    let names = &by_type["kitchen_sink"].crd["spec"]["names"];
    assert_eq!(
        names,
        &json!({"kind": "Sink", "listKind": "SinkList", "plural": "sinks", "singular": "sink",
                "shortNames": ["kitchensink"], "categories": ["kraken", "kraken-kitchen"]})
    );
    assert_eq!(by_type["kitchen"].kind, "Kitchen");
    assert_eq!(by_type["kitchen_bytes"].plural, "bytes");
    let meta = &by_type["kitchen_sink"].crd["metadata"];
    assert_eq!(meta["name"], "sinks.kitchen.tf.kraken.dev");
    assert_eq!(meta["labels"][crd::LABEL_PROVIDER], "kitchen");
    assert_eq!(meta["annotations"][crd::ANNOTATION_SCHEMA_VERSION], "3");
    assert_eq!(
        meta["annotations"][crd::ANNOTATION_RESOURCE_TYPE],
        "kitchen_sink"
    );
    let columns: Vec<&str> =
        by_type["kitchen_sink"].crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| c["name"].as_str().expect("name"))
            .collect();
    assert_eq!(columns, ["READY", "SYNCED", "EXTERNAL-ID", "PLAN", "AGE"]);
}

#[test]
fn clashing_kinds_are_renamed_and_reported_and_short_name_clashes_dropped() {
    let mut schema = schema::ProviderSchema::default();
    for name in [
        "x_foo_bar",
        "x_foobar",
        "x_a__b",
        "x_a_b",
        "x_thing",
        "x_xthing",
    ] {
        schema.resources.insert(name.into(), Default::default());
    }
    let generated = generate("example/x", &schema, &Options::default()).expect("generate");
    // x_a__b and x_a_b are both kind AB; x_foo_bar (FooBar) and x_foobar (Foobar) share
    // the plural foobars. The first in order keeps the name, the other takes a numbered kind.
    assert!(generated.report.errors.is_empty(), "{}", generated.report);
    let renamed: Vec<(&str, &str)> = generated
        .report
        .renamed
        .iter()
        .map(|(t, k, _)| (t.as_str(), k.as_str()))
        .collect();
    assert_eq!(renamed, [("x_a_b", "AB2"), ("x_foobar", "Foobar2")]);
    let thing = generated
        .crds
        .iter()
        .find(|c| c.type_name == "x_xthing")
        .expect("xthing");
    // x_thing's short name "xthing" is x_xthing's singular: the short name gives way.
    assert_eq!(thing.crd["spec"]["names"]["singular"], "xthing");
    assert_eq!(thing.crd["spec"]["names"]["shortNames"], json!(["xxthing"]));
    let first = generated
        .crds
        .iter()
        .find(|c| c.type_name == "x_thing")
        .expect("thing");
    assert!(first.crd["spec"]["names"].get("shortNames").is_none());
}

#[test]
fn patterns_select_types() {
    let (address, schema) = kitchen();
    let opts = Options {
        resources: vec![
            "kitchen_s*".into(),
            "kitchen_i?fo".into(),
            "nothing_*".into(),
        ],
        data_sources: true,
        ..Options::default()
    };
    let generated = generate(&address, &schema, &opts).expect("generate");
    let types: Vec<&str> = generated
        .crds
        .iter()
        .map(|c| c.type_name.as_str())
        .collect();
    assert_eq!(types, ["kitchen_sink", "kitchen_info"]);
    assert_eq!(
        generated.report.errors,
        [(
            "nothing_*".to_owned(),
            "the pattern matches no resource type".to_owned()
        )]
    );
    let bad = Options {
        resources: vec!["[".into()],
        ..Options::default()
    };
    let err = generate(&address, &schema, &bad).expect_err("invalid pattern");
    assert_eq!(err.to_string(), "invalid resource pattern \"[\"");
}

#[test]
fn write_dir_is_deterministic_and_removes_stale_files() {
    let (address, schema) = kitchen();
    let generated = generate(&address, &schema, &with_data_sources()).expect("generate");
    let dir = tempfile::tempdir().expect("tempdir");
    let stale = dir.path().join("kitchen.tf.kraken.dev_olds.yaml");
    let mine = dir.path().join("notes.yaml");
    std::fs::write(&stale, "old").expect("write");
    std::fs::write(&mine, "keep").expect("write");
    write_dir(&generated, dir.path()).expect("write_dir");
    let first = read_all(dir.path());
    assert!(!stale.exists(), "stale CRD file removed");
    assert!(mine.exists(), "other files kept");
    write_dir(&generated, dir.path()).expect("write_dir again");
    assert_eq!(read_all(dir.path()), first);
    let kustomization: Json =
        yaml_serde::from_str(&first["kustomization.yaml"]).expect("kustomization yaml");
    assert_eq!(
        kustomization["resources"],
        json!([
            "data.kitchen.tf.kraken.dev_datainfos.yaml",
            "kitchen.tf.kraken.dev_bytes.yaml",
            "kitchen.tf.kraken.dev_kitchens.yaml",
            "kitchen.tf.kraken.dev_sinks.yaml",
        ])
    );
    let index: Json = yaml_serde::from_str(&first["index.yaml"]).expect("index yaml");
    assert_eq!(
        index[0],
        json!({"typeName": "kitchen", "kind": "Kitchen", "group": "kitchen.tf.kraken.dev",
               "plural": "kitchens", "dataSource": false,
               "file": "kitchen.tf.kraken.dev_kitchens.yaml"})
    );
    for crd in &generated.crds {
        let back: Json = yaml_serde::from_str(&first[&crd.file_name]).expect("crd yaml");
        assert_eq!(back, crd.crd, "{}", crd.file_name);
    }
}

fn read_all(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let path = e.expect("entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read_to_string(&path).expect("read"))
        })
        .collect()
}

#[test]
fn report_display_is_one_line_per_entry() {
    assert_eq!(Report::default().to_string(), "nothing trimmed, no errors");
    let report = Report {
        trimmed: vec![Trimmed {
            type_name: "a_b".into(),
            bytes_before: 10,
            bytes_after: 5,
            steps: vec![TrimStep {
                kind: TrimKind::Descriptions,
                scope: "status.atProvider".into(),
                count: 3,
            }],
        }],
        renamed: vec![("a_ds".into(), "Ds2".into(), "Ds".into())],
        errors: vec![("a_c".into(), "too large".into())],
    };
    assert_eq!(
        report.to_string(),
        "renamed a_ds: kind Ds2 (the names of Ds are taken in its group)\ntrimmed a_b: 10 -> 5 bytes (3 descriptions removed in status.atProvider)\nerror: a_c: too large\n"
    );
}

#[test]
fn long_kinds_are_abbreviated_then_hashed_to_fit_list_kind_limits() {
    use crate::names::{MAX_KIND_LEN, kind_for};
    let abbreviated = kind_for(
        "aws",
        "aws_notifications_managed_notification_additional_channel_association",
    );
    assert_eq!(
        abbreviated,
        "NotificationsManagedNotificationAdditionalChannelAssoc"
    );
    let long = format!("aws_{}", "very_long_segment_".repeat(6));
    let (a, b) = (kind_for("aws", &long), kind_for("aws", &format!("{long}x")));
    assert!(
        a.len() <= MAX_KIND_LEN && b.len() <= MAX_KIND_LEN,
        "{a} {b}"
    );
    assert_ne!(a, b, "cut kinds stay distinct");
    assert!(crate::ir::is_dns1035_label(
        &format!("{a}List").to_ascii_lowercase()
    ));
}

#[test]
fn a_type_whose_names_are_taken_gets_a_numbered_kind_and_is_reported() {
    let mut schema = ProviderSchema::default();
    for name in ["x_tag", "x_tags"] {
        schema.resources.insert(name.into(), Schema::default());
    }
    let generated = generate("example.com/acme/x", &schema, &Options::default()).expect("generate");
    let kinds: Vec<&str> = generated.crds.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["Tag", "Tags2"]);
    assert_eq!(
        generated.report.renamed,
        [(
            "x_tags".to_string(),
            "Tags2".to_string(),
            "Tags".to_string()
        )]
    );
    assert!(generated.report.errors.is_empty());
}

#[test]
fn streaming_writer_writes_the_same_files_as_write_dir() {
    let schema = ProviderSchema {
        resources: [
            ("x_a".to_string(), Schema::default()),
            ("x_b".to_string(), Schema::default()),
        ]
        .into(),
        ..Default::default()
    };
    let generated = generate("example.com/acme/x", &schema, &Options::default()).expect("generate");
    let (one, two) = (tempfile_dir("one"), tempfile_dir("two"));
    write_dir(&generated, &one).expect("write_dir");
    let mut writer = crate::DirWriter::create(&two).expect("create");
    let report = crate::generate_each("example.com/acme/x", &schema, &Options::default(), |c| {
        writer.write(&c)
    })
    .expect("generate_each");
    writer.finish().expect("finish");
    assert!(report.errors.is_empty());
    let list = |d: &std::path::Path| {
        let mut v: Vec<(String, String)> = std::fs::read_dir(d)
            .expect("read_dir")
            .map(|e| {
                let p = e.expect("entry").path();
                (
                    p.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    std::fs::read_to_string(&p).expect("read"),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(list(&one), list(&two));
    let _ = std::fs::remove_dir_all(&one);
    let _ = std::fs::remove_dir_all(&two);
}

fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kraken-codegen-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A schema without its descriptions still generates the same CRDs but for the text: the
/// types, required fields and validation a serving process relies on are untouched.
#[test]
fn stripping_docs_keeps_everything_but_the_text() {
    let mut stripped = 0;
    for (address, schema) in all_schemas() {
        let mut lean = schema.clone();
        lean.strip_docs();
        let described = |s: &ProviderSchema| {
            s.resources
                .values()
                .chain(s.data_sources.values())
                .flat_map(|r| r.block.attributes.values())
                .filter(|a| !a.description.is_empty())
                .count()
        };
        assert_eq!(described(&lean), 0, "{address}");
        stripped += described(&schema);
        let types = |s: &ProviderSchema| -> Vec<_> {
            s.resources
                .values()
                .map(|r| r.block.implied_type())
                .collect()
        };
        assert_eq!(types(&schema), types(&lean), "{address}");
        let required = |s: &ProviderSchema| -> Vec<(String, String)> {
            s.resources
                .iter()
                .flat_map(|(t, r)| {
                    r.block
                        .attributes
                        .iter()
                        .filter(|(_, a)| a.required || a.sensitive || a.computed)
                        .map(move |(n, _)| (t.clone(), n.clone()))
                })
                .collect()
        };
        assert_eq!(required(&schema), required(&lean), "{address}");
    }
    assert!(stripped > 0, "the test schemas have descriptions to strip");
}
