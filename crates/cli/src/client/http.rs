//! The manager's REST API as the client sees it: requests, and errors turned into one line a
//! person can act on.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

use super::config::Resolved;

/// A successful answer: the JSON exactly as sent (for `--output json`) and parsed (for tables).
pub struct Reply {
    pub text: String,
    pub value: Value,
}

pub struct Api {
    client: reqwest::Client,
    server: String,
    base: Url,
    token: String,
}

impl Api {
    pub fn new(resolved: Resolved) -> Result<Api> {
        let base = Url::parse(&format!("{}/api/v1/", resolved.server))
            .with_context(|| format!("{:?} is not a server URL", resolved.server))?;
        let client = reqwest::Client::builder()
            .user_agent(concat!("corral/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .context("building the HTTP client")?;
        Ok(Api {
            client,
            server: resolved.server,
            base,
            token: resolved.token,
        })
    }

    /// `/api/v1/` plus `path`, each segment percent-encoded (names may hold `/` and `:`).
    pub fn url(&self, path: &[&str], query: &[(&str, Option<String>)]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("an http URL has a path")
            .pop_if_empty()
            .extend(path);
        let pairs: Vec<_> = query
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v)))
            .collect();
        if !pairs.is_empty() {
            url.query_pairs_mut().extend_pairs(pairs);
        }
        url
    }

    pub async fn get(&self, path: &[&str], query: &[(&str, Option<String>)]) -> Result<Reply> {
        self.send(Method::GET, self.url(path, query), None).await
    }

    pub async fn post(&self, path: &[&str], body: Option<&Value>) -> Result<Reply> {
        self.send(Method::POST, self.url(path, &[]), body).await
    }

    pub async fn put(&self, path: &[&str], body: &Value) -> Result<Reply> {
        self.send(Method::PUT, self.url(path, &[]), Some(body))
            .await
    }

    pub async fn delete(&self, path: &[&str]) -> Result<Reply> {
        self.send(Method::DELETE, self.url(path, &[]), None).await
    }

    /// Uploads a file's bytes.
    pub async fn put_bytes(&self, path: &[&str], data: Vec<u8>) -> Result<()> {
        let response = self
            .client
            .put(self.url(path, &[]))
            .bearer_auth(&self.token)
            .body(data)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return Err(self.api_error(status, &text));
        }
        Ok(())
    }

    /// An answer that is bytes, not JSON (logs, output files).
    pub async fn get_bytes(
        &self,
        path: &[&str],
        query: &[(&str, Option<String>)],
    ) -> Result<Vec<u8>> {
        let response = self
            .client
            .get(self.url(path, query))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(&e))?;
        if !status.is_success() {
            return Err(self.api_error(status, &String::from_utf8_lossy(&bytes)));
        }
        Ok(bytes.to_vec())
    }

    async fn send(&self, method: Method, url: Url, body: Option<&Value>) -> Result<Reply> {
        let mut request = self.client.request(method, url).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| self.transport_error(&e))?;
        if !status.is_success() {
            return Err(self.api_error(status, &text));
        }
        if text.trim().is_empty() {
            return Ok(Reply {
                text,
                value: Value::Null,
            });
        }
        let value = serde_json::from_str(&text).with_context(|| {
            format!(
                "the manager at {} answered with something other than JSON",
                self.server
            )
        })?;
        Ok(Reply { text, value })
    }

    fn transport_error(&self, e: &reqwest::Error) -> anyhow::Error {
        let cause = root_cause(e);
        if e.is_connect() {
            anyhow!(
                "cannot reach the manager at {}: {cause} (is `corral server` running? \
                 --server, CORRAL_SERVER or the config file choose the URL)",
                self.server
            )
        } else if e.is_timeout() {
            anyhow!("the manager at {} did not answer in time", self.server)
        } else {
            anyhow!("talking to the manager at {}: {cause}", self.server)
        }
    }

    /// `{"error": {"message"}}` becomes the message itself; anything else (a proxy's page, an
    /// older manager) names the server and the status.
    fn api_error(&self, status: StatusCode, text: &str) -> anyhow::Error {
        let parsed: Option<Value> = serde_json::from_str(text).ok();
        let message = parsed
            .as_ref()
            .and_then(|v| v.pointer("/error/message"))
            .and_then(Value::as_str);
        match message {
            Some(m) if status == StatusCode::UNAUTHORIZED => {
                anyhow!(
                    "{m} (the manager at {} did not accept the token)",
                    self.server
                )
            }
            Some(m) => anyhow!("{m}"),
            None => {
                let snippet: String = text.trim().chars().take(200).collect();
                anyhow!(
                    "the manager at {} answered {status}: {snippet}",
                    self.server
                )
            }
        }
    }
}

/// The innermost error: for a refused connection, "Connection refused (os error 111)" rather
/// than reqwest's "error sending request for url".
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Deserializes a reply for a table; a shape we do not know is reported, not printed wrong.
pub fn parse<T: serde::de::DeserializeOwned>(reply: &Reply) -> Result<T> {
    match serde_json::from_value(reply.value.clone()) {
        Ok(v) => Ok(v),
        Err(e) => bail!("unexpected answer from the manager ({e}); --output json shows it as sent"),
    }
}
