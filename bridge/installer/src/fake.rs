//! A CRD generator for unit tests: answers steps 2 and 3 from a schema it holds (the
//! committed schema of a real provider) through the real codegen ([`output`]), instead of
//! launching the binary the package holds. Failures can be queued; calls are counted.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::generate::{Generator, Output, Request, output};
use super::{Failure, reason};
use kraken_provider::ProviderSchema;

/// The protocol the fake's binaries speak.
pub const PROTOCOL: u32 = 6;

pub struct FakeGenerator {
    schema: ProviderSchema,
    failures: Mutex<VecDeque<Failure>>,
    calls: AtomicUsize,
}

impl FakeGenerator {
    pub fn new(schema: ProviderSchema) -> Self {
        Self {
            schema,
            failures: Mutex::default(),
            calls: AtomicUsize::new(0),
        }
    }

    /// The next generation fails with `failure` (failures queue up in order).
    pub fn fail_next(&self, failure: Failure) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(failure);
    }

    /// How many times CRDs were asked for.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Generator for FakeGenerator {
    async fn generate(&self, req: &Request) -> Result<Output, Failure> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let queued = self
            .failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        if let Some(failure) = queued {
            return Err(failure);
        }
        // The binary the install found must be there, as launching it needs.
        if !req.binary.is_file() {
            let message = format!("{} does not exist", req.binary.display());
            return Err(Failure::new(reason::SCHEMA_UNAVAILABLE, message, true));
        }
        output(req, &self.schema, PROTOCOL)
    }
}
