//! Managed-resource controller.

pub mod fields;
