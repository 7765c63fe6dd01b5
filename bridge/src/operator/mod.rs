//! The `kraken operator` runtime: the controllers that reconcile every generated kind (see
//! `docs/operator.md`) and the infrastructure they run on — [`leader`] election on a Lease,
//! Prometheus [`metrics`], and the [`http`] server for `/metrics`, `/healthz` and `/readyz`.

pub mod http;
pub mod leader;
mod run;

pub use run::{Options, client, run};
