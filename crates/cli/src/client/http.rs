//! The manager's REST API as the client sees it: requests, and errors turned into one line a
//! person can act on.

use std::time::Duration;

use anyhow::{bail, Result};
use corral_api::tls::CertificateProblem;
use corral_api::{Client, ClientError, Transport};
use serde_json::Value;

use super::config::Resolved;

/// A successful answer: the JSON exactly as sent (for `--output json`) and parsed (for tables).
pub struct Reply {
    pub text: String,
    pub value: Value,
}

/// The client commands' connection: corral-api's client, with a limit on each call and errors
/// that say which flag, variable or file setting would fix them.
#[derive(Clone)]
pub struct Api {
    client: Client,
    group: Option<String>,
}

impl Api {
    pub fn new(resolved: Resolved) -> Result<Api> {
        let client = Client::new(
            &resolved.server,
            &resolved.token,
            resolved.ca_file.as_deref(),
        )
        .map_err(advice)?
        .with_timeout(Duration::from_secs(60));
        Ok(Api {
            client,
            group: resolved.group,
        })
    }

    /// The group given, else the context's, else `dev` (what `corral dev` creates).
    pub fn group_or_default(&self, group: Option<String>) -> String {
        group
            .or_else(|| self.group.clone())
            .unwrap_or_else(|| "dev".into())
    }

    /// The manager's URL, as configured.
    pub fn server(&self) -> &str {
        self.client.server()
    }

    pub async fn get(&self, path: &[&str], query: &[(&str, Option<String>)]) -> Result<Reply> {
        reply(self.client.get(path, query).await)
    }

    pub async fn post(&self, path: &[&str], body: Option<&Value>) -> Result<Reply> {
        reply(self.client.post(path, body).await)
    }

    pub async fn put(&self, path: &[&str], body: &Value) -> Result<Reply> {
        reply(self.client.put(path, body).await)
    }

    pub async fn patch(&self, path: &[&str], body: &Value) -> Result<Reply> {
        reply(self.client.patch(path, body).await)
    }

    /// Any method, with a query and a JSON body.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &[&str],
        query: &[(&str, Option<String>)],
        body: Option<&Value>,
    ) -> Result<Reply> {
        reply(self.client.call(method, path, query, body).await)
    }

    pub async fn delete(&self, path: &[&str]) -> Result<Reply> {
        reply(self.client.delete(path).await)
    }

    /// A blocking read of a session: its next state once it differs from the one `etag` names
    /// (or at once without one), or `None` if nothing changed within `wait`.
    pub async fn get_changed(
        &self,
        path: &[&str],
        etag: Option<&str>,
        wait: Duration,
    ) -> Result<Option<(Reply, Option<String>)>> {
        let Some((answer, tag)) = self
            .client
            .get_changed::<Value, _>(path, etag, wait)
            .await
            .map_err(advice)?
        else {
            return Ok(None);
        };
        let value = answer.body().map_err(advice)?;
        let reply = Reply {
            text: answer.text,
            value,
        };
        Ok(Some((reply, tag)))
    }

    /// Uploads a file's bytes.
    pub async fn put_bytes(&self, path: &[&str], data: Vec<u8>) -> Result<()> {
        let url = self.client.url(path, &[]);
        self.client
            .send_bytes::<Value>(reqwest::Method::PUT, url, data)
            .await
            .map(drop)
            .map_err(advice)
    }

    /// Uploads a file's bytes, and reads the answer.
    pub async fn put_file(&self, path: &[&str], data: Vec<u8>) -> Result<Reply> {
        let url = self.client.url(path, &[]);
        reply(
            self.client
                .send_bytes::<Value>(reqwest::Method::PUT, url, data)
                .await,
        )
    }

    /// A WebSocket to `/api/v1/` plus `path` (`session exec`, `shell`, `port-forward`); a
    /// refusal before the upgrade is the usual error, kept typed (its status is [`refusal`]'s).
    pub async fn websocket(&self, path: &[&str]) -> Result<corral_api::websocket::WebSocket> {
        self.client.websocket(path, &[]).await.map_err(advice)
    }

    /// An answer that is bytes, not JSON (logs, output files).
    pub async fn get_bytes(
        &self,
        path: &[&str],
        query: &[(&str, Option<String>)],
    ) -> Result<Vec<u8>> {
        self.client.get_bytes(path, query).await.map_err(advice)
    }
}

fn reply(answer: Result<corral_api::Reply<Value>, ClientError>) -> Result<Reply> {
    let answer = answer.map_err(advice)?;
    let value = answer.body().map_err(advice)?;
    Ok(Reply {
        text: answer.text,
        value,
    })
}

/// A call that failed, with what the user can change to fix it; kept typed so that errors
/// under `--output json` carry the manager's status and code.
#[derive(Debug)]
pub struct CallError {
    pub error: ClientError,
    hint: &'static str,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.error, self.hint)
    }
}

impl std::error::Error for CallError {}

/// The client's error, with what the user can change to fix it.
pub fn advice(e: ClientError) -> anyhow::Error {
    let hint = match &e {
        ClientError::Transport {
            kind: Transport::Unreachable,
            ..
        } => " (is `corral server` running? --server, CORRAL_SERVER or the config file choose the URL)",
        ClientError::Transport {
            kind: Transport::Certificate(CertificateProblem::NotTrusted),
            ..
        } => " (or CORRAL_CA_FILE, or ca_file in the config file)",
        _ => "",
    };
    anyhow::Error::new(CallError { error: e, hint })
}

/// The status the manager refused a call with, if that is how it failed.
pub fn refusal(e: &anyhow::Error) -> Option<u16> {
    e.downcast_ref::<CallError>()?.error.status()
}

/// A typed body as the JSON value the calls take.
pub fn json(body: &impl serde::Serialize) -> Result<Value> {
    Ok(serde_json::to_value(body)?)
}

/// Deserializes a reply for a table; a shape we do not know is reported, not printed wrong.
pub fn parse<T: serde::de::DeserializeOwned>(reply: &Reply) -> Result<T> {
    match serde_json::from_value(reply.value.clone()) {
        Ok(v) => Ok(v),
        Err(e) => bail!("unexpected answer from the manager ({e}); --output json shows it as sent"),
    }
}
