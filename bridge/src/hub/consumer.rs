//! The consumer side's shared words: how a resource that waits for its `valuesFrom` reports it,
//! and how a producer that is still read reports why its deletion waits. Every kind that
//! consumes values (bridged resources, EC2Instance, ConfigExport) reports the same way.

use crate::kit::conditions::{READY, SYNCED, Set};

/// Reason on `Ready` while references are not resolved.
pub const WAITING: &str = "WaitingForDependencies";
/// Reason on `Ready` while a deletion waits for consumers.
pub const IN_USE: &str = "InUse";

/// A consumer whose values are not resolved: its conditions (`Synced` carries the request's
/// reason and message), and the message of a Warning Event when that reason is a problem a
/// user can fix and is new (`previous`: the Synced message before).
pub fn waiting(
    reason: &str,
    message: String,
    previous: Option<&str>,
) -> ([Set; 2], Option<String>) {
    let message = if reason == WAITING {
        message
    } else {
        format!("{reason}: {message}")
    };
    let event = (previous != Some(message.as_str()) && reason != WAITING).then(|| message.clone());
    (
        [
            Set::new(
                READY,
                false,
                WAITING,
                "waiting for the values of spec.valuesFrom; see the Synced condition",
            ),
            Set::new(SYNCED, false, WAITING, message),
        ],
        event,
    )
}
