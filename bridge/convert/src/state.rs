//! `--state`: a `terraform.tfstate` joined to the converted instances by full address, so each
//! manifest adopts the object Terraform manages (`spec.importId`) instead of creating another.
//!
//! Only state format version 4 (Terraform 0.12 and later) is read. An instance is joined by
//! its address (module path, type, name and `count`/`for_each` key, exactly as Terraform
//! writes it); what is on one side only is reported. A manifest adopts its object by
//! resource identity where the provider declares one for the type (`spec.importIdentity`):
//! the identity Terraform 1.12 and later store beside the instance, else the attributes of
//! the instance the identity schema names. Otherwise by the state's `id` (`spec.importId`).
//! No per-type table: the provider's own identity schema decides.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use super::emit::{ADDRESS_ANNOTATION, Manifest};
use super::load::Location;
use super::vars::Problem;
use kraken_provider::IdentitySchema;

/// The state format version this reads.
pub const STATE_VERSION: u64 = 4;

/// One resource instance of a state.
#[derive(Debug, Clone, PartialEq)]
pub struct StateInstance {
    /// The instance's attributes as Terraform stored them.
    pub attributes: Json,
    pub schema_version: u64,
    /// The provider's private data, base64 as Terraform stores it (`None`: none).
    pub private: Option<String>,
    /// The resource identity Terraform stored (1.12 and later), when it did.
    pub identity: Option<serde_json::Map<String, Json>>,
}

impl StateInstance {
    /// The `id` attribute: the import id of the object.
    pub fn id(&self) -> Option<&str> {
        self.attributes
            .get("id")
            .and_then(Json::as_str)
            .filter(|s| !s.is_empty())
    }
}

/// A state file's managed resource instances by address.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    pub terraform_version: String,
    pub instances: BTreeMap<String, StateInstance>,
}

/// Reads a state file's text; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<State, String> {
    let doc: Json = serde_json::from_str(text)
        .map_err(|e| format!("{file} is not a Terraform state (not JSON: {e})"))?;
    let version = doc.get("version").and_then(Json::as_u64);
    match version {
        Some(STATE_VERSION) => {}
        Some(v) if v > STATE_VERSION => {
            return Err(format!(
                "{file} is in state format version {v}, newer than the version {STATE_VERSION} \
                 kraken convert reads; convert with the state of a Terraform release that writes \
                 version {STATE_VERSION}"
            ));
        }
        Some(v) => {
            return Err(format!(
                "{file} is in state format version {v}; kraken convert reads version \
                 {STATE_VERSION} (Terraform 0.12 and later): run `terraform apply` with a newer \
                 Terraform once to upgrade it"
            ));
        }
        None => return Err(format!("{file} is not a Terraform state (no \"version\")")),
    }
    let mut state = State {
        terraform_version: doc
            .get("terraform_version")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_owned(),
        instances: BTreeMap::new(),
    };
    let resources = doc.get("resources").and_then(Json::as_array);
    for (i, r) in resources.into_iter().flatten().enumerate() {
        if r.get("mode").and_then(Json::as_str) != Some("managed") {
            continue;
        }
        let (Some(ty), Some(name)) = (
            r.get("type").and_then(Json::as_str),
            r.get("name").and_then(Json::as_str),
        ) else {
            return Err(format!("{file}: resources[{i}] has no type or name"));
        };
        let module = r.get("module").and_then(Json::as_str);
        let instances = r.get("instances").and_then(Json::as_array);
        for inst in instances.into_iter().flatten() {
            let key = inst.get("index_key");
            let mut address = super::value::address(false, ty, name, key);
            if let Some(m) = module {
                address = format!("{m}.{address}");
            }
            state.instances.insert(
                address,
                StateInstance {
                    attributes: inst.get("attributes").cloned().unwrap_or(Json::Null),
                    schema_version: inst
                        .get("schema_version")
                        .and_then(Json::as_u64)
                        .unwrap_or(0),
                    private: inst
                        .get("private")
                        .and_then(Json::as_str)
                        .filter(|p| !p.is_empty())
                        .map(str::to_owned),
                    identity: inst
                        .get("identity")
                        .and_then(Json::as_object)
                        .filter(|i| i.values().any(|v| !v.is_null()))
                        .cloned(),
                },
            );
        }
    }
    Ok(state)
}

/// The file `--seed-state` writes the state Secrets to.
pub const SEED_FILE: &str = "terraform-state.yaml";

/// One state Secret per manifest that imports (after [`seed`]): the instance's state as
/// Terraform stored it (attributes, private data, schema version), named and typed as the
/// operator keeps an object's state and labelled as seeded, so the operator refreshes it
/// instead of importing the object — no dependence on the provider's import, and the
/// provider's private data kept. It holds the state's sensitive values, as
/// `terraform.tfstate` does.
pub fn state_secrets(manifests: &[Manifest], state: &State) -> Vec<Manifest> {
    use base64::Engine as _;
    use kraken_core_kinds::state_secret as ss;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = Vec::new();
    for m in manifests {
        let address = m.doc["metadata"]["annotations"][ADDRESS_ANNOTATION].as_str();
        let Some(inst) = address.and_then(|a| state.instances.get(a)) else {
            continue;
        };
        if m.doc["spec"]["importId"].is_null() && m.doc["spec"]["importIdentity"].is_null() {
            continue;
        }
        let group = m.doc["apiVersion"]
            .as_str()
            .and_then(|v| v.split('/').next())
            .unwrap_or_default();
        let kind = m.doc["kind"].as_str().unwrap_or_default();
        let name = m.doc["metadata"]["name"].as_str().unwrap_or_default();
        let Ok(state_json) = serde_json::to_vec(&inst.attributes) else {
            continue;
        };
        let doc = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": ss::name(group, kind, name),
                "namespace": m.doc["metadata"]["namespace"],
                "labels": {ss::SEEDED_LABEL: "terraform"},
                "annotations": {ADDRESS_ANNOTATION: address},
            },
            "type": kraken_core_kinds::STATE_SECRET_TYPE,
            "data": {
                ss::KEY_STATE: b64(&state_json),
                ss::KEY_PRIVATE: inst.private.clone().unwrap_or_default(),
                ss::KEY_SCHEMA_VERSION: b64(inst.schema_version.to_string().as_bytes()),
                ss::KEY_CREATE_ATTEMPT: "",
            },
        });
        out.push(Manifest {
            file: SEED_FILE.to_owned(),
            doc,
        });
    }
    out
}

/// What joining a state to the manifests did.
#[derive(Debug, Clone, Default)]
pub struct Adoption {
    /// Manifests that import their object.
    pub imported: usize,
    /// What is on one side only (not blocking), an instance without an id and a state of
    /// another configuration (blocking).
    pub problems: Vec<Problem>,
}

/// The resource identity schemas of the converted kinds, by API group and kind.
pub type Identities = BTreeMap<(String, String), IdentitySchema>;

/// The identity schema of the kind of `m`, if its provider declares one.
fn identity_of<'i>(identities: &'i Identities, m: &Manifest) -> Option<&'i IdentitySchema> {
    let group = m.doc["apiVersion"].as_str()?.split('/').next()?;
    let kind = m.doc["kind"].as_str()?;
    identities.get(&(group.to_owned(), kind.to_owned()))
}

/// How a manifest adopts `inst`: `spec.importIdentity` from the identity Terraform stored, or
/// from the attributes `schema` names; else `spec.importId` from the `id` attribute.
fn import_of(
    inst: &StateInstance,
    schema: Option<&IdentitySchema>,
) -> Option<(&'static str, Json)> {
    let identity = schema.and_then(|s| {
        inst.identity
            .clone()
            .or_else(|| s.from_state(&inst.attributes))
    });
    match (identity, inst.id()) {
        (Some(identity), _) => Some(("importIdentity", Json::Object(identity))),
        (None, Some(id)) => Some(("importId", Json::String(id.to_owned()))),
        (None, None) => None,
    }
}

/// Joins `state` to the manifests by their address annotation: each managed resource found in
/// the state gets `spec.importIdentity` or `spec.importId` ([`import_of`]). Reports what is on
/// one side only; a state none of whose instances is in the configuration is refused (it
/// belongs to another one).
pub fn seed(
    manifests: &mut [Manifest],
    state: &State,
    file: &str,
    identities: &Identities,
) -> Adoption {
    let at = Location {
        file: file.to_owned(),
        line: 1,
        column: 1,
    };
    let problem = |subject: &str, message: String, blocking: bool| Problem {
        at: at.clone(),
        subject: subject.to_owned(),
        message,
        blocking,
    };
    let mut problems = Vec::new();
    let (mut joined, mut imported) = (0usize, 0usize);
    let mut seen = std::collections::BTreeSet::new();
    for m in manifests.iter_mut() {
        let Some(address) = m.doc["metadata"]["annotations"][ADDRESS_ANNOTATION]
            .as_str()
            .map(str::to_owned)
        else {
            continue;
        };
        // Data sources are read, never adopted; the outputs' ConfigExports are Kraken's own.
        if address.starts_with("data.") || m.doc["kind"] == "ConfigExport" {
            continue;
        }
        let Some(inst) = state.instances.get(&address) else {
            problems.push(problem(
                &address,
                "not in the state: applying the manifests creates it".into(),
                false,
            ));
            continue;
        };
        seen.insert(address.clone());
        joined += 1;
        match import_of(inst, identity_of(identities, m)) {
            Some((key, value)) => {
                m.doc["spec"][key] = value;
                imported += 1;
            }
            None => problems.push(problem(
                &address,
                "its state has no id attribute (nor a resource identity) to import it by".into(),
                true,
            )),
        }
    }
    for address in state.instances.keys().filter(|a| !seen.contains(*a)) {
        problems.push(problem(
            address,
            "in the state but not in the configuration: not converted (terraform apply would destroy it)"
                .into(),
            false,
        ));
    }
    if joined == 0 && !state.instances.is_empty() {
        problems.push(problem(
            file,
            format!(
                "none of the state's {} resource instances is in the configuration: the state \
                 belongs to another configuration",
                state.instances.len()
            ),
            true,
        ));
    }
    Adoption { imported, problems }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state() -> String {
        json!({"version": 4, "terraform_version": "1.8.5", "serial": 3, "lineage": "x",
        "resources": [
            {"mode": "managed", "type": "fixture_object", "name": "web",
             "instances": [
                {"index_key": 0, "schema_version": 1, "attributes": {"id": "obj-0", "name": "a"},
                 "private": "eyJ4IjoxfQ=="},
                {"index_key": 1, "schema_version": 1, "attributes": {"id": "obj-1"}}]},
            {"mode": "managed", "type": "fixture_object", "name": "zone",
             "instances": [{"index_key": "b", "attributes": {"id": "obj-b"}}]},
            {"mode": "data", "type": "fixture_object", "name": "read",
             "instances": [{"attributes": {"id": "d"}}]},
            {"module": "module.net", "mode": "managed", "type": "fixture_uuid", "name": "u",
             "instances": [{"attributes": {"id": "u-1"}}]}
        ]})
        .to_string()
    }

    fn manifest(address: &str) -> Manifest {
        Manifest {
            file: "f".into(),
            doc: json!({"metadata": {"annotations": {ADDRESS_ANNOTATION: address}}, "spec": {}}),
        }
    }

    #[test]
    fn instances_are_read_by_full_address() {
        let s = parse(&state(), "terraform.tfstate").expect("state");
        let keys: Vec<&str> = s.instances.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "fixture_object.web[0]",
                "fixture_object.web[1]",
                "fixture_object.zone[\"b\"]",
                "module.net.fixture_uuid.u"
            ]
        );
        assert_eq!(s.instances["fixture_object.web[0]"].schema_version, 1);
        assert_eq!(s.instances["fixture_object.web[0]"].id(), Some("obj-0"));
    }

    #[test]
    fn manifests_found_in_the_state_import_their_object() {
        let s = parse(&state(), "terraform.tfstate").expect("state");
        let mut ms = vec![
            manifest("fixture_object.web[0]"),
            manifest("fixture_object.zone[\"b\"]"),
            manifest("fixture_object.extra"),
            manifest("data.fixture_object.read"),
            Manifest {
                file: "outputs.yaml".into(),
                doc: json!({"kind": "ConfigExport",
                            "metadata": {"annotations": {ADDRESS_ANNOTATION: "output"}}, "spec": {}}),
            },
        ];
        let adoption = seed(&mut ms, &s, "terraform.tfstate", &Identities::new());
        assert_eq!(adoption.imported, 2);
        let problems = adoption.problems;
        assert_eq!(ms[0].doc["spec"]["importId"], "obj-0");
        assert_eq!(ms[1].doc["spec"]["importId"], "obj-b");
        assert!(ms[2].doc["spec"].get("importId").is_none());
        assert!(
            ms[3].doc["spec"].get("importId").is_none(),
            "data sources read"
        );
        let said: Vec<(String, bool)> = problems
            .iter()
            .map(|p| (p.subject.clone(), p.blocking))
            .collect();
        assert_eq!(
            said,
            [
                ("fixture_object.extra".to_owned(), false),
                ("fixture_object.web[1]".to_owned(), false),
                ("module.net.fixture_uuid.u".to_owned(), false),
            ]
        );
    }

    #[test]
    fn seeded_state_secrets_carry_the_instance_state_for_the_operator() {
        use kraken_core_kinds::state_secret as ss;
        let s = parse(&state(), "terraform.tfstate").expect("state");
        let mut ms = vec![
            manifest("fixture_object.web[0]"),
            manifest("fixture_object.extra"),
        ];
        ms[0].doc["apiVersion"] = json!("fixture.tf.kraken.dev/v1alpha1");
        ms[0].doc["kind"] = json!("Object");
        ms[0].doc["metadata"]["name"] = json!("web-0");
        ms[0].doc["metadata"]["namespace"] = json!("team-a");
        seed(&mut ms, &s, "terraform.tfstate", &Identities::new());
        let secrets = state_secrets(&ms, &s);
        assert_eq!(secrets.len(), 1, "only what imports");
        let doc = &secrets[0].doc;
        assert_eq!(secrets[0].file, SEED_FILE);
        assert_eq!(doc["metadata"]["name"], "object-web-0.fixture-tfstate");
        assert_eq!(doc["metadata"]["namespace"], "team-a");
        assert_eq!(doc["type"], kraken_core_kinds::STATE_SECRET_TYPE);
        assert_eq!(doc["metadata"]["labels"][ss::SEEDED_LABEL], "terraform");
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(doc.clone()).expect("a Secret");
        assert!(ss::is_seeded(&secret));
        let data = secret.data.unwrap_or_default();
        let key = |k: &str| data.get(k).map(|b| b.0.clone()).unwrap_or_default();
        let attrs: Json = serde_json::from_slice(&key(ss::KEY_STATE)).expect("json");
        assert_eq!(attrs, json!({"id": "obj-0", "name": "a"}));
        assert_eq!(key(ss::KEY_SCHEMA_VERSION), b"1");
        assert_eq!(
            key(ss::KEY_PRIVATE),
            br#"{"x":1}"#,
            "the private data, decoded once"
        );
    }

    #[test]
    fn a_state_of_another_configuration_or_format_is_refused() {
        let s = parse(&state(), "terraform.tfstate").expect("state");
        let mut ms = vec![manifest("other_type.x")];
        let problems = seed(&mut ms, &s, "terraform.tfstate", &Identities::new()).problems;
        assert!(
            problems
                .iter()
                .any(|p| p.blocking && p.message.contains("another configuration")),
            "{problems:?}"
        );
        let newer = parse(r#"{"version": 5}"#, "s").expect_err("newer");
        assert!(newer.contains("newer"), "{newer}");
        let older = parse(r#"{"version": 3}"#, "s").expect_err("older");
        assert!(older.contains("version 3"), "{older}");
        assert!(parse("{", "s").expect_err("json").contains("not JSON"));
    }

    #[test]
    fn a_type_with_an_identity_is_adopted_by_it() {
        use kraken_provider::identity::IdentityAttribute;
        let attr = |name: &str, required| IdentityAttribute {
            name: name.into(),
            ty: kraken_value::Type::String,
            required_for_import: required,
        };
        let schema = IdentitySchema {
            version: 0,
            attributes: vec![attr("id", true), attr("region", false)],
        };
        let identities = Identities::from([(("g".into(), "Vpc".into()), schema)]);
        let text = json!({"version": 4, "resources": [
            {"mode": "managed", "type": "aws_vpc", "name": "a", "instances": [
                {"attributes": {"id": "vpc-a", "region": "eu-west-1", "cidr_block": "x"}}]},
            {"mode": "managed", "type": "aws_vpc", "name": "b", "instances": [
                {"attributes": {"id": "vpc-b"},
                 "identity": {"id": "vpc-b", "region": "us-east-1", "account_id": "1"}}]},
            {"mode": "managed", "type": "aws_vpc", "name": "c", "instances": [
                {"attributes": {"id": "vpc-c"}}]}
        ]})
        .to_string();
        let s = parse(&text, "s").expect("state");
        let mut ms: Vec<Manifest> = ["aws_vpc.a", "aws_vpc.b", "aws_vpc.c"]
            .into_iter()
            .map(manifest)
            .collect();
        for m in &mut ms[..2] {
            m.doc["apiVersion"] = json!("g/v1alpha1");
            m.doc["kind"] = json!("Vpc");
        }
        assert_eq!(seed(&mut ms, &s, "s", &identities).imported, 3);
        assert_eq!(
            ms[0].doc["spec"],
            json!({"importIdentity": {"id": "vpc-a", "region": "eu-west-1"}}),
            "from the attributes the identity names"
        );
        assert_eq!(
            ms[1].doc["spec"]["importIdentity"],
            json!({"id": "vpc-b", "region": "us-east-1", "account_id": "1"}),
            "the identity Terraform stored"
        );
        assert_eq!(
            ms[2].doc["spec"],
            json!({"importId": "vpc-c"}),
            "a kind without an identity: by id"
        );
        assert_eq!(state_secrets(&ms, &s).len(), 3);
    }
}
