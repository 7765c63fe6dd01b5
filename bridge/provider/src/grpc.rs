//! The gRPC adapter shared by the protocol 5 and 6 modules: [`provider_adapter!`] expands the
//! [`Plugin`](super::Plugin) implementation over one generated protocol module, and the
//! message conversions of [`super::convert`] with it. Each adapter file supplies only what
//! differs (RPC names and nested-attribute conversion).

/// Expand the adapter for one protocol module.
///
/// `$proto` is the generated module; the `rpc` map names the client methods and message
/// modules that differ between protocols.
/// One `Validate*Config` call of a typed block (resource or data source), inside
/// [`provider_adapter!`]: encode `config` against `ty`, call, return the diagnostics.
macro_rules! validate_typed {
    ($self:ident, $rpc:ident, $msg:ident, $ty:expr, $type_name:expr, $config:expr) => {{
        let rpc = stringify!($rpc);
        let req = proto::$msg::Request {
            type_name: $type_name.to_string(),
            config: Some(encode(rpc, "config", $config, &$ty)?),
            ..Default::default()
        };
        let resp = call(&$self.plugin, rpc, $type_name, $self.client().$rpc(req)).await?;
        Ok(diagnostics(resp.diagnostics))
    }};
}

macro_rules! provider_adapter {
    (
        proto = $proto:ident,
        adapter = $adapter:ident,
        version = $version:expr,
        nested_type = $nested_type:path,
        get_schema = ($get_schema:ident, $get_schema_path:literal),
        validate_provider = ($validate_provider:ident, $validate_provider_msg:ident),
        validate_resource = ($validate_resource:ident, $validate_resource_msg:ident),
        validate_data = ($validate_data:ident, $validate_data_msg:ident),
        configure = ($configure:ident, $configure_msg:ident),
        stop = ($stop:ident, $stop_msg:ident) $(,)?
    ) => {
        use std::sync::Arc;

        use async_trait::async_trait;
        use proto::provider_client::ProviderClient;
        use tokio::sync::OnceCell;
        use tonic::transport::Channel;

        use crate::client::PluginClient;
        use crate::channel::MAX_MESSAGE_BYTES;
        use crate::rpc::call;
        use crate::schema::ProviderSchema;
        use crate::{
            ApplyRequest, ApplyResponse, DiagnosticsExt as _, ImportResponse, ImportedResource,
            ListRequest, ListResponse, Listed, PlanRequest, PlanResponse, Plugin,
            ReadDataResponse, ReadRequest, ReadResponse, UpgradeRequest, UpgradeResponse,
        };

        crate::convert::proto_conversions! {
            proto = $proto,
            get_schema = $get_schema,
            nested_type = $nested_type,
        }

        #[doc = concat!("The protocol ", stringify!($version), " adapter.")]
        pub struct $adapter {
            plugin: PluginClient,
            client: ProviderClient<Channel>,
            schema: OnceCell<crate::schema_store::SchemaStore>,
            identities: OnceCell<Arc<crate::IdentitySchemas>>,
        }

        impl $adapter {
            pub fn new(plugin: PluginClient) -> Self {
                let client = ProviderClient::new(plugin.channel.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES);
                Self {
                    plugin,
                    client,
                    schema: OnceCell::new(),
                    identities: OnceCell::new(),
                }
            }

            /// The process behind this adapter.
            pub fn plugin(&self) -> &PluginClient {
                &self.plugin
            }

            fn client(&self) -> ProviderClient<Channel> {
                self.client.clone()
            }

            /// The schema, fetched once: whole when this process generates CRDs or prints
            /// it (`docs`), else with types decoded when first asked about.
            async fn loaded(&self) -> Result<&crate::schema_store::SchemaStore> {
                self.schema.get_or_try_init(|| self.fetch_schema()).await
            }

            async fn resource_type(&self, type_name: &str) -> Result<Arc<Type>> {
                self.loaded().await?.ty(crate::TypeOf::Resource, type_name)
            }

            async fn data_type(&self, type_name: &str) -> Result<Arc<Type>> {
                self.loaded().await?.ty(crate::TypeOf::DataSource, type_name)
            }

            async fn list_type(&self, type_name: &str) -> Result<Arc<Type>> {
                self.loaded().await?.ty(crate::TypeOf::ListResource, type_name)
            }

            async fn provider_type(&self) -> Result<Arc<Type>> {
                Ok(self.loaded().await?.provider_type())
            }

            async fn fetch_schema(&self) -> Result<crate::schema_store::SchemaStore> {
                use crate::schema_store::{self as store, SchemaStore};
                use crate::TypeOf;
                use prost::Message as _;
                let parts = self.schema_parts().await?;
                let decoded = parts
                    .diagnostics
                    .iter()
                    .map(|d| proto::Diagnostic::decode(d.clone()))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(store::malformed)?;
                let diagnostics = diagnostics(decoded);
                if diagnostics.has_errors() {
                    return Err(ProviderError::Schema(diagnostics.error_summary()));
                }
                for warning in &diagnostics {
                    tracing::warn!(provider = %self.plugin.name, "schema: {warning}");
                }
                let Some(provider) = parts.provider.as_deref() else {
                    return Err(ProviderError::Schema("the answer has no provider schema".into()));
                };
                let caps = proto::ServerCapabilities::decode(
                    parts.capabilities.as_deref().unwrap_or_default(),
                )
                .map_err(store::malformed)?;
                let base = ProviderSchema {
                    provider: decode_schema(provider)?,
                    provider_meta: parts.provider_meta.as_deref().map(decode_schema).transpose()?,
                    functions: store::entries(parts.functions)?
                        .into_iter()
                        .map(|(k, f)| {
                            let f = proto::Function::decode(f).map_err(store::malformed)?;
                            Ok((k, function(f)?))
                        })
                        .collect::<Result<_>>()?,
                    capabilities: domain::ServerCapabilities {
                        plan_destroy: caps.plan_destroy,
                        get_provider_schema_optional: caps.get_provider_schema_optional,
                        move_resource_state: caps.move_resource_state,
                    },
                    ..Default::default()
                };
                let maps = [
                    (TypeOf::Resource, parts.resources),
                    (TypeOf::DataSource, parts.data_sources),
                    (TypeOf::EphemeralResource, parts.ephemeral_resources),
                    (TypeOf::ListResource, parts.list_resources),
                ];
                let mut types = Vec::new();
                for (of, raw) in maps {
                    for (name, bytes) in store::entries(raw)? {
                        types.push((of, name, bytes));
                    }
                }
                SchemaStore::new(base, types, decode_schema, self.plugin.docs)
            }
        }

        impl $adapter {
            /// The schema answer: from the cache when the provider lets the call be skipped
            /// (`get_provider_schema_optional`), else asked for (and then cached).
            async fn schema_parts(&self) -> Result<crate::schema_store::SchemaParts> {
                use crate::{schema_cache, schema_store};
                use prost::Message as _;
                let file = self.plugin.schema_cache.as_deref();
                if let Some(parts) = file.and_then(schema_cache::load) {
                    let caps = proto::ServerCapabilities::decode(
                        parts.capabilities.as_deref().unwrap_or_default(),
                    );
                    if caps.is_ok_and(|c| c.get_provider_schema_optional) {
                        tracing::debug!(provider = %self.plugin.name, "schema from the cache");
                        return Ok(parts);
                    }
                }
                let parts = call(
                    &self.plugin,
                    stringify!($get_schema),
                    "",
                    schema_store::fetch(self.plugin.channel.clone(), $get_schema_path),
                )
                .await?;
                if let Some(file) = file {
                    schema_cache::store(file, &parts);
                }
                Ok(parts)
            }
        }

        /// One type's identity schema in the domain type.
        fn identity_schema(
            rpc: &'static str,
            schema: proto::ResourceIdentitySchema,
        ) -> Result<crate::IdentitySchema> {
            let attributes = schema
                .identity_attributes
                .into_iter()
                .map(|a| {
                    Ok(crate::identity::IdentityAttribute {
                        ty: parse_type(rpc, &a.name, &a.r#type)?,
                        name: a.name,
                        required_for_import: a.required_for_import,
                    })
                })
                .collect::<Result<_>>()?;
            Ok(crate::IdentitySchema {
                version: schema.version,
                attributes,
            })
        }

        /// An import by identity refused before the call, as the provider would: one error.
        fn refused_identity(reason: String) -> ImportResponse {
            ImportResponse {
                imported: Vec::new(),
                diagnostics: vec![crate::Diagnostic {
                    severity: crate::Severity::Error,
                    summary: "invalid import identity".into(),
                    detail: reason,
                    attribute: None,
                }],
            }
        }

        /// One type's encoded `Schema` message in the domain type.
        fn decode_schema(bytes: &[u8]) -> Result<Schema> {
            use prost::Message as _;
            let s = proto::Schema::decode(bytes)
                .map_err(crate::schema_store::malformed)?;
            schema(s)
        }

        // Requests end in `..Default::default()` even where every field is set today, so that
        // fields a newer protocol minor adds keep their zero value without touching this code.
        #[allow(clippy::needless_update)]
        #[async_trait]
        impl Plugin for $adapter {
            fn protocol_version(&self) -> u32 {
                $version
            }

            async fn schema(&self) -> Result<Arc<ProviderSchema>> {
                self.loaded().await?.all()
            }

            async fn schema_for(
                &self,
                wanted: &[(crate::TypeOf, &str)],
            ) -> Result<Arc<ProviderSchema>> {
                self.loaded().await?.with(wanted)
            }

            async fn validate_provider_config(&self, config: &Value) -> Result<Vec<Diagnostic>> {
                let rpc = stringify!($validate_provider);
                let ty = self.provider_type().await?;
                let req = proto::$validate_provider_msg::Request {
                    config: Some(encode(rpc, "provider config", config, &ty)?),
                    ..Default::default()
                };
                let resp = call(
                    &self.plugin,
                    rpc,
                    "",
                    self.client().$validate_provider(req),
                )
                .await?;
                Ok(diagnostics(resp.diagnostics))
            }

            async fn validate_resource_config(
                &self,
                type_name: &str,
                config: &Value,
            ) -> Result<Vec<Diagnostic>> {
                let ty = self.resource_type(type_name).await?;
                super::grpc::validate_typed!(self, $validate_resource, $validate_resource_msg, ty, type_name, config)
            }

            async fn validate_data_source_config(
                &self,
                type_name: &str,
                config: &Value,
            ) -> Result<Vec<Diagnostic>> {
                let ty = self.data_type(type_name).await?;
                super::grpc::validate_typed!(self, $validate_data, $validate_data_msg, ty, type_name, config)
            }

            async fn configure(
                &self,
                terraform_version: &str,
                config: &Value,
            ) -> Result<Vec<Diagnostic>> {
                let rpc = stringify!($configure);
                let ty = self.provider_type().await?;
                let req = proto::$configure_msg::Request {
                    terraform_version: terraform_version.to_string(),
                    config: Some(encode(rpc, "provider config", config, &ty)?),
                    ..Default::default()
                };
                let resp = call(&self.plugin, rpc, "", self.client().$configure(req)).await?;
                Ok(diagnostics(resp.diagnostics))
            }

            async fn upgrade_resource_state(&self, req: UpgradeRequest) -> Result<UpgradeResponse> {
                let rpc = "upgrade_resource_state";
                let ty = self.resource_type(&req.type_name).await?;
                let msg = proto::upgrade_resource_state::Request {
                    type_name: req.type_name.clone(),
                    version: req.version,
                    raw_state: Some(proto::RawState {
                        json: req.raw_state_json,
                        ..Default::default()
                    }),
                };
                let resp = call(
                    &self.plugin,
                    rpc,
                    &req.type_name,
                    self.client().upgrade_resource_state(msg),
                )
                .await?;
                Ok(UpgradeResponse {
                    upgraded_state: decode(rpc, "upgraded state", resp.upgraded_state, &ty)?,
                    diagnostics: diagnostics(resp.diagnostics),
                })
            }

            async fn read_resource(&self, req: ReadRequest) -> Result<ReadResponse> {
                let rpc = "read_resource";
                let ty = self.resource_type(&req.type_name).await?;
                let msg = proto::read_resource::Request {
                    current_state: Some(encode(rpc, "current state", &req.current_state, &ty)?),
                    type_name: req.type_name.clone(),
                    private: req.private,
                    ..Default::default()
                };
                let resp = call(
                    &self.plugin,
                    rpc,
                    &req.type_name,
                    self.client().read_resource(msg),
                )
                .await?;
                Ok(ReadResponse {
                    new_state: decode(rpc, "new state", resp.new_state, &ty)?,
                    private: resp.private,
                    diagnostics: diagnostics(resp.diagnostics),
                })
            }

            async fn plan_resource_change(&self, req: PlanRequest) -> Result<PlanResponse> {
                let rpc = "plan_resource_change";
                let ty = self.resource_type(&req.type_name).await?;
                let msg = proto::plan_resource_change::Request {
                    prior_state: Some(encode(rpc, "prior state", &req.prior_state, &ty)?),
                    proposed_new_state: Some(encode(
                        rpc,
                        "proposed new state",
                        &req.proposed_new_state,
                        &ty,
                    )?),
                    config: Some(encode(rpc, "config", &req.config, &ty)?),
                    type_name: req.type_name.clone(),
                    prior_private: req.prior_private,
                    ..Default::default()
                };
                let resp = call(
                    &self.plugin,
                    rpc,
                    &req.type_name,
                    self.client().plan_resource_change(msg),
                )
                .await?;
                Ok(PlanResponse {
                    planned_state: decode(rpc, "planned state", resp.planned_state, &ty)?,
                    requires_replace: resp
                        .requires_replace
                        .into_iter()
                        .map(attribute_path)
                        .collect(),
                    planned_private: resp.planned_private,
                    diagnostics: diagnostics(resp.diagnostics),
                    legacy_type_system: resp.legacy_type_system,
                })
            }

            async fn apply_resource_change(&self, req: ApplyRequest) -> Result<ApplyResponse> {
                let rpc = "apply_resource_change";
                let ty = self.resource_type(&req.type_name).await?;
                let msg = proto::apply_resource_change::Request {
                    prior_state: Some(encode(rpc, "prior state", &req.prior_state, &ty)?),
                    planned_state: Some(encode(rpc, "planned state", &req.planned_state, &ty)?),
                    config: Some(encode(rpc, "config", &req.config, &ty)?),
                    type_name: req.type_name.clone(),
                    planned_private: req.planned_private,
                    ..Default::default()
                };
                let resp = call(
                    &self.plugin,
                    rpc,
                    &req.type_name,
                    self.client().apply_resource_change(msg),
                )
                .await?;
                Ok(ApplyResponse {
                    new_state: decode(rpc, "new state", resp.new_state, &ty)?,
                    private: resp.private,
                    diagnostics: diagnostics(resp.diagnostics),
                    legacy_type_system: resp.legacy_type_system,
                })
            }

            async fn import_resource_state(
                &self,
                type_name: &str,
                by: &crate::ImportBy,
            ) -> Result<ImportResponse> {
                use crate::ImportBy;
                let rpc = "import_resource_state";
                let mut msg = proto::import_resource_state::Request {
                    type_name: type_name.to_string(),
                    ..Default::default()
                };
                match by {
                    ImportBy::Id(id) => msg.id = id.clone(),
                    ImportBy::Identity(given) => {
                        let schemas = self.identity_schemas().await?;
                        let fitted = match schemas.get(type_name) {
                            None => Err(format!(
                                "the provider declares no resource identity for {type_name}; import it by id"
                            )),
                            Some(schema) => schema.value_of(given).map(|v| (v, schema.ty())),
                        };
                        let (value, ty) = match fitted {
                            Ok(fitted) => fitted,
                            Err(reason) => return Ok(refused_identity(reason)),
                        };
                        msg.identity = Some(proto::ResourceIdentityData {
                            identity_data: Some(encode(rpc, "identity", &value, &ty)?),
                        });
                    }
                }
                let resp = call(
                    &self.plugin,
                    rpc,
                    type_name,
                    self.client().import_resource_state(msg),
                )
                .await?;
                let mut imported = Vec::with_capacity(resp.imported_resources.len());
                for r in resp.imported_resources {
                    let ty = self.resource_type(&r.type_name).await?;
                    imported.push(ImportedResource {
                        state: decode(rpc, "imported state", r.state, &ty)?,
                        type_name: r.type_name,
                        private: r.private,
                    });
                }
                Ok(ImportResponse {
                    imported,
                    diagnostics: diagnostics(resp.diagnostics),
                })
            }

            async fn identity_schemas(&self) -> Result<Arc<crate::IdentitySchemas>> {
                let fetch = || async {
                    let rpc = "get_resource_identity_schemas";
                    let req = proto::get_resource_identity_schemas::Request::default();
                    let answer = call(
                        &self.plugin,
                        rpc,
                        "",
                        self.client().get_resource_identity_schemas(req),
                    )
                    .await;
                    let resp = match answer {
                        Ok(resp) => resp,
                        // A provider from before identities.
                        Err(crate::ProviderError::Rpc { status, .. })
                            if status.code() == tonic::Code::Unimplemented =>
                        {
                            return Ok(Arc::default());
                        }
                        Err(e) => return Err(e),
                    };
                    let diags = diagnostics(resp.diagnostics);
                    if diags.has_errors() {
                        return Err(ProviderError::Schema(diags.error_summary()));
                    }
                    let mut out = crate::IdentitySchemas::new();
                    for (name, schema) in resp.identity_schemas {
                        out.insert(name, identity_schema(rpc, schema)?);
                    }
                    Ok(Arc::new(out))
                };
                self.identities.get_or_try_init(fetch).await.cloned()
            }

            async fn read_data_source(
                &self,
                type_name: &str,
                config: &Value,
            ) -> Result<ReadDataResponse> {
                let rpc = "read_data_source";
                let ty = self.data_type(type_name).await?;
                let msg = proto::read_data_source::Request {
                    type_name: type_name.to_string(),
                    config: Some(encode(rpc, "config", config, &ty)?),
                    ..Default::default()
                };
                let resp = call(
                    &self.plugin,
                    rpc,
                    type_name,
                    self.client().read_data_source(msg),
                )
                .await?;
                Ok(ReadDataResponse {
                    state: decode(rpc, "state", resp.state, &ty)?,
                    diagnostics: diagnostics(resp.diagnostics),
                })
            }

            async fn list_resource(&self, req: ListRequest) -> Result<ListResponse> {
                let rpc = "list_resource";
                let ty = self.list_type(&req.type_name).await?;
                let msg = proto::list_resource::Request {
                    type_name: req.type_name.clone(),
                    config: Some(encode(rpc, "config", &req.config, &ty)?),
                    include_resource_object: req.include_resource_object,
                    limit: req.limit,
                    ..Default::default()
                };
                // The answer is a stream: the whole of it is one call, under one deadline.
                let limit = usize::try_from(req.limit).unwrap_or(usize::MAX);
                let mut client = self.client();
                let collect = async move {
                    let mut stream = client.list_resource(msg).await?.into_inner();
                    let mut events = Vec::new();
                    while let Some(event) = stream.message().await? {
                        events.push(event);
                        if events.len() >= limit {
                            break;
                        }
                    }
                    Ok(tonic::Response::new(events))
                };
                let events = call(&self.plugin, rpc, &req.type_name, collect).await?;
                let mut items = Vec::with_capacity(events.len());
                let mut diags = Vec::new();
                for event in events {
                    diags.extend(diagnostics(event.diagnostic));
                    let resource_object = match event.resource_object {
                        Some(v) if req.include_resource_object => {
                            let ty = self.resource_type(&req.type_name).await?;
                            Some(decode(rpc, "resource object", Some(v), &ty)?)
                        }
                        _ => None,
                    };
                    if resource_object.is_some() || !event.display_name.is_empty() {
                        items.push(Listed {
                            display_name: event.display_name,
                            resource_object,
                        });
                    }
                }
                Ok(ListResponse {
                    items,
                    diagnostics: diags,
                })
            }

            async fn stop(&self) -> Result<String> {
                let rpc = stringify!($stop);
                let resp = call(
                    &self.plugin,
                    rpc,
                    "",
                    self.client().$stop(proto::$stop_msg::Request::default()),
                )
                .await?;
                Ok(resp.error)
            }
        }
    };
}

pub(crate) use provider_adapter;
pub(crate) use validate_typed;
