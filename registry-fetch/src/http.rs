//! The HTTP client every remote source shares: TLS with the platform's roots plus any extra CA
//! the user trusts, proxies from the environment (`HTTPS_PROXY`, `NO_PROXY`), a redirect limit
//! that also refuses HTTPS→HTTP downgrades, bounded response sizes, and retries with exponential
//! backoff and jitter for transient failures only.

use std::hash::{BuildHasher as _, Hasher as _};
use std::path::PathBuf;
use std::time::Duration;

use reqwest::{StatusCode, Url};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt as _;

use crate::error::{Error, Result};
use crate::progress::Progress;

/// Knobs of the shared client; `Default` is what the CLI uses.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// PEM files of extra root CAs, trusted in addition to the platform's roots.
    pub extra_ca_files: Vec<PathBuf>,
    pub max_redirects: usize,
    pub connect_timeout: Duration,
    /// Whole-request limit for metadata documents; downloads are bounded by `read_timeout`.
    pub request_timeout: Duration,
    /// The longest a download may stall without receiving a byte.
    pub read_timeout: Duration,
    /// Attempts after the first, for transient failures only.
    pub retries: u32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Limit for JSON documents, SHA256SUMS and signatures.
    pub max_document_bytes: u64,
    /// Limit for a provider package archive.
    pub max_package_bytes: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            extra_ca_files: Vec::new(),
            max_redirects: 10,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
            retries: 3,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(10),
            max_document_bytes: 8 << 20,
            // The largest providers (aws, azurerm) are a few hundred MB; leave headroom.
            max_package_bytes: 2 << 30,
        }
    }
}

/// A completed small download.
#[derive(Debug)]
pub struct Document {
    pub body: Vec<u8>,
    /// The URL after redirects: relative links in the document resolve against it.
    pub final_url: Url,
}

/// A package streamed to disk.
#[derive(Debug)]
pub struct Downloaded {
    pub bytes: u64,
    pub sha256: [u8; 32],
}

#[derive(Debug, Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    config: HttpConfig,
}

impl HttpClient {
    pub fn new(config: HttpConfig) -> Result<Self> {
        let mut extra = Vec::new();
        for path in &config.extra_ca_files {
            let pem = std::fs::read(path).map_err(Error::io(format!(
                "failed to read CA file {}",
                path.display()
            )))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|_| {
                Error::Config(format!("{} holds no PEM certificate", path.display()))
            })?;
            extra.extend(certs);
        }
        let max = config.max_redirects;
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            let downgrade = attempt.url().scheme() == "http"
                && attempt.previous().iter().any(|u| u.scheme() == "https");
            if attempt.previous().len() > max || downgrade {
                attempt.error("redirect refused")
            } else {
                attempt.follow()
            }
        });
        let client = reqwest::Client::builder()
            .user_agent(concat!("kraken/", env!("CARGO_PKG_VERSION")))
            .tls_certs_merge(extra)
            .redirect(policy)
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.read_timeout)
            .build()
            .map_err(|e| Error::Config(format!("failed to build the http client: {e}")))?;
        Ok(Self { client, config })
    }

    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    /// GET a small document, retrying transient failures. Non-2xx statuses are errors
    /// (`HttpStatus`), so callers can map 404 to their own meaning.
    pub async fn get_document(&self, url: &Url) -> Result<Document> {
        self.retrying(url, || self.get_document_once(url)).await
    }

    async fn get_document_once(&self, url: &Url) -> Result<Document> {
        let limit = self.config.max_document_bytes;
        let request = self
            .client
            .get(url.clone())
            .timeout(self.config.request_timeout);
        let mut resp = self.send(url, request).await?;
        let final_url = resp.url().clone();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| classify(url, e))? {
            if body.len() as u64 + chunk.len() as u64 > limit {
                return Err(Error::TooLarge {
                    url: url.to_string(),
                    limit,
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Document { body, final_url })
    }

    /// GET and decode a JSON document; returns it with the final URL.
    pub async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &Url) -> Result<(T, Url)> {
        let doc = self.get_document(url).await?;
        let value = serde_json::from_slice(&doc.body).map_err(|e| Error::InvalidResponse {
            url: url.to_string(),
            reason: format!("not the expected JSON document ({e})"),
        })?;
        Ok((value, doc.final_url))
    }

    /// Stream a package into `dest` (truncated first, and again before every retry), hashing as
    /// it goes so the file is never read twice. Memory use is one network chunk.
    pub async fn download(
        &self,
        url: &Url,
        dest: &std::path::Path,
        progress: &dyn Progress,
    ) -> Result<Downloaded> {
        self.retrying(url, || self.download_once(url, dest, progress))
            .await
    }

    async fn download_once(
        &self,
        url: &Url,
        dest: &std::path::Path,
        progress: &dyn Progress,
    ) -> Result<Downloaded> {
        let limit = self.config.max_package_bytes;
        let mut resp = self.send(url, self.client.get(url.clone())).await?;
        let total = resp.content_length();
        if total.is_some_and(|n| n > limit) {
            return Err(Error::TooLarge {
                url: url.to_string(),
                limit,
            });
        }
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(Error::io(format!("failed to create {}", dest.display())))?;
        let mut hasher = Sha256::new();
        let mut bytes = 0u64;
        progress.start(total);
        while let Some(chunk) = resp.chunk().await.map_err(|e| classify(url, e))? {
            bytes += chunk.len() as u64;
            if bytes > limit {
                return Err(Error::TooLarge {
                    url: url.to_string(),
                    limit,
                });
            }
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(Error::io(format!("failed to write {}", dest.display())))?;
            progress.advance(chunk.len() as u64);
        }
        file.flush()
            .await
            .map_err(Error::io(format!("failed to write {}", dest.display())))?;
        progress.finish();
        Ok(Downloaded {
            bytes,
            sha256: hasher.finalize().into(),
        })
    }

    async fn send(&self, url: &Url, request: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let resp = request.send().await.map_err(|e| classify(url, e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        Err(Error::HttpStatus {
            url: resp.url().to_string(),
            status: status.as_u16(),
        })
    }

    /// Run `attempt` until it succeeds, fails permanently, or the retries are spent.
    async fn retrying<T, F, Fut>(&self, url: &Url, mut attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut tries = 0;
        loop {
            match attempt().await {
                Err(e) if e.is_transient() && tries < self.config.retries => {
                    let delay = backoff(&self.config, tries);
                    tracing::info!(%url, error = %e, ?delay, "transient failure, retrying");
                    tokio::time::sleep(delay).await;
                    tries += 1;
                }
                other => return other,
            }
        }
    }
}

/// Exponential backoff with "equal jitter": half the step fixed, half random, so that many
/// clients retrying after one outage spread out instead of arriving in lockstep.
fn backoff(config: &HttpConfig, attempt: u32) -> Duration {
    let step = config
        .backoff_base
        .saturating_mul(1u32 << attempt.min(16))
        .min(config.backoff_max);
    let half = step / 2;
    let jitter = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let millis = u64::try_from(half.as_millis()).unwrap_or(u64::MAX).max(1);
    half + Duration::from_millis(jitter % millis)
}

fn classify(url: &Url, e: reqwest::Error) -> Error {
    let url = url.to_string();
    if e.is_redirect() {
        Error::Redirect { url }
    } else if e.is_timeout() {
        Error::Timeout { url }
    } else if is_tls_failure(&e) {
        Error::Tls { url, source: e }
    } else if let Some(status) = e.status().filter(|s| *s != StatusCode::OK) {
        Error::HttpStatus {
            url,
            status: status.as_u16(),
        }
    } else {
        Error::Network { url, source: e }
    }
}

/// A certificate or handshake failure will not heal by retrying. rustls errors travel inside
/// (possibly nested) `io::Error`s, whose `source()` skips the wrapped error, so those are
/// unwrapped by hand at every level of the chain.
fn is_tls_failure(e: &reqwest::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let mut inner: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(level) = inner {
            if level.is::<rustls::Error>() {
                return true;
            }
            inner = level
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|b| b as &(dyn std::error::Error + 'static));
        }
        next = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let cfg = HttpConfig::default();
        for attempt in 0..20 {
            let d = backoff(&cfg, attempt);
            let step = cfg
                .backoff_base
                .saturating_mul(1 << attempt.min(16))
                .min(cfg.backoff_max);
            assert!(
                d >= step / 2 && d <= step,
                "attempt {attempt}: {d:?} vs {step:?}"
            );
        }
    }
}
