//! What an adapter keeps of its provider's schema.
//!
//! `GetProviderSchema` answers with every type at once: hashicorp/aws sends 2,300 of them, and
//! decoded into [`ProviderSchema`] they take about 120 MiB, while a process serving a few
//! kinds needs a few types. So the answer is read as [`SchemaParts`]: the same message with
//! every part left encoded. A process that serves resources keeps each type's bytes (about 11
//! MiB for hashicorp/aws) and decodes a type the first time it is asked about it; one that
//! generates CRDs or prints the schema decodes everything, descriptions included.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::schema::{ProviderSchema, Schema};
use super::{ProviderError, Result, TypeOf};
use kraken_value::Type;

/// `GetProviderSchema.Response` (tfplugin5 `GetSchema`, tfplugin6 `GetProviderSchema`: the
/// field numbers are the same in both) with every field read as its encoded bytes. A map
/// field is a repeated entry message on the wire, so each map entry arrives as one element.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SchemaParts {
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub provider: Option<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    pub resources: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "3")]
    pub data_sources: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "4")]
    pub diagnostics: Vec<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "5")]
    pub provider_meta: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "6")]
    pub capabilities: Option<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "7")]
    pub functions: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "8")]
    pub ephemeral_resources: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "9")]
    pub list_resources: Vec<Bytes>,
}

/// One map entry: `key = 1`, `value = 2`, the value still encoded.
#[derive(Clone, PartialEq, prost::Message)]
struct Entry {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(bytes = "bytes", tag = "2")]
    value: Bytes,
}

/// The map entries of one map field as `(key, encoded value)`. The values are slices of the
/// answer's buffer, not copies.
pub fn entries(raw: Vec<Bytes>) -> Result<Vec<(String, Bytes)>> {
    raw.into_iter()
        .map(|bytes| {
            let entry: Entry = prost::Message::decode(bytes).map_err(malformed)?;
            Ok((entry.key, entry.value))
        })
        .collect()
}

pub fn malformed(e: prost::DecodeError) -> ProviderError {
    ProviderError::Protocol {
        rpc: "get_provider_schema",
        reason: format!("malformed schema answer: {e}"),
    }
}

/// Call `GetProviderSchema` at `path` and read the answer as [`SchemaParts`].
pub async fn fetch(
    channel: tonic::transport::Channel,
    path: &'static str,
) -> std::result::Result<tonic::Response<SchemaParts>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(super::channel::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(super::channel::MAX_MESSAGE_BYTES);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(format!("the provider is not ready: {e}")))?;
    // The request message is empty in both protocols.
    let codec = tonic_prost::ProstCodec::<(), SchemaParts>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    grpc.unary(tonic::Request::new(()), path, codec).await
}

/// Decodes one type's encoded `Schema` message into the domain type (per protocol).
pub type DecodeSchema = fn(&[u8]) -> Result<Schema>;

/// The types not decoded yet, by map and name.
struct Encoded {
    types: HashMap<(TypeOf, String), Bytes>,
    decode: DecodeSchema,
}

/// An adapter's schema: whole, or the provider block and the types asked about so far with
/// the rest encoded.
pub struct SchemaStore {
    /// Whole when `encoded` is `None`; otherwise the provider block, functions, capabilities
    /// and the types decoded so far. Replaced (never changed in place) when a type is added,
    /// so an `Arc` handed out stays valid.
    current: Mutex<Arc<ProviderSchema>>,
    encoded: Option<Encoded>,
    types: ImpliedTypes,
}

impl SchemaStore {
    /// A store of `base` (provider block, functions, capabilities; no types) and `types`,
    /// decoded with `decode`. With `docs`, every type is decoded now and descriptions are
    /// kept (generating CRDs, printing the schema); otherwise descriptions are dropped and a
    /// type is decoded when first asked about.
    pub fn new(
        mut base: ProviderSchema,
        types: Vec<(TypeOf, String, Bytes)>,
        decode: DecodeSchema,
        docs: bool,
    ) -> Result<Self> {
        if docs {
            for (of, name, bytes) in types {
                map_mut(&mut base, of).insert(name, decode(&bytes)?);
            }
            let implied = ImpliedTypes::new(&base);
            return Ok(Self {
                current: Mutex::new(Arc::new(base)),
                encoded: None,
                types: implied,
            });
        }
        base.strip_docs();
        let implied = ImpliedTypes::new(&base);
        let types = types
            .into_iter()
            .map(|(of, name, bytes)| ((of, name), bytes))
            .collect();
        Ok(Self {
            current: Mutex::new(Arc::new(base)),
            encoded: Some(Encoded { types, decode }),
            types: implied,
        })
    }

    fn current(&self) -> Arc<ProviderSchema> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The schema with at least `wanted`'s types in it (those the provider has).
    pub fn with(&self, wanted: &[(TypeOf, &str)]) -> Result<Arc<ProviderSchema>> {
        let Some(encoded) = &self.encoded else {
            return Ok(self.current());
        };
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let mut next: Option<ProviderSchema> = None;
        for &(of, name) in wanted {
            let have = next.as_ref().unwrap_or(&current);
            if map(have, of).contains_key(name) {
                continue;
            }
            let Some(bytes) = encoded.types.get(&(of, name.to_owned())) else {
                continue;
            };
            let mut decoded = (encoded.decode)(bytes)?;
            decoded.strip_docs();
            let next = next.get_or_insert_with(|| ProviderSchema::clone(&current));
            map_mut(next, of).insert(name.to_owned(), decoded);
        }
        if let Some(next) = next {
            *current = Arc::new(next);
        }
        Ok(current.clone())
    }

    /// The whole schema: every type decoded (not kept, when the store is lazy).
    pub fn all(&self) -> Result<Arc<ProviderSchema>> {
        let Some(encoded) = &self.encoded else {
            return Ok(self.current());
        };
        let mut whole = ProviderSchema::clone(&self.current());
        for ((of, name), bytes) in &encoded.types {
            if !map(&whole, *of).contains_key(name) {
                let mut decoded = (encoded.decode)(bytes)?;
                decoded.strip_docs();
                map_mut(&mut whole, *of).insert(name.clone(), decoded);
            }
        }
        Ok(Arc::new(whole))
    }

    /// The cty type of `name` among `of`, derived on first use and kept.
    pub fn ty(&self, of: TypeOf, name: &str) -> Result<Arc<Type>> {
        let schema = self.with(&[(of, name)])?;
        self.types.get(&schema, of, name)
    }

    /// The cty type of the provider block.
    pub fn provider_type(&self) -> Arc<Type> {
        self.types.provider.clone()
    }
}

fn map(schema: &ProviderSchema, of: TypeOf) -> &std::collections::BTreeMap<String, Schema> {
    match of {
        TypeOf::Resource => &schema.resources,
        TypeOf::DataSource => &schema.data_sources,
        TypeOf::ListResource => &schema.list_resources,
        TypeOf::EphemeralResource => &schema.ephemeral_resources,
    }
}

fn map_mut(
    schema: &mut ProviderSchema,
    of: TypeOf,
) -> &mut std::collections::BTreeMap<String, Schema> {
    match of {
        TypeOf::Resource => &mut schema.resources,
        TypeOf::DataSource => &mut schema.data_sources,
        TypeOf::ListResource => &mut schema.list_resources,
        TypeOf::EphemeralResource => &mut schema.ephemeral_resources,
    }
}

/// The cty types of the provider block and of the types a process is asked about, derived
/// from the schema on first use and kept: encoding a value needs its type on every RPC, and
/// deriving it walks the schema. Only the types used are derived (a process serving three of
/// hashicorp/aws's 2,300 types holds three).
pub struct ImpliedTypes {
    pub provider: Arc<kraken_value::Type>,
    derived: Mutex<std::collections::HashMap<(TypeOf, String), Arc<kraken_value::Type>>>,
}

impl ImpliedTypes {
    pub fn new(schema: &ProviderSchema) -> Self {
        Self {
            provider: Arc::new(schema.provider.block.implied_type()),
            derived: std::sync::Mutex::default(),
        }
    }

    /// The type of `name` among `of`, derived on first use.
    pub fn get(
        &self,
        schema: &ProviderSchema,
        of: TypeOf,
        name: &str,
    ) -> Result<Arc<kraken_value::Type>> {
        let key = (of, name.to_owned());
        let mut derived = self.derived.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ty) = derived.get(&key) {
            return Ok(ty.clone());
        }
        let map = match of {
            TypeOf::Resource => &schema.resources,
            TypeOf::DataSource => &schema.data_sources,
            TypeOf::ListResource => &schema.list_resources,
            TypeOf::EphemeralResource => &schema.ephemeral_resources,
        };
        let ty = map
            .get(name)
            .map(|s| Arc::new(s.block.implied_type()))
            .ok_or_else(|| ProviderError::UnknownType {
                kind: of.what(),
                type_name: name.to_string(),
            })?;
        derived.insert(key, ty.clone());
        Ok(ty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Attribute, Block};

    fn thing(description: &str) -> Schema {
        let mut block = Block {
            description: description.into(),
            ..Default::default()
        };
        block
            .attributes
            .insert("id".into(), Attribute::optional_of(Type::String));
        Schema { version: 2, block }
    }

    /// Stands in for a protocol's decoder: the bytes are the description.
    fn decode(bytes: &[u8]) -> Result<Schema> {
        Ok(thing(&String::from_utf8_lossy(bytes)))
    }

    #[test]
    fn a_lazy_store_decodes_a_type_when_asked_and_keeps_it() {
        let types = || {
            vec![
                (
                    TypeOf::Resource,
                    "a".to_owned(),
                    Bytes::from_static(b"doc a"),
                ),
                (
                    TypeOf::Resource,
                    "b".to_owned(),
                    Bytes::from_static(b"doc b"),
                ),
                (
                    TypeOf::DataSource,
                    "a".to_owned(),
                    Bytes::from_static(b"doc"),
                ),
            ]
        };
        let store =
            SchemaStore::new(ProviderSchema::default(), types(), decode, false).expect("store");
        let none = store.with(&[]).expect("base");
        assert!(
            none.resources.is_empty(),
            "nothing decoded before it is asked for"
        );
        let with_a = store.with(&[(TypeOf::Resource, "a")]).expect("a");
        assert_eq!(with_a.resources.len(), 1);
        assert_eq!(with_a.resources["a"].version, 2);
        assert_eq!(
            with_a.resources["a"].block.description, "",
            "a serving store keeps no descriptions"
        );
        assert!(with_a.data_sources.is_empty(), "maps stay apart");
        let again = store.with(&[(TypeOf::Resource, "a")]).expect("a again");
        assert!(Arc::ptr_eq(&with_a, &again), "decoded once");
        let missing = store.with(&[(TypeOf::Resource, "nope")]).expect("missing");
        assert!(missing.resource("nope").is_none());
        assert!(store.ty(TypeOf::Resource, "nope").is_err());
        assert!(store.ty(TypeOf::DataSource, "a").is_ok());
        let all = store.all().expect("all");
        assert_eq!((all.resources.len(), all.data_sources.len()), (2, 1));
        assert_eq!(
            store.with(&[]).expect("base").resources.len(),
            1,
            "`all` does not keep what it decoded"
        );

        let whole =
            SchemaStore::new(ProviderSchema::default(), types(), decode, true).expect("whole");
        let all = whole.with(&[]).expect("whole");
        assert_eq!((all.resources.len(), all.data_sources.len()), (2, 1));
        assert_eq!(all.resources["b"].block.description, "doc b", "docs kept");
    }

    #[test]
    fn map_entries_read_back_from_the_wire_form() {
        let entry = Entry {
            key: "aws_vpc".into(),
            value: Bytes::from_static(&[1, 2, 3]),
        };
        let wire = Bytes::from(prost::Message::encode_to_vec(&entry));
        let read = entries(vec![wire]).expect("entry");
        assert_eq!(
            read,
            vec![("aws_vpc".to_owned(), Bytes::from_static(&[1, 2, 3]))]
        );
        assert!(
            entries(vec![Bytes::from_static(&[0xff])]).is_err(),
            "garbage is an error"
        );
    }
}
