//! `kraken convert`: a Terraform configuration (and its state) → Kubernetes manifests that
//! adopt what it manages.
//!
//! Bottom up: [`load`] reads a module's files with their locations; [`eval`] and [`funcs`]
//! evaluate expressions with real values, keeping references to other objects as references;
//! [`module`] evaluates variables, locals and outputs and expands `count` and `for_each` into
//! instances; [`emit`] writes a manifest per instance, references as `valuesFrom`; [`state`]
//! joins a `terraform.tfstate` to them so they adopt what Terraform manages. [`guard`] is what
//! one conversion may read and spend: the root it is confined to, and the bounds on its input.

pub mod ast;
pub mod emit;
pub mod eval;
pub mod exports;
pub mod funcs;
pub mod guard;
mod lex;
mod lifecycle;
pub mod load;
pub mod module;
pub mod modules;
pub mod state;
pub mod suggest;
pub mod value;
pub mod vars;

#[cfg(test)]
mod tests;
