//! Schemas for the pipeline tests: the committed ones and generated extremes.

use std::path::Path;

use crate::Options;
use crate::cty::Type;
use crate::schema::{Attribute, Block, NestedBlock, ProviderSchema, Schema};
use crate::tfjson::parse_provider_schemas;

fn load(path: &Path) -> Vec<(String, ProviderSchema)> {
    let text = std::fs::read_to_string(path).expect("read schema");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("schema json");
    parse_provider_schemas(&doc)
        .expect("parse schema")
        .into_iter()
        .collect()
}

fn json_files(dir: &str) -> Vec<std::path::PathBuf> {
    let dir = crate::tests::manifest_dir().join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("testdata dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// Every schema in `testdata/schemas` (from real providers) and `testdata/synthetic`.
pub fn all_schemas() -> Vec<(String, ProviderSchema)> {
    let mut out: Vec<_> = json_files("testdata/schemas")
        .iter()
        .flat_map(|p| load(p))
        .collect();
    assert!(out.len() >= 4, "the four test providers");
    out.extend(
        json_files("testdata/synthetic")
            .iter()
            .flat_map(|p| load(p)),
    );
    out
}

/// The hand-written schema that uses every feature.
pub fn kitchen() -> (String, ProviderSchema) {
    let path = crate::tests::manifest_dir().join("testdata/synthetic/kitchen.json");
    load(&path).remove(0)
}

pub fn with_data_sources() -> Options {
    Options {
        data_sources: true,
        ..Options::default()
    }
}

fn attr(ty: Type, description: String) -> Attribute {
    Attribute {
        ty: Some(ty),
        description,
        ..Default::default()
    }
}

/// One resource type with `n` required arguments, every fourth of them sensitive and every
/// third a list (so its rule also accepts subpaths).
pub fn many_required(n: usize) -> (String, ProviderSchema) {
    let mut block = Block::default();
    for i in 0..n {
        let ty = if i % 3 == 0 {
            Type::list(Type::String)
        } else {
            Type::String
        };
        let mut a = attr(ty, String::new());
        a.required = true;
        a.sensitive = i % 4 == 0;
        block.attributes.insert(format!("argument_number_{i}"), a);
    }
    single("many", "many_required", block)
}

/// One resource type whose CRD is far over the default size limit: `n` fields in
/// `forProvider`, `n - 1` described optional+computed arguments and a described nested block.
pub fn huge(n: usize) -> (String, ProviderSchema) {
    let text = "A long provider description of this argument. ".repeat(16);
    let mut block = Block::default();
    for i in 1..n {
        let mut a = attr(Type::String, format!("{i}: {text}"));
        a.optional = true;
        a.computed = true;
        block.attributes.insert(format!("attribute_{i:04}"), a);
    }
    let mut leaf = attr(Type::Number, text.clone());
    leaf.optional = true;
    let mut inner = Block {
        description: text,
        ..Default::default()
    };
    inner.attributes.insert("leaf".into(), leaf);
    block.block_types.insert(
        "attribute_nested".into(),
        NestedBlock {
            block: inner,
            ..Default::default()
        },
    );
    single("huge", "huge_thing", block)
}

fn single(provider: &str, type_name: &str, block: Block) -> (String, ProviderSchema) {
    let mut schema = ProviderSchema::default();
    schema
        .resources
        .insert(type_name.into(), Schema { version: 0, block });
    (format!("registry.kraken.dev/kraken/{provider}"), schema)
}

fn list_block(block: Block, min_items: i64, max_items: i64) -> NestedBlock {
    NestedBlock {
        block,
        nesting: crate::schema::BlockNesting::List,
        min_items,
        max_items,
    }
}

fn arg(required: bool, ty: Type) -> Attribute {
    Attribute {
        ty: Some(ty),
        required,
        optional: !required,
        ..Default::default()
    }
}

/// A block like AWS WAFv2's `field_to_match`: many small optional sub-blocks.
fn field_to_match() -> NestedBlock {
    let mut block = Block::default();
    for name in [
        "all_query_arguments",
        "body",
        "cookies",
        "header_order",
        "headers",
        "ja3_fingerprint",
        "json_body",
        "method",
        "query_string",
        "single_header",
        "single_query_argument",
        "uri_fragment",
        "uri_path",
    ] {
        let mut inner = Block::default();
        inner
            .attributes
            .insert("match_scope".into(), arg(true, Type::String));
        inner
            .attributes
            .insert("oversize_handling".into(), arg(false, Type::String));
        inner.attributes.insert(
            "included_paths".into(),
            arg(false, Type::list(Type::String)),
        );
        block
            .block_types
            .insert(name.into(), list_block(inner, 0, 1));
    }
    list_block(block, 0, 1)
}

/// A statement `levels` deep, shaped like WAFv2's: leaf statements at every level, and
/// `and`/`or`/`not` statements holding statements one level down. No descriptions at all,
/// like the real provider's.
fn statement(levels: usize) -> NestedBlock {
    let mut block = Block::default();
    for name in [
        "byte_match_statement",
        "geo_match_statement",
        "regex_match_statement",
        "size_constraint_statement",
        "sqli_match_statement",
        "xss_match_statement",
    ] {
        let mut leaf = Block::default();
        leaf.attributes
            .insert("search_string".into(), arg(false, Type::String));
        leaf.attributes
            .insert("priority".into(), arg(true, Type::Number));
        leaf.block_types
            .insert("field_to_match".into(), field_to_match());
        block
            .block_types
            .insert(name.into(), list_block(leaf, 0, 1));
    }
    if levels > 0 {
        for (name, min, max) in [
            ("and_statement", 2, 0),
            ("or_statement", 2, 0),
            ("not_statement", 1, 1),
        ] {
            let mut inner = Block::default();
            inner.block_types.insert(
                "statement".into(),
                list_block(statement(levels - 1).block, min, max),
            );
            block
                .block_types
                .insert(name.into(), list_block(inner, 0, 1));
        }
    }
    list_block(block, 1, 1)
}

/// A web ACL like WAFv2's, whose CRD is several megabytes without a single description.
pub fn waf(levels: usize) -> (String, ProviderSchema) {
    let mut rule = Block::default();
    rule.attributes
        .insert("name".into(), arg(true, Type::String));
    rule.block_types
        .insert("statement".into(), statement(levels));
    let mut block = Block::default();
    block
        .attributes
        .insert("name".into(), arg(true, Type::String));
    block.attributes.insert(
        "arn".into(),
        Attribute {
            ty: Some(Type::String),
            computed: true,
            ..Default::default()
        },
    );
    let mut rules = list_block(rule, 0, 0);
    rules.nesting = crate::schema::BlockNesting::Set;
    block.block_types.insert("rule".into(), rules);
    single("waf", "waf_web_acl", block)
}
