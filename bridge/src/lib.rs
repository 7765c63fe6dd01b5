//! Kraken's bridge: the `kraken` CLI over the layers of the operator, each a crate of its own so
//! that Cargo holds the direction of their imports.
//!
//! The layers, bottom up (each depends only on the ones above it in this list;
//! `docs/architecture.md` draws them), re-exported here under their module names so that
//! `kraken_bridge::managed::…` and the CLI's `crate::managed::…` read as before:
//! - [`kit`] (`kraken-kit`): conditions, Events, the finalizer flow, metrics, durations and
//!   backoff, hashing, error chains, the write fence and the shard ring.
//! - [`value`] (`kraken-value`): cty types and values, the msgpack and JSON wire codecs,
//!   Kubernetes JSON and the spec ↔ Terraform field mapping.
//! - [`provider`] (`kraken-provider`): the plugin host — the protocol-neutral `Plugin` trait,
//!   the v5/v6 gRPC adapters, the process launcher and pool, where provider binaries are found.
//! - [`core_kinds`] (`kraken-core-kinds`): the API types and the names shared across
//!   controllers.
//! - [`hub`] (`kraken-hub`): the dependency hub and its controllers.
//! - [`source`] (`kraken-source`): a ProviderConfig → a configured, running provider.
//! - The kinds' controllers, peers that never depend on each other: [`managed`]
//!   (`kraken-managed`), [`installer`] (`kraken-installer`) and [`ec2`] (`kraken-ec2`); and,
//!   beside them for the CLI, [`convert`] (`kraken-convert`).
//! - [`operator`] (`kraken-operator`): the composition root.
//! - [`cli`] (this crate): the `kraken` subcommands.

pub mod cli;

pub use kraken_convert as convert;
pub use kraken_core_kinds as core_kinds;
pub use kraken_ec2 as ec2;
pub use kraken_hub as hub;
pub use kraken_installer as installer;
pub use kraken_kit as kit;
pub use kraken_managed as managed;
pub use kraken_operator as operator;
pub use kraken_provider as provider;
pub use kraken_rbac as rbac;
pub use kraken_source as source;
pub use kraken_value as value;
