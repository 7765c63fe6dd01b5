//! The `kraken operator` runtime: the controllers that reconcile every generated kind (see
//! `docs/operator.md`) and the infrastructure they run on — [`leader`] election on a Lease,
//! membership of the [`shard`] ring (`--shards auto`), Prometheus [`metrics`], and the [`http`] server for `/metrics`, `/healthz` and `/readyz`.

pub mod http;
pub mod leader;
mod run;
pub mod shard;
mod supervise;

pub use run::{Options, client, run};
