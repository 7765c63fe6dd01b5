//! Kraken's bridge: the plugin host that drives unmodified Terraform providers, the value codec,
//! the controllers of the operator and the `kraken` CLI.
//!
//! Modules, bottom up (each imports only the ones above it in this list; `docs/architecture.md`
//! draws it, and `tests/layers.rs` fails on an import that points up):
//! - [`kit`]: conditions, Events, the finalizer flow, metrics, durations and backoff, hashing,
//!   error chains — what every controller uses, importing nothing of the crate.
//! - [`value`]: cty types and values, the msgpack and JSON wire codecs, Kubernetes JSON and the
//!   spec ↔ Terraform field mapping ([`value::fields`]).
//! - [`provider`]: the plugin host — the protocol-neutral [`provider::Plugin`] trait, the v5/v6
//!   gRPC adapters, the process launcher and pool, and where provider binaries are found.
//! - [`core_kinds`]: the API types (Provider, ProviderConfig, the hub's kinds, the EC2 kinds, the
//!   identity of a generated kind) and the names shared across controllers.
//! - [`hub`]: the dependency hub — its index and value conversion, the producer and consumer
//!   interfaces the other controllers use, and the DependencyRequest and ConfigExport
//!   controllers.
//! - [`source`]: the provider source — turns a ProviderConfig into a configured, running
//!   provider for a reconcile.
//! - The kinds' controllers, peers that never import each other: [`managed`] (every generated
//!   kind through its provider), [`installer`] (the Provider installer and the ProviderConfig
//!   controller) and [`ec2`] (native EC2 instances).
//! - [`operator`]: the composition root — leader election, the HTTP endpoints, and the table of
//!   controllers it starts.
//! - [`cli`]: the `kraken` subcommands.

pub mod cli;
pub mod convert;
pub mod core_kinds;
pub mod ec2;
pub mod hub;
pub mod installer;
pub mod kit;
pub mod managed;
pub mod operator;
pub mod provider;
pub mod source;
pub mod value;
