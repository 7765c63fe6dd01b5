//! One provider RPC as the host runs it: raced against the process's exit and its deadline,
//! inside a span that names the provider and the resource type, and timed for the observer.
//!
//! A provider that does not answer in time is asked to stop (`StopProvider`), then killed: the
//! host launches a fresh process for the next request, the caller's permit is returned, and
//! nothing waits on a hung process for ever.

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::{Instrument as _, warn};

use super::client::PluginClient;
use super::observe::grpc_method;
use super::{ProviderError, Result};

/// How long a provider past its deadline gets to answer `StopProvider` before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Run one RPC, racing it against the provider process's exit: a crash fails the request with
/// [`ProviderError::Crashed`] and is never reported as success; no answer by the deadline
/// stops and kills the process ([`ProviderError::Timeout`]).
///
/// The RPC runs inside an `info` span `rpc` (`rpc`, `provider`, `type_name`, empty for
/// provider-level RPCs), so at the operator's default level whatever is logged during it (a
/// deadline passed, a provider restarted) shows which RPC of which reconcile it was about. The
/// span logs nothing of its own: a formatter shows a span only as the context of an event. Its
/// latency, failed or not, goes to the launch's observer.
pub async fn call<T, F>(
    client: &PluginClient,
    rpc: &'static str,
    type_name: &str,
    fut: F,
) -> Result<T>
where
    F: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
{
    let method = grpc_method(rpc);
    let span = tracing::info_span!("rpc", rpc = %method, provider = %client.name, type_name);
    let started = Instant::now();
    let result = within_deadline(client, rpc, &method, fut)
        .instrument(span)
        .await;
    client.observe_rpc(&method, started.elapsed());
    result
}

/// The RPC raced against the process's exit, under its deadline; past it, the provider is
/// stopped and killed.
async fn within_deadline<T, F>(
    client: &PluginClient,
    rpc: &'static str,
    method: &str,
    fut: F,
) -> Result<T>
where
    F: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
{
    let deadline = client.deadlines.of(method);
    match tokio::time::timeout(deadline, race_exit(client, rpc, fut)).await {
        Ok(result) => result,
        Err(_) => {
            // Named in full: below `info` (the CLI's default) the span is not there to say.
            warn!(provider = %client.name, rpc = %method, ?deadline, "no answer in time; stopping the provider");
            stop_and_kill(client).await;
            Err(ProviderError::Timeout {
                rpc,
                after: deadline,
            })
        }
    }
}

/// Ask the provider to cancel what it is doing (`StopProvider`), then kill it: a hung call may
/// hold anything, and only a fresh process is known to be well.
async fn stop_and_kill(client: &PluginClient) {
    use kraken_proto::{tfplugin5, tfplugin6};
    let channel = client.channel.clone();
    let stop = async {
        if client.protocol == 5 {
            let mut c = tfplugin5::provider_client::ProviderClient::new(channel);
            c.stop(tfplugin5::stop::Request::default())
                .await
                .map(|_| ())
        } else {
            let mut c = tfplugin6::provider_client::ProviderClient::new(channel);
            c.stop_provider(tfplugin6::stop_provider::Request::default())
                .await
                .map(|_| ())
        }
    };
    if !matches!(tokio::time::timeout(STOP_GRACE, stop).await, Ok(Ok(()))) {
        warn!(provider = %client.name, "StopProvider did not answer; killing the provider");
    }
    client.kill().await;
}

async fn race_exit<T, F>(client: &PluginClient, rpc: &'static str, fut: F) -> Result<T>
where
    F: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
{
    tokio::select! {
        biased;
        res = fut => match res {
            Ok(resp) => Ok(resp.into_inner()),
            Err(status) => {
                // A transport error is often the first sign of a crash; give the supervisor a
                // moment to observe the exit so the caller gets the accurate error.
                let exited = tokio::time::timeout(Duration::from_millis(500), client.exited())
                    .await
                    .is_ok();
                if exited {
                    Err(ProviderError::Crashed { rpc })
                } else {
                    Err(ProviderError::Rpc { rpc, status: Box::new(status) })
                }
            }
        },
        () = client.exited() => Err(ProviderError::Crashed { rpc }),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::Deadlines;
    use crate::client::detached_client;
    use kraken_kit::metrics::Metrics;

    const RANDOM: &str = "registry.terraform.io/hashicorp/random 3.6.0";

    fn sample(text: &str, name: &str, rpc: &str) -> Option<f64> {
        let prefix = format!("{name}{{provider=\"{RANDOM}\",rpc=\"{rpc}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_stops_and_kills_the_provider() {
        let (mut client, exit) = detached_client(RANDOM, None);
        client.deadlines = Deadlines {
            other: Duration::from_millis(50),
            ..Deadlines::default()
        };
        assert_eq!(
            client.deadlines.of("ApplyResourceChange"),
            Duration::from_secs(3600)
        );
        // The "process" goes away once killed; a detached client has nobody to kill, so the
        // test plays the supervisor.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = exit.send(Some("killed".into()));
        });
        let started = Instant::now();
        let hung = call(&client, "plan_resource_change", "random_pet", async {
            std::future::pending::<std::result::Result<tonic::Response<()>, tonic::Status>>().await
        })
        .await;
        assert!(
            matches!(
                hung,
                Err(ProviderError::Timeout {
                    rpc: "plan_resource_change",
                    ..
                })
            ),
            "{hung:?}"
        );
        assert!(client.has_exited(), "the hung provider was not waited out");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn every_rpc_is_timed_for_the_observer_failed_or_not() {
        let metrics = Arc::new(Metrics::new());
        let (client, exit) = detached_client(RANDOM, Some(metrics.clone()));
        let ok = call(&client, "plan_resource_change", "random_pet", async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(tonic::Response::new(()))
        })
        .await;
        assert!(ok.is_ok(), "{ok:?}");
        let _ = exit.send(Some("exit code 2".into()));
        let crashed = call(&client, "apply_resource_change", "random_pet", async {
            std::future::pending::<std::result::Result<tonic::Response<()>, tonic::Status>>().await
        })
        .await;
        assert!(
            matches!(crashed, Err(ProviderError::Crashed { .. })),
            "{crashed:?}"
        );

        let text = metrics.encode();
        let count = "kraken_provider_rpc_duration_seconds_count";
        assert_eq!(
            sample(&text, count, "PlanResourceChange"),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, count, "ApplyResourceChange"),
            Some(1.0),
            "{text}"
        );
        let sum = sample(
            &text,
            "kraken_provider_rpc_duration_seconds_sum",
            "PlanResourceChange",
        );
        assert!(sum.is_some_and(|s| s >= 0.02), "{text}");
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut out) = self.0.lock() {
                out.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A subscriber as the operator runs by default (`info`), writing into the returned buffer.
    fn at_info() -> (impl tracing::Subscriber + Send + Sync, Captured) {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (subscriber, out)
    }

    fn text(out: &Captured) -> String {
        String::from_utf8(out.0.lock().map(|o| o.clone()).unwrap_or_default()).unwrap_or_default()
    }

    #[tokio::test]
    async fn at_the_default_level_the_rpc_span_shows_under_the_reconcile() {
        let (subscriber, out) = at_info();
        let _guard = tracing::subscriber::set_default(subscriber);
        let (client, _exit) = detached_client(RANDOM, None);
        let reconcile = tracing::info_span!("reconcile", name = "pet-1");
        let rpc = call(&client, "read_resource", "random_pet", async {
            // Yield first: a span entered and dropped before the RPC would be gone by now.
            tokio::task::yield_now().await;
            tracing::info!("inside the rpc");
            Ok(tonic::Response::new(()))
        });
        let resp = rpc.instrument(reconcile).await;
        assert!(resp.is_ok());
        let text = text(&out);
        let line = text
            .lines()
            .find(|l| l.contains("inside the rpc"))
            .unwrap_or_default();
        assert!(line.contains("reconcile{name=\"pet-1\"}:rpc{"), "{text}");
        assert!(line.contains("rpc=ReadResource"), "{text}");
        assert!(line.contains("type_name=\"random_pet\""), "{text}");
        assert!(line.contains(RANDOM), "{text}");
    }

    #[tokio::test]
    async fn the_rpc_span_logs_nothing_of_its_own() {
        let (subscriber, out) = at_info();
        let _guard = tracing::subscriber::set_default(subscriber);
        let (client, _exit) = detached_client(RANDOM, None);
        for _ in 0..3 {
            let resp = call(&client, "plan_resource_change", "random_pet", async {
                tokio::task::yield_now().await;
                Ok(tonic::Response::new(()))
            })
            .await;
            assert!(resp.is_ok());
        }
        // The span was there (an event inside it would have shown it): it is quiet, not off.
        let resp = call(&client, "plan_resource_change", "random_pet", async {
            tracing::info!("one event");
            Ok(tonic::Response::new(()))
        })
        .await;
        assert!(resp.is_ok());
        let text = text(&out);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("rpc{rpc=PlanResourceChange"), "{text}");
    }
}
