//! A cap on the API-server requests one client has in flight (`--api-concurrency`).
//!
//! kube's client opens an HTTP/1.1 connection for every request made while the others are
//! busy, and keeps each idle in its pool afterwards. A replica's first pass over its share —
//! every kind's reconciles at once — opened about 120, and the buffers of that burst stayed
//! in the process's memory after it (docs/benchmarks.md, "Where the memory is"). Waiting for
//! one of a fixed number of permits bounds the connections, and so that high-water mark.
//!
//! Watches are exempt: each holds its request open for minutes, and a permit held that long
//! would starve every other request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::Request;
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt as _};

/// Holds non-watch requests until one of `permits` is free; `None` passes every request on.
#[derive(Clone)]
pub struct ApiLimitLayer {
    permits: Option<Arc<Semaphore>>,
}

impl ApiLimitLayer {
    /// At most `max` requests at once; 0 means no limit.
    pub fn new(max: usize) -> Self {
        Self {
            permits: (max > 0).then(|| Arc::new(Semaphore::new(max))),
        }
    }
}

impl<S> Layer<S> for ApiLimitLayer {
    type Service = ApiLimit<S>;

    fn layer(&self, inner: S) -> ApiLimit<S> {
        ApiLimit {
            inner,
            permits: self.permits.clone(),
        }
    }
}

#[derive(Clone)]
pub struct ApiLimit<S> {
    inner: S,
    permits: Option<Arc<Semaphore>>,
}

/// A long-running request: a watch, or a log or exec stream.
fn is_watch<B>(req: &Request<B>) -> bool {
    req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "watch=true" || kv == "follow=true")
    })
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> Service<Request<B>> for ApiLimit<S>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is awaited inside `call`, after the permit: a permit first, then the
        // inner service's (the connection pool's) readiness.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let permits = if is_watch(&req) {
            None
        } else {
            self.permits.clone()
        };
        Box::pin(async move {
            let _permit = match permits {
                // The semaphore is never closed, so acquiring fails never; if it did, the
                // request would go on unlimited rather than fail.
                Some(p) => p.acquire_owned().await.ok(),
                None => None,
            };
            inner.oneshot(req).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Counts requests in flight, each taking 20 ms; records the most seen at once.
    #[derive(Clone, Default)]
    struct Slow {
        now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    impl Service<Request<()>> for Slow {
        type Response = ();
        type Error = std::convert::Infallible;
        type Future = BoxFuture<Result<(), Self::Error>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _req: Request<()>) -> Self::Future {
            let (now, most) = (self.now.clone(), self.most.clone());
            Box::pin(async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            })
        }
    }

    async fn most_at_once(limit: usize, uris: &[&str]) -> usize {
        let slow = Slow::default();
        let svc = ApiLimitLayer::new(limit).layer(slow.clone());
        let calls = uris.iter().map(|uri| {
            let req = Request::get(*uri).body(()).expect("request");
            svc.clone().oneshot(req)
        });
        for r in futures::future::join_all(calls).await {
            assert!(r.is_ok());
        }
        slow.most.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn requests_wait_for_a_permit() {
        let uris = ["/api/v1/namespaces/a/secrets/s"; 12];
        assert_eq!(most_at_once(3, &uris).await, 3);
        assert_eq!(most_at_once(0, &uris).await, 12, "0 is no limit");
    }

    #[tokio::test]
    async fn watches_take_no_permit() {
        let mut uris = vec!["/api/v1/secrets?watch=true&resourceVersion=1"; 4];
        uris.extend(["/api/v1/secrets?limit=500"; 4]);
        // One permit: the four watches run beside one list at a time.
        assert_eq!(most_at_once(1, &uris).await, 5);
    }
}
