//! The gRPC adapter shared by the protocol 5 and 6 modules: [`provider_adapter!`] expands the
//! [`Plugin`](super::Plugin) implementation over one generated protocol module, and the
//! message conversions of [`super::convert`] with it. Each adapter file supplies only what
//! differs (RPC names and nested-attribute conversion).

/// gRPC message limit for provider answers: large providers' schemas run to tens of MiB.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// The cty types of the provider block and of the types a process is asked about, derived
/// from the schema on first use and kept: encoding a value needs its type on every RPC, and
/// deriving it walks the schema. Only the types used are derived (a process serving three of
/// hashicorp/aws's 2,300 types holds three).
pub struct ImpliedTypes {
    pub provider: std::sync::Arc<crate::value::Type>,
    derived: std::sync::Mutex<
        std::collections::HashMap<(TypeOf, String), std::sync::Arc<crate::value::Type>>,
    >,
}

/// Which of a schema's maps a type name is looked up in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TypeOf {
    Resource,
    DataSource,
    ListResource,
}

impl TypeOf {
    fn what(self) -> &'static str {
        match self {
            TypeOf::Resource => "resource",
            TypeOf::DataSource => "data source",
            TypeOf::ListResource => "list resource",
        }
    }
}

impl ImpliedTypes {
    pub fn new(schema: &super::ProviderSchema) -> Self {
        Self {
            provider: std::sync::Arc::new(schema.provider.block.implied_type()),
            derived: std::sync::Mutex::default(),
        }
    }

    /// The type of `name` among `of`, derived on first use.
    pub fn get(
        &self,
        schema: &super::ProviderSchema,
        of: TypeOf,
        name: &str,
    ) -> super::Result<std::sync::Arc<crate::value::Type>> {
        let key = (of, name.to_owned());
        let mut derived = self.derived.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ty) = derived.get(&key) {
            return Ok(ty.clone());
        }
        let map = match of {
            TypeOf::Resource => &schema.resources,
            TypeOf::DataSource => &schema.data_sources,
            TypeOf::ListResource => &schema.list_resources,
        };
        let ty = map
            .get(name)
            .map(|s| std::sync::Arc::new(s.block.implied_type()))
            .ok_or_else(|| super::ProviderError::UnknownType {
                kind: of.what(),
                type_name: name.to_string(),
            })?;
        derived.insert(key, ty.clone());
        Ok(ty)
    }
}

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
        get_schema = ($get_schema:ident, $get_schema_msg:ident),
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

        use crate::provider::client::PluginClient;
        use crate::provider::grpc::MAX_MESSAGE_BYTES;
        use crate::provider::rpc::call;
        use crate::provider::schema::ProviderSchema;
        use crate::provider::{
            ApplyRequest, ApplyResponse, DiagnosticsExt as _, ImportResponse, ImportedResource,
            ListRequest, ListResponse, Listed, PlanRequest, PlanResponse, Plugin,
            ReadDataResponse, ReadRequest, ReadResponse, UpgradeRequest, UpgradeResponse,
        };

        crate::provider::convert::proto_conversions! {
            proto = $proto,
            get_schema = $get_schema,
            nested_type = $nested_type,
        }

        #[doc = concat!("The protocol ", stringify!($version), " adapter.")]
        pub struct $adapter {
            plugin: PluginClient,
            client: ProviderClient<Channel>,
            schema: OnceCell<(
                Arc<ProviderSchema>,
                Arc<crate::provider::grpc::ImpliedTypes>,
            )>,
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
                }
            }

            /// The process behind this adapter.
            pub fn plugin(&self) -> &PluginClient {
                &self.plugin
            }

            fn client(&self) -> ProviderClient<Channel> {
                self.client.clone()
            }

            /// The schema and the value types derived from it, fetched and computed once.
            async fn loaded(
                &self,
            ) -> Result<&(
                Arc<ProviderSchema>,
                Arc<crate::provider::grpc::ImpliedTypes>,
            )> {
                self.schema
                    .get_or_try_init(|| async {
                        let mut schema = self.fetch_schema().await?;
                        if !self.plugin.docs {
                            schema.strip_docs();
                        }
                        let types = Arc::new(crate::provider::grpc::ImpliedTypes::new(&schema));
                        Ok((Arc::new(schema), types))
                    })
                    .await
            }

            async fn resource_type(&self, type_name: &str) -> Result<Arc<Type>> {
                let (schema, types) = self.loaded().await?;
                types.get(schema, crate::provider::grpc::TypeOf::Resource, type_name)
            }

            async fn data_type(&self, type_name: &str) -> Result<Arc<Type>> {
                let (schema, types) = self.loaded().await?;
                types.get(schema, crate::provider::grpc::TypeOf::DataSource, type_name)
            }

            async fn list_type(&self, type_name: &str) -> Result<Arc<Type>> {
                let (schema, types) = self.loaded().await?;
                types.get(schema, crate::provider::grpc::TypeOf::ListResource, type_name)
            }

            async fn provider_type(&self) -> Result<Arc<Type>> {
                Ok(self.loaded().await?.1.provider.clone())
            }

            async fn fetch_schema(&self) -> Result<ProviderSchema> {
                let resp = call(
                    &self.plugin,
                    stringify!($get_schema),
                    "",
                    self.client()
                        .$get_schema(proto::$get_schema_msg::Request::default()),
                )
                .await?;
                let diagnostics = diagnostics(resp.diagnostics);
                if diagnostics.has_errors() {
                    return Err(ProviderError::Schema(diagnostics.error_summary()));
                }
                for warning in &diagnostics {
                    tracing::warn!(provider = %self.plugin.name, "schema: {warning}");
                }
                let Some(provider) = resp.provider else {
                    return Err(ProviderError::Schema("the answer has no provider schema".into()));
                };
                let conv = |m: std::collections::HashMap<String, proto::Schema>| {
                    m.into_iter()
                        .map(|(k, v)| Ok((k, schema(v)?)))
                        .collect::<Result<BTreeMap<_, _>>>()
                };
                let caps = resp.server_capabilities.unwrap_or_default();
                Ok(ProviderSchema {
                    provider: schema(provider)?,
                    provider_meta: resp.provider_meta.map(schema).transpose()?,
                    resources: conv(resp.resource_schemas)?,
                    data_sources: conv(resp.data_source_schemas)?,
                    ephemeral_resources: conv(resp.ephemeral_resource_schemas)?,
                    list_resources: conv(resp.list_resource_schemas)?,
                    functions: resp
                        .functions
                        .into_iter()
                        .map(|(k, f)| Ok((k, function(f)?)))
                        .collect::<Result<_>>()?,
                    capabilities: domain::ServerCapabilities {
                        plan_destroy: caps.plan_destroy,
                        get_provider_schema_optional: caps.get_provider_schema_optional,
                        move_resource_state: caps.move_resource_state,
                    },
                })
            }
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
                Ok(self.loaded().await?.0.clone())
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
                id: &str,
            ) -> Result<ImportResponse> {
                let rpc = "import_resource_state";
                let msg = proto::import_resource_state::Request {
                    type_name: type_name.to_string(),
                    id: id.to_string(),
                    ..Default::default()
                };
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
