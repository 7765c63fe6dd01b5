//! The native EC2 path: `EC2Instance` in `aws.kraken.dev/v1alpha1`, driven
//! through the AWS SDK for Rust with no Terraform in between, and `AwsConfig` for where and as
//! whom to reach EC2.
//!
//! The Rust types the CRDs are derived from live with the other API types in
//! [`kraken_core_kinds::ec2`] (rendered with the core kinds into `generated-crds/core/`).
//!
//! - [`client`]: the narrow [`client::Ec2`] trait the controller calls, its aws-sdk-ec2
//!   implementation, and the [`client::Ec2Factory`] seam the controller gets clients from.
//! - [`plan`]: what a pass must do, decided purely from what EC2 shows.
//! - [`policy`]: what the administrator lets a namespace user do with the operator's standing
//!   (ambient credentials, endpoints, adoption by `importIds`).
//! - [`config`]: the AwsConfig controller: keeps an AwsConfig and its credentials Secrets
//!   until no EC2Instance needs them.
//! - [`controller`]: the reconciler, wired into the dependency hub like every generated kind,
//!   one file per step (dispatch, inputs, observe, act, status, cleanup).
//! - `fake` (unit tests only): a stateful in-memory EC2 behind the same traits.

pub mod client;
pub mod config;
pub mod controller;
pub mod fake;
pub mod plan;
pub mod policy;

pub use kraken_core_kinds::ec2::{AwsConfig, EC2Instance};
