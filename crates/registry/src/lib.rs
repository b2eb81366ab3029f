//! Container image registries through the distribution HTTP API (the OCI distribution
//! specification): an image reference read as Docker reads it, and the digest its tag names
//! now, asked with every manifest media type in `Accept` (asked without them, a registry
//! converts the manifest to an old schema and answers another digest). Registries that want
//! credentials get them: HTTP Basic, or a bearer token from the registry's token service.

mod auth;
mod reference;

pub use auth::Credentials;
pub use reference::{Digest, Reference, ReferenceError};

use reqwest::header::{ACCEPT, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};
use sha2::{Digest as _, Sha256};

/// Every manifest an image tag may name: an OCI index or Docker manifest list (several
/// platforms), or a single OCI or Docker image manifest.
pub const MANIFEST_TYPES: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// Why a registry did not say a digest.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No answer: the registry is down or unreachable (worth trying again later).
    #[error("registry {registry} did not answer: {cause}")]
    Unreachable { registry: String, cause: String },
    /// The registry wants credentials it was not given, or refused those it was.
    #[error("registry {registry} refused access to {repository}: {why}")]
    Denied {
        registry: String,
        repository: String,
        why: String,
    },
    /// The repository or tag is not there.
    #[error("registry {registry} has no {repository}:{tag}")]
    NotFound {
        registry: String,
        repository: String,
        tag: String,
    },
    /// An answer this client cannot read.
    #[error("registry {registry} answered {what}")]
    Protocol { registry: String, what: String },
}

/// Asks registries for digests, over one connection pool.
#[derive(Clone)]
pub struct Registries {
    http: reqwest::Client,
    /// Hosts reached over plain HTTP (as Docker's `insecure-registries`); loopback always is.
    plain_http: Vec<String>,
}

impl Registries {
    /// `http` is the client to use (its TLS settings are the caller's); `plain_http` the
    /// registries (`host:port`) served without TLS besides loopback ones.
    pub fn new(http: reqwest::Client, plain_http: Vec<String>) -> Registries {
        Registries { http, plain_http }
    }

    /// The registry's API root for `reference`: `https://HOST/v2/`, or `http://` for a
    /// loopback or listed host.
    pub fn base_url(&self, reference: &Reference) -> String {
        let host = reference.registry();
        let scheme = if reference.is_loopback() || self.plain_http.iter().any(|h| h == host) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{}/v2/", reference.api_host())
    }

    /// The digest `reference`'s tag names now (a reference pinned by digest is its own).
    pub async fn digest(
        &self,
        reference: &Reference,
        credentials: Option<&Credentials>,
    ) -> Result<Digest, RegistryError> {
        if let Some(pinned) = reference.digest() {
            return Ok(pinned.clone());
        }
        let url = format!(
            "{}{}/manifests/{}",
            self.base_url(reference),
            reference.repository(),
            reference.tag()
        );
        // HEAD first: most registries say the digest without sending the manifest.
        let head = self
            .send(Method::HEAD, &url, reference, credentials)
            .await?;
        if let Some(digest) = said_digest(&head) {
            return Ok(digest);
        }
        let get = self.send(Method::GET, &url, reference, credentials).await?;
        let said = said_digest(&get);
        let body = get.bytes().await.map_err(|e| unreachable(reference, &e))?;
        // Without the header, the digest is the manifest's as sent.
        Ok(said.unwrap_or_else(|| Digest::of_sha256(&Sha256::digest(&body))))
    }

    /// A manifest request, authenticated as the registry asks; an answer that is not 2xx is
    /// the error it means.
    async fn send(
        &self,
        method: Method,
        url: &str,
        reference: &Reference,
        credentials: Option<&Credentials>,
    ) -> Result<reqwest::Response, RegistryError> {
        let request = || {
            self.http
                .request(method.clone(), url)
                .header(ACCEPT, MANIFEST_TYPES)
        };
        let mut response = request()
            .send()
            .await
            .map_err(|e| unreachable(reference, &e))?;
        if response.status() == StatusCode::UNAUTHORIZED {
            let challenge = response
                .headers()
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let authorization =
                auth::answer(&self.http, &challenge, reference, credentials).await?;
            response = authorization
                .apply(request())
                .send()
                .await
                .map_err(|e| unreachable(reference, &e))?;
        }
        match response.status() {
            s if s.is_success() => Ok(response),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(denied(
                reference,
                match credentials {
                    Some(c) => format!("the credentials of {:?} were refused", c.username),
                    None => "it wants credentials; none are configured".into(),
                },
            )),
            StatusCode::NOT_FOUND => Err(RegistryError::NotFound {
                registry: reference.registry().into(),
                repository: reference.repository().into(),
                tag: reference.tag().into(),
            }),
            other => Err(RegistryError::Protocol {
                registry: reference.registry().into(),
                what: format!("{other} to {method} {url}"),
            }),
        }
    }
}

/// The `Docker-Content-Digest` header, when it is a digest.
fn said_digest(response: &reqwest::Response) -> Option<Digest> {
    response
        .headers()
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

fn unreachable(reference: &Reference, e: &reqwest::Error) -> RegistryError {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    RegistryError::Unreachable {
        registry: reference.registry().into(),
        cause: cause.to_string(),
    }
}

fn denied(reference: &Reference, why: String) -> RegistryError {
    RegistryError::Denied {
        registry: reference.registry().into(),
        repository: reference.repository().into(),
        why,
    }
}
