//! What a registry that answers 401 wants (its `WWW-Authenticate` challenge): HTTP Basic with
//! the configured credentials, or a bearer token from its token service (as Docker Hub and
//! most registries do), asked for with those credentials if any, anonymously otherwise.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{denied, unreachable, Reference, RegistryError};

/// A registry account. Never printed: `Debug` shows the user name only.
#[derive(Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"********")
            .finish()
    }
}

/// How a request is to be authenticated.
pub(crate) enum Authorization {
    Basic(Credentials),
    Bearer(String),
}

impl Authorization {
    pub(crate) fn apply(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Authorization::Basic(c) => request.basic_auth(&c.username, Some(&c.password)),
            Authorization::Bearer(token) => request.bearer_auth(token),
        }
    }
}

/// A challenge read: its scheme (lower case) and parameters.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Challenge {
    pub scheme: String,
    pub params: BTreeMap<String, String>,
}

/// Reads `Bearer realm="https://auth/token",service="reg",scope="repository:a:pull"`.
pub(crate) fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    if scheme.is_empty() {
        return None;
    }
    let mut params = BTreeMap::new();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let after = after.trim_start();
        let (value, tail) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"')?;
                (&quoted[..end], &quoted[end + 1..])
            }
            None => after.split_once(',').map_or((after, ""), |(v, t)| (v, t)),
        };
        params.insert(key.trim().to_ascii_lowercase(), value.to_string());
        rest = tail.trim_start().trim_start_matches(',').trim_start();
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

#[derive(Deserialize)]
struct TokenAnswer {
    token: Option<String>,
    access_token: Option<String>,
}

/// The authorization that answers `challenge` for pulling `reference`.
pub(crate) async fn answer(
    http: &reqwest::Client,
    challenge: &str,
    reference: &Reference,
    credentials: Option<&Credentials>,
) -> Result<Authorization, RegistryError> {
    let Some(c) = parse_challenge(challenge) else {
        return Err(denied(
            reference,
            format!("it asks for credentials in a way this client does not read ({challenge:?})"),
        ));
    };
    match c.scheme.as_str() {
        "basic" => match credentials {
            Some(credentials) => Ok(Authorization::Basic(credentials.clone())),
            None => Err(denied(
                reference,
                "it wants credentials; none are configured".into(),
            )),
        },
        "bearer" => {
            let realm = c.params.get("realm").ok_or_else(|| {
                denied(
                    reference,
                    "its bearer challenge names no token service (realm)".into(),
                )
            })?;
            let scope = c
                .params
                .get("scope")
                .cloned()
                .unwrap_or_else(|| format!("repository:{}:pull", reference.repository()));
            let mut url = reqwest::Url::parse(realm).map_err(|e| {
                denied(
                    reference,
                    format!("its token service {realm:?} is not a URL: {e}"),
                )
            })?;
            url.query_pairs_mut().append_pair("scope", &scope);
            if let Some(service) = c.params.get("service") {
                url.query_pairs_mut().append_pair("service", service);
            }
            let mut request = http.get(url);
            if let Some(c) = credentials {
                request = request.basic_auth(&c.username, Some(&c.password));
            }
            let response = request
                .send()
                .await
                .map_err(|e| unreachable(reference, &e))?;
            if !response.status().is_success() {
                return Err(denied(
                    reference,
                    format!("its token service answered {}", response.status()),
                ));
            }
            let answer: TokenAnswer =
                response.json().await.map_err(|e| RegistryError::Protocol {
                    registry: reference.registry().into(),
                    what: format!("a token that does not read: {e}"),
                })?;
            answer
                .token
                .or(answer.access_token)
                .map(Authorization::Bearer)
                .ok_or_else(|| RegistryError::Protocol {
                    registry: reference.registry().into(),
                    what: "a token answer without a token".into(),
                })
        }
        other => Err(denied(
            reference,
            format!("it asks for {other} authentication, which this client does not speak"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_read_with_their_parameters() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.params["realm"], "https://auth.docker.io/token");
        assert_eq!(c.params["service"], "registry.docker.io");
        assert_eq!(c.params["scope"], "repository:library/busybox:pull");
        let basic = parse_challenge(r#"Basic realm="Registry Realm""#).unwrap();
        assert_eq!(basic.scheme, "basic");
        assert_eq!(basic.params["realm"], "Registry Realm");
        let unquoted = parse_challenge("Bearer realm=https://a/t, service=x").unwrap();
        assert_eq!(unquoted.params["service"], "x");
        assert_eq!(parse_challenge(""), None);
        assert_eq!(parse_challenge(r#"Bearer realm="open"#), None);
    }

    #[test]
    fn a_password_is_never_printed() {
        let c = Credentials {
            username: "robot".into(),
            password: "s3cret".into(),
        };
        let shown = format!("{c:?}");
        assert!(
            shown.contains("robot") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
