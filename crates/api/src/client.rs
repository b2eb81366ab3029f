//! The one HTTP client of the manager's API, used by the CLI, the agent and the benchmarks:
//! the manager's URL and a token, `/api/v1/` paths whose segments are percent-encoded, answers
//! kept as sent (for `--output json`) and read as the typed bodies of this crate, and errors
//! that say what went wrong in words a person can act on.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::error::{ClientError, Transport};
use crate::tls;

/// Gives up on connecting after this long (a manager that is down answers at once; this is for
/// one that is unreachable).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Below the manager's idle timeout (60 s by default), so that a kept-alive connection is never
/// reused just as the manager closes it.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A manager's API, reached with one token.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// The URL as the user gave it, for messages.
    server: String,
    /// `server` + `/api/v1/`.
    base: Url,
    token: String,
    ca_file: Option<PathBuf>,
    /// Each request's limit, if any (a long-polling agent sets none).
    timeout: Option<Duration>,
}

/// A successful answer: the body as sent, read as `T` on demand, so that a body this client
/// cannot read can still be shown as it came.
#[derive(Debug, Clone)]
pub struct Reply<T> {
    /// The body exactly as the manager sent it.
    pub text: String,
    server: String,
    _body: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Reply<T> {
    /// The body as `T`; a shape this client does not know is an error, not a wrong value.
    pub fn body(&self) -> Result<T, ClientError> {
        let text = if self.text.trim().is_empty() {
            "null"
        } else {
            &self.text
        };
        serde_json::from_str(text).map_err(|e| ClientError::Unreadable {
            server: self.server.clone(),
            message: e.to_string(),
        })
    }
}

impl Client {
    /// A client of the manager at `server` (`http://` or `https://`; an `https://` manager's
    /// certificate is checked against the system's roots and `ca_file`'s certificates).
    pub fn new(server: &str, token: &str, ca_file: Option<&Path>) -> Result<Client, ClientError> {
        let server = server.trim_end_matches('/').to_string();
        let base = Url::parse(&format!("{server}/api/v1/"))
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| ClientError::NotAServer {
                server: server.clone(),
            })?;
        let http = tls::client_builder(base.scheme() == "https", ca_file)?
            .user_agent(concat!("corral/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build()
            .map_err(|e| ClientError::Tls(tls::TlsError::Settings(e.to_string())))?;
        Ok(Client {
            http,
            server,
            base,
            token: token.to_string(),
            ca_file: ca_file.map(Path::to_path_buf),
            timeout: None,
        })
    }

    /// The same client with a limit on each request's duration.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = Some(timeout);
        self
    }

    /// The same connection pool, another credential (an agent's own token after it joins).
    pub fn with_token(&self, token: &str) -> Client {
        Client {
            token: token.to_string(),
            ..self.clone()
        }
    }

    /// The manager's URL as given.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The CA file trusted besides the system's roots, if any.
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// `/api/v1/` plus `path`, each segment percent-encoded (names may hold `/`, `:` or `#`),
    /// plus the query pairs that have a value.
    pub fn url<S: AsRef<str>>(&self, path: &[S], query: &[(&str, Option<String>)]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("an http URL has a path")
            .pop_if_empty()
            .extend(path.iter().map(AsRef::as_ref));
        let pairs: Vec<_> = query
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v)))
            .collect();
        if !pairs.is_empty() {
            url.query_pairs_mut().extend_pairs(pairs);
        }
        url
    }

    pub async fn get<T: DeserializeOwned, S: AsRef<str>>(
        &self,
        path: &[S],
        query: &[(&str, Option<String>)],
    ) -> Result<Reply<T>, ClientError> {
        self.send(Method::GET, self.url(path, query), None::<&()>)
            .await
    }

    pub async fn post<T: DeserializeOwned, S: AsRef<str>>(
        &self,
        path: &[S],
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<Reply<T>, ClientError> {
        self.send(Method::POST, self.url(path, &[]), body).await
    }

    pub async fn put<T: DeserializeOwned, S: AsRef<str>>(
        &self,
        path: &[S],
        body: &(impl Serialize + ?Sized),
    ) -> Result<Reply<T>, ClientError> {
        self.send(Method::PUT, self.url(path, &[]), Some(body))
            .await
    }

    /// A JSON merge patch (RFC 7396): what `patch` names changes, `null` resets, the rest stays.
    pub async fn patch<T: DeserializeOwned, S: AsRef<str>>(
        &self,
        path: &[S],
        patch: &(impl Serialize + ?Sized),
    ) -> Result<Reply<T>, ClientError> {
        let body = serde_json::to_vec(patch).map_err(|e| ClientError::Unreadable {
            server: self.server.clone(),
            message: e.to_string(),
        })?;
        let request = self
            .request(Method::PATCH, self.url(path, &[]))
            .header("content-type", "application/merge-patch+json")
            .body(body);
        self.answer(request).await
    }

    pub async fn delete<T: DeserializeOwned, S: AsRef<str>>(
        &self,
        path: &[S],
    ) -> Result<Reply<T>, ClientError> {
        self.send(Method::DELETE, self.url(path, &[]), None::<&()>)
            .await
    }

    /// Any method with a query and a JSON body (a POST with options, a PATCH that is not a merge
    /// patch).
    pub async fn call<T: DeserializeOwned, S: AsRef<str>>(
        &self,
        method: Method,
        path: &[S],
        query: &[(&str, Option<String>)],
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<Reply<T>, ClientError> {
        self.send(method, self.url(path, query), body).await
    }

    /// Sends bytes (a file, a log chunk) and reads the JSON answer.
    pub async fn send_bytes<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        data: Vec<u8>,
    ) -> Result<Reply<T>, ClientError> {
        self.answer(self.request(method, url).body(data)).await
    }

    /// A blocking read of a resource with an ETag (a session): its new state and ETag once it
    /// differs from what `etag` names, or `None` if it still does after the manager waited up
    /// to `wait` for a change (304 Not Modified).
    pub async fn get_changed<T: DeserializeOwned, S: AsRef<str>>(
        &self,
        path: &[S],
        etag: Option<&str>,
        wait: Duration,
    ) -> Result<Option<(Reply<T>, Option<String>)>, ClientError> {
        let wait_ms = wait.as_millis().to_string();
        let url = self.url(path, &[("wait_ms", etag.map(|_| wait_ms))]);
        let mut request = self.request(Method::GET, url);
        if let Some(etag) = etag {
            request = request.header(reqwest::header::IF_NONE_MATCH, etag);
        }
        let response = request.send().await.map_err(|e| self.transport(&e))?;
        if response.status() == StatusCode::NOT_MODIFIED {
            return Ok(None);
        }
        let tag = response
            .headers()
            .get(reqwest::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let status = response.status();
        let text = response.text().await.map_err(|e| self.transport(&e))?;
        if !status.is_success() {
            return Err(self.refusal(status, &text));
        }
        let reply = Reply {
            text,
            server: self.server.clone(),
            _body: PhantomData,
        };
        Ok(Some((reply, tag)))
    }

    /// An answer that is bytes, not JSON (logs, input and output files).
    pub async fn get_bytes<S: AsRef<str>>(
        &self,
        path: &[S],
        query: &[(&str, Option<String>)],
    ) -> Result<Vec<u8>, ClientError> {
        let response = self
            .request(Method::GET, self.url(path, query))
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.transport(&e))?;
        if !status.is_success() {
            return Err(self.refusal(status, &String::from_utf8_lossy(&bytes)));
        }
        Ok(bytes.to_vec())
    }

    /// An answer too large to hold in memory (an agent build), read piece by piece once the
    /// manager said yes.
    pub async fn download<S: AsRef<str>>(&self, path: &[S]) -> Result<Download, ClientError> {
        let response = self
            .request(Method::GET, self.url(path, &[]))
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.map_err(|e| self.transport(&e))?;
            return Err(self.refusal(status, &text));
        }
        Ok(Download {
            response,
            client: self.clone(),
        })
    }

    fn request(&self, method: Method, url: Url) -> reqwest::RequestBuilder {
        let request = self.http.request(method, url).bearer_auth(&self.token);
        match self.timeout {
            Some(t) => request.timeout(t),
            None => request,
        }
    }

    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<Reply<T>, ClientError> {
        let mut request = self.request(method, url);
        if let Some(body) = body {
            request = request.json(body);
        }
        self.answer(request).await
    }

    async fn answer<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<Reply<T>, ClientError> {
        let response = request.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| self.transport(&e))?;
        if !status.is_success() {
            return Err(self.refusal(status, &text));
        }
        Ok(Reply {
            text,
            server: self.server.clone(),
            _body: PhantomData,
        })
    }

    fn transport(&self, e: &reqwest::Error) -> ClientError {
        let kind = if let Some(problem) = tls::certificate_problem(e) {
            Transport::Certificate(problem)
        } else if e.is_connect() {
            Transport::Unreachable
        } else if e.is_timeout() {
            Transport::Timeout
        } else {
            Transport::Other
        };
        ClientError::Transport {
            server: self.server.clone(),
            kind,
            cause: root_cause(e),
            ca_file: self.ca_file.clone(),
        }
    }

    /// `{"error": {"code", "message", "details"}}` is the manager's refusal; anything else (a
    /// proxy's page, an older manager) is reported with the status and the start of the body.
    pub(crate) fn refusal(&self, status: StatusCode, text: &str) -> ClientError {
        match serde_json::from_str::<crate::error::ErrorBody>(text) {
            Ok(body) => ClientError::Refused {
                server: self.server.clone(),
                status: status.as_u16(),
                code: body.error.code,
                message: body.error.message,
                details: body.error.details.unwrap_or(Value::Null),
            },
            Err(_) => ClientError::Unexpected {
                server: self.server.clone(),
                status: status.as_u16(),
                snippet: text.trim().chars().take(200).collect(),
            },
        }
    }
}

/// A download under way (see [`Client::download`]).
pub struct Download {
    response: reqwest::Response,
    client: Client,
}

impl Download {
    /// The next piece of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Vec<u8>>, ClientError> {
        match self.response.chunk().await {
            Ok(piece) => Ok(piece.map(|b| b.to_vec())),
            Err(e) => Err(self.client.transport(&e)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_encoded_one_by_one() {
        let c = Client::new("http://m:8470/", "t", None).unwrap();
        assert_eq!(
            c.url(&["sessions", "s1", "outputs", "dir", "x#y?.txt"], &[])
                .as_str(),
            "http://m:8470/api/v1/sessions/s1/outputs/dir/x%23y%3F.txt"
        );
        assert_eq!(
            c.url(
                &["images", "registry:5000/team/img:1"],
                &[("group", None), ("limit", Some("5".into()))]
            )
            .as_str(),
            "http://m:8470/api/v1/images/registry:5000%2Fteam%2Fimg:1?limit=5"
        );
    }

    #[test]
    fn a_server_that_is_not_an_http_url_is_refused_by_name() {
        for bad in ["m:8470", "ftp://m", "not a url"] {
            let err = Client::new(bad, "t", None).err().expect(bad);
            assert!(err.to_string().contains(bad), "{err}");
        }
    }
}
