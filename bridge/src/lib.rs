//! Kraken's bridge: the plugin host that drives unmodified Terraform providers, the value
//! codec, and (in later stages) the operator's controllers and the `kraken` CLI.
//!
//! Layering, bottom up: [`value`] (cty types and values, wire codecs) → [`provider`] (the
//! protocol-neutral [`provider::Provider`] trait, the v5/v6 gRPC adapters and the process
//! launcher) → [`operator`] (controllers, leader election, metrics) → [`cli`] (subcommands).

pub mod cli;
pub mod controller;
pub mod core_kinds;
pub mod ec2;
pub mod hub;
pub mod operator;
pub mod provider;
pub mod value;
