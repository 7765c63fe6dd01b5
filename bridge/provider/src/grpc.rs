//! The gRPC adapter: [`Adapter`] implements the protocol-neutral [`Plugin`] over one
//! [`Protocol`], once for both. Each call looks up the schema type it needs, encodes the
//! values ([`wire::encode`]), builds the protocol's request from the neutral message, runs the
//! call through [`call`] (deadline, crash race, span, timing), and decodes the answer.
//! Diagnostics come back as data, never as `Err`.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::OnceCell;

use super::client::PluginClient;
use super::identity::IdentityAttribute;
use super::protocol::Protocol;
use super::rpc::call;
use super::schema::ProviderSchema;
use super::schema_store::{self as store, SchemaParts, SchemaStore};
use super::wire::{self, decode, encode};
use super::{
    ApplyRequest, ApplyResponse, Diagnostic, DiagnosticsExt as _, IdentitySchema, IdentitySchemas,
    ImportBy, ImportResponse, ImportedResource, ListRequest, ListResponse, Listed, PlanRequest,
    PlanResponse, Plugin, ProviderError, ReadDataResponse, ReadRequest, ReadResponse, Result,
    Severity, TypeOf, UpgradeRequest, UpgradeResponse,
};
use kraken_value::{Type, Value};

/// A launched provider speaking protocol `P`.
pub struct Adapter<P: Protocol> {
    plugin: PluginClient,
    client: P::Client,
    schema: OnceCell<SchemaStore>,
    identities: OnceCell<Arc<IdentitySchemas>>,
}

impl<P: Protocol> Adapter<P> {
    pub fn new(plugin: PluginClient) -> Self {
        let client = P::client(plugin.channel.clone());
        Self {
            plugin,
            client,
            schema: OnceCell::new(),
            identities: OnceCell::new(),
        }
    }

    fn client(&self) -> P::Client {
        self.client.clone()
    }

    /// The schema, fetched once: whole when this process generates CRDs or prints it
    /// (`docs`), else with types decoded when first asked about.
    async fn loaded(&self) -> Result<&SchemaStore> {
        self.schema.get_or_try_init(|| self.fetch_schema()).await
    }

    async fn ty(&self, of: TypeOf, type_name: &str) -> Result<Arc<Type>> {
        self.loaded().await?.ty(of, type_name)
    }

    async fn provider_type(&self) -> Result<Arc<Type>> {
        Ok(self.loaded().await?.provider_type())
    }

    async fn fetch_schema(&self) -> Result<SchemaStore> {
        let parts = self.schema_parts().await?;
        let diagnostics = parts
            .diagnostics
            .iter()
            .map(|d| P::diagnostic(d.clone()))
            .collect::<Result<Vec<_>>>()?;
        if diagnostics.has_errors() {
            return Err(ProviderError::Schema(diagnostics.error_summary()));
        }
        for warning in &diagnostics {
            tracing::warn!(provider = %self.plugin.name, "schema: {warning}");
        }
        let Some(provider) = parts.provider.as_deref() else {
            return Err(ProviderError::Schema(
                "the answer has no provider schema".into(),
            ));
        };
        let base = ProviderSchema {
            provider: P::schema(provider)?,
            provider_meta: parts.provider_meta.as_deref().map(P::schema).transpose()?,
            functions: store::entries(parts.functions)?
                .into_iter()
                .map(|(name, f)| Ok((name, P::function(f)?)))
                .collect::<Result<_>>()?,
            capabilities: P::capabilities(parts.capabilities.as_deref().unwrap_or_default())?,
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
        SchemaStore::new(base, types, P::schema, self.plugin.docs)
    }

    /// The schema answer: from the cache when the provider lets the call be skipped
    /// (`get_provider_schema_optional`), else asked for (and then cached).
    async fn schema_parts(&self) -> Result<SchemaParts> {
        use super::schema_cache;
        let file = self.plugin.schema_cache.as_deref();
        if let Some(parts) = file.and_then(schema_cache::load) {
            let caps = P::capabilities(parts.capabilities.as_deref().unwrap_or_default());
            if caps.is_ok_and(|c| c.get_provider_schema_optional) {
                tracing::debug!(provider = %self.plugin.name, "schema from the cache");
                return Ok(parts);
            }
        }
        let fetch = store::fetch(self.plugin.channel.clone(), P::GET_SCHEMA_PATH);
        let parts = call(&self.plugin, P::NAMES.get_schema, "", fetch).await?;
        if let Some(file) = file {
            schema_cache::store(file, &parts);
        }
        Ok(parts)
    }

    /// A `Validate*Config` call of a typed block (resource or data source): the diagnostics.
    async fn validate_typed<F, R>(
        &self,
        (rpc, of): (&'static str, TypeOf),
        type_name: &str,
        config: &Value,
        send: impl FnOnce(P::Client, wire::TypedConfig) -> F + Send,
    ) -> Result<Vec<Diagnostic>>
    where
        F: Future<Output = super::protocol::Reply<R>> + Send,
        R: Into<wire::Checked> + Send,
    {
        let ty = self.ty(of, type_name).await?;
        let req = wire::TypedConfig {
            type_name: type_name.to_string(),
            config: encode(rpc, "config", config, &ty)?,
        };
        let resp = call(&self.plugin, rpc, type_name, send(self.client(), req)).await?;
        Ok(resp.into().diagnostics)
    }

    /// The identity `given` for an import of `type_name`, encoded against the type's identity
    /// schema; `Err` with the reason when the provider declares none or `given` does not fit.
    async fn identity(
        &self,
        rpc: &'static str,
        type_name: &str,
        given: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<std::result::Result<wire::Dynamic, String>> {
        let schemas = self.identity_schemas().await?;
        let fitted = match schemas.get(type_name) {
            None => Err(format!(
                "the provider declares no resource identity for {type_name}; import it by id"
            )),
            Some(schema) => schema.value_of(given).map(|v| (v, schema.ty())),
        };
        match fitted {
            Ok((value, ty)) => Ok(Ok(encode(rpc, "identity", &value, &ty)?)),
            Err(reason) => Ok(Err(reason)),
        }
    }

    async fn fetch_identity_schemas(&self) -> Result<Arc<IdentitySchemas>> {
        let rpc = "get_resource_identity_schemas";
        let send = P::get_resource_identity_schemas(self.client(), Default::default());
        let resp: wire::IdentitySchemas = match call(&self.plugin, rpc, "", send).await {
            Ok(resp) => resp.into(),
            // A provider from before identities.
            Err(ProviderError::Rpc { status, .. })
                if status.code() == tonic::Code::Unimplemented =>
            {
                return Ok(Arc::default());
            }
            Err(e) => return Err(e),
        };
        if resp.diagnostics.has_errors() {
            return Err(ProviderError::Schema(resp.diagnostics.error_summary()));
        }
        let mut out = IdentitySchemas::new();
        for (name, schema) in resp.schemas {
            out.insert(name, identity_schema(rpc, schema)?);
        }
        Ok(Arc::new(out))
    }
}

/// One type's identity schema in the domain type.
fn identity_schema(rpc: &'static str, schema: wire::IdentitySchema) -> Result<IdentitySchema> {
    let attributes = schema
        .attributes
        .into_iter()
        .map(|a| {
            Ok(IdentityAttribute {
                ty: wire::parse_type(rpc, &a.name, &a.ty)?,
                name: a.name,
                required_for_import: a.required_for_import,
            })
        })
        .collect::<Result<_>>()?;
    Ok(IdentitySchema {
        version: schema.version,
        attributes,
    })
}

/// An import by identity refused before the call, as the provider would: one error.
fn refused_identity(reason: String) -> ImportResponse {
    ImportResponse {
        imported: Vec::new(),
        diagnostics: vec![Diagnostic {
            severity: Severity::Error,
            summary: "invalid import identity".into(),
            detail: reason,
            attribute: None,
        }],
    }
}

#[async_trait]
impl<P: Protocol> Plugin for Adapter<P> {
    fn protocol_version(&self) -> u32 {
        P::VERSION
    }

    async fn schema(&self) -> Result<Arc<ProviderSchema>> {
        self.loaded().await?.all()
    }

    async fn schema_for(&self, wanted: &[(TypeOf, &str)]) -> Result<Arc<ProviderSchema>> {
        self.loaded().await?.with(wanted)
    }

    async fn validate_provider_config(&self, config: &Value) -> Result<Vec<Diagnostic>> {
        let rpc = P::NAMES.validate_provider;
        let ty = self.provider_type().await?;
        let req = wire::ProviderConfig {
            config: encode(rpc, "provider config", config, &ty)?,
        };
        let send = P::validate_provider_config(self.client(), req.into());
        Ok(call(&self.plugin, rpc, "", send).await?.into().diagnostics)
    }

    async fn validate_resource_config(
        &self,
        type_name: &str,
        config: &Value,
    ) -> Result<Vec<Diagnostic>> {
        let rpc = (P::NAMES.validate_resource, TypeOf::Resource);
        self.validate_typed(rpc, type_name, config, |c, req| {
            P::validate_resource_config(c, req.into())
        })
        .await
    }

    async fn validate_data_source_config(
        &self,
        type_name: &str,
        config: &Value,
    ) -> Result<Vec<Diagnostic>> {
        let rpc = (P::NAMES.validate_data, TypeOf::DataSource);
        self.validate_typed(rpc, type_name, config, |c, req| {
            P::validate_data_config(c, req.into())
        })
        .await
    }

    async fn configure(&self, terraform_version: &str, config: &Value) -> Result<Vec<Diagnostic>> {
        let rpc = P::NAMES.configure;
        let ty = self.provider_type().await?;
        let req = wire::Configure {
            terraform_version: terraform_version.to_string(),
            config: encode(rpc, "provider config", config, &ty)?,
        };
        let send = P::configure(self.client(), req.into());
        Ok(call(&self.plugin, rpc, "", send).await?.into().diagnostics)
    }

    async fn upgrade_resource_state(&self, req: UpgradeRequest) -> Result<UpgradeResponse> {
        let rpc = "upgrade_resource_state";
        let ty = self.ty(TypeOf::Resource, &req.type_name).await?;
        let msg = wire::Upgrade {
            type_name: req.type_name.clone(),
            version: req.version,
            raw_state_json: req.raw_state_json,
        };
        let send = P::upgrade_resource_state(self.client(), msg.into());
        let resp: wire::Upgraded = call(&self.plugin, rpc, &req.type_name, send).await?.into();
        Ok(UpgradeResponse {
            upgraded_state: decode(rpc, "upgraded state", resp.upgraded_state, &ty)?,
            diagnostics: resp.diagnostics,
        })
    }

    async fn read_resource(&self, req: ReadRequest) -> Result<ReadResponse> {
        let rpc = "read_resource";
        let ty = self.ty(TypeOf::Resource, &req.type_name).await?;
        let msg = wire::Read {
            type_name: req.type_name.clone(),
            current_state: encode(rpc, "current state", &req.current_state, &ty)?,
            private: req.private,
        };
        let send = P::read_resource(self.client(), msg.into());
        let resp: wire::ReadAnswer = call(&self.plugin, rpc, &req.type_name, send).await?.into();
        Ok(ReadResponse {
            new_state: decode(rpc, "new state", resp.new_state, &ty)?,
            private: resp.private,
            diagnostics: resp.diagnostics,
        })
    }

    async fn plan_resource_change(&self, req: PlanRequest) -> Result<PlanResponse> {
        let rpc = "plan_resource_change";
        let ty = self.ty(TypeOf::Resource, &req.type_name).await?;
        let msg = wire::Plan {
            type_name: req.type_name.clone(),
            prior_state: encode(rpc, "prior state", &req.prior_state, &ty)?,
            proposed_new_state: encode(rpc, "proposed new state", &req.proposed_new_state, &ty)?,
            config: encode(rpc, "config", &req.config, &ty)?,
            prior_private: req.prior_private,
        };
        let send = P::plan_resource_change(self.client(), msg.into());
        let resp: wire::Planned = call(&self.plugin, rpc, &req.type_name, send).await?.into();
        Ok(PlanResponse {
            planned_state: decode(rpc, "planned state", resp.planned_state, &ty)?,
            requires_replace: resp.requires_replace,
            planned_private: resp.planned_private,
            diagnostics: resp.diagnostics,
            legacy_type_system: resp.legacy_type_system,
        })
    }

    async fn apply_resource_change(&self, req: ApplyRequest) -> Result<ApplyResponse> {
        let rpc = "apply_resource_change";
        let ty = self.ty(TypeOf::Resource, &req.type_name).await?;
        let msg = wire::Apply {
            type_name: req.type_name.clone(),
            prior_state: encode(rpc, "prior state", &req.prior_state, &ty)?,
            planned_state: encode(rpc, "planned state", &req.planned_state, &ty)?,
            config: encode(rpc, "config", &req.config, &ty)?,
            planned_private: req.planned_private,
        };
        let send = P::apply_resource_change(self.client(), msg.into());
        let resp: wire::Applied = call(&self.plugin, rpc, &req.type_name, send).await?.into();
        Ok(ApplyResponse {
            new_state: decode(rpc, "new state", resp.new_state, &ty)?,
            private: resp.private,
            diagnostics: resp.diagnostics,
            legacy_type_system: resp.legacy_type_system,
        })
    }

    async fn import_resource_state(
        &self,
        type_name: &str,
        by: &ImportBy,
    ) -> Result<ImportResponse> {
        let rpc = "import_resource_state";
        let mut msg = wire::Import {
            type_name: type_name.to_string(),
            id: String::new(),
            identity: None,
        };
        match by {
            ImportBy::Id(id) => msg.id = id.clone(),
            ImportBy::Identity(given) => match self.identity(rpc, type_name, given).await? {
                Ok(identity) => msg.identity = Some(identity),
                Err(reason) => return Ok(refused_identity(reason)),
            },
        }
        let send = P::import_resource_state(self.client(), msg.into());
        let resp: wire::Imported = call(&self.plugin, rpc, type_name, send).await?.into();
        let mut imported = Vec::with_capacity(resp.imported.len());
        for r in resp.imported {
            let ty = self.ty(TypeOf::Resource, &r.type_name).await?;
            imported.push(ImportedResource {
                state: decode(rpc, "imported state", r.state, &ty)?,
                type_name: r.type_name,
                private: r.private,
            });
        }
        Ok(ImportResponse {
            imported,
            diagnostics: resp.diagnostics,
        })
    }

    async fn identity_schemas(&self) -> Result<Arc<IdentitySchemas>> {
        let fetch = || self.fetch_identity_schemas();
        self.identities.get_or_try_init(fetch).await.cloned()
    }

    async fn read_data_source(&self, type_name: &str, config: &Value) -> Result<ReadDataResponse> {
        let rpc = "read_data_source";
        let ty = self.ty(TypeOf::DataSource, type_name).await?;
        let msg = wire::TypedConfig {
            type_name: type_name.to_string(),
            config: encode(rpc, "config", config, &ty)?,
        };
        let send = P::read_data_source(self.client(), msg.into());
        let resp: wire::DataRead = call(&self.plugin, rpc, type_name, send).await?.into();
        Ok(ReadDataResponse {
            state: decode(rpc, "state", resp.state, &ty)?,
            diagnostics: resp.diagnostics,
        })
    }

    async fn list_resource(&self, req: ListRequest) -> Result<ListResponse> {
        let rpc = "list_resource";
        let ty = self.ty(TypeOf::ListResource, &req.type_name).await?;
        let msg = wire::List {
            type_name: req.type_name.clone(),
            config: encode(rpc, "config", &req.config, &ty)?,
            include_resource_object: req.include_resource_object,
            limit: req.limit,
        };
        // The answer is a stream: the whole of it is one call, under one deadline.
        let limit = usize::try_from(req.limit).unwrap_or(usize::MAX);
        let send = P::list_resource(self.client(), msg.into());
        let collect = async move {
            let mut stream = send.await?.into_inner();
            let mut events: Vec<wire::ListEvent> = Vec::new();
            while let Some(event) = stream.message().await? {
                events.push(event.into());
                if events.len() >= limit {
                    break;
                }
            }
            Ok(tonic::Response::new(events))
        };
        let events: Vec<wire::ListEvent> = call(&self.plugin, rpc, &req.type_name, collect).await?;
        let mut items = Vec::with_capacity(events.len());
        let mut diagnostics = Vec::new();
        for event in events {
            diagnostics.extend(event.diagnostics);
            let resource_object = match event.resource_object {
                Some(v) if req.include_resource_object => {
                    let ty = self.ty(TypeOf::Resource, &req.type_name).await?;
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
        Ok(ListResponse { items, diagnostics })
    }

    async fn stop(&self) -> Result<String> {
        let send = P::stop(self.client(), Default::default());
        let resp: wire::Stopped = call(&self.plugin, P::NAMES.stop, "", send).await?.into();
        Ok(resp.error)
    }
}
