//! Step: report a failed pass on the object — `Synced=False` with the error's reason, `Ready`
//! saying what waits, an Event when the error is new.

use serde_json::Value as Json;

use super::error::{Error, Result};
use super::write::Run;
use kraken_kit::conditions::{READY, SYNCED, Set, reason};

/// Reports a failed pass: `Synced=False` with the error, `Ready` unchanged if the object
/// exists and works, an Event when the error is new.
pub(super) async fn report(run: &mut Run<'_>, err: &Error) -> Result<()> {
    let message = err.message();
    let previous = condition(&run.status, SYNCED);
    let mut updates = vec![Set::new(SYNCED, false, err.reason(), message.clone())];
    let deleting = run.obj.metadata.deletion_timestamp.is_some();
    let ready = condition(&run.status, READY).is_some_and(|(s, _, _)| s == "True");
    if deleting {
        updates.push(Set::new(
            READY,
            false,
            reason::DELETING,
            format!("deletion is waiting: {}", err.reason()),
        ));
    } else if !ready {
        let r = if run.status.get("externalId").is_some() {
            reason::UNAVAILABLE
        } else {
            reason::CREATING
        };
        updates.push(Set::new(
            READY,
            false,
            r,
            format!("waiting: {}; see the Synced condition", err.reason()),
        ));
    }
    run.set_conditions(&updates);
    run.flush_status().await?;
    let repeated =
        previous.is_some_and(|(s, r, m)| s == "False" && r == err.reason() && m == message);
    if !repeated {
        run.event(true, err.reason(), message).await;
    }
    Ok(())
}

pub(super) fn condition(status: &Json, type_: &str) -> Option<(String, String, String)> {
    let c = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Json::as_str) == Some(type_))?;
    let s = |k: &str| {
        c.get(k)
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Some((s("status"), s("reason"), s("message")))
}
