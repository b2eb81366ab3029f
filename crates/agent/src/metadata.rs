//! Where an agent learns its group (and, on a cloud, its manager and bootstrap token) when no
//! flag says: the pod's labels on Kubernetes (downward API file), the instance's tags and user
//! data on AWS (IMDSv2). Each source is asked only when the operator names it, so an agent never
//! probes a metadata address it was not told about.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use corral_api::identity::*;

/// What a metadata source says; empty fields were not found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    pub group: Option<String>,
    /// The agent id a provider launched this instance as.
    pub id: Option<String>,
    pub manager: Option<String>,
    pub token: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("reading {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    #[error("instance metadata at {endpoint}: {message}")]
    Imds { endpoint: String, message: String },
}

/// Kubernetes: the downward API's labels file (`key="value"` lines): the group (label
/// `corral.io/group`) and agent id (`corral.io/agent`); and, when the annotations file exists,
/// the bootstrap token and manager a StatefulSet's pod is annotated with
/// (`corral.io/bootstrap-token`, `corral.io/server`). Pods the provider creates itself get all
/// of these as environment variables instead.
pub fn from_pod_files(labels: &Path, annotations: &Path) -> Result<Found, MetadataError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| MetadataError::File {
            path: path.display().to_string(),
            source,
        })
    };
    let labels = downward_api_pairs(&read(labels)?);
    let annotations = match read(annotations) {
        Ok(text) => downward_api_pairs(&text),
        Err(_) => BTreeMap::new(),
    };
    Ok(Found {
        group: labels.get(GROUP_LABEL).cloned(),
        id: labels.get(AGENT_LABEL).cloned(),
        token: annotations.get(BOOTSTRAP_ANNOTATION).cloned(),
        manager: annotations.get(SERVER_ANNOTATION).cloned(),
    })
}

/// A downward API file's `key="value"` lines.
fn downward_api_pairs(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| {
            let v = v.trim().trim_matches('"').replace("\\\"", "\"");
            (k.trim().to_string(), v)
        })
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

/// AWS: IMDSv2 at `endpoint` (normally `http://169.254.169.254`): the instance tag
/// `corral-group`, `corral-agent`, `corral-bootstrap-token` and `corral-server` (instance tags
/// in metadata must be enabled), and `CORRAL_SERVER=`, `CORRAL_TOKEN=`, `CORRAL_AGENT_GROUP=`, `CORRAL_AGENT_ID=`
/// lines of the user data a provider wrote.
pub async fn from_imds(endpoint: &str) -> Result<Found, MetadataError> {
    let endpoint = endpoint.trim_end_matches('/');
    let fail = |message: String| MetadataError::Imds {
        endpoint: endpoint.to_string(),
        message,
    };
    corral_api::tls::install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let token = http
        .put(format!("{endpoint}/latest/api/token"))
        .header("X-aws-ec2-metadata-token-ttl-seconds", "60")
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| fail(format!("no session token: {e}")))?
        .text()
        .await
        .map_err(|e| fail(e.to_string()))?;
    let get = |path: String| {
        let (http, token) = (http.clone(), token.clone());
        async move {
            let resp = http
                .get(format!("{endpoint}{path}"))
                .header("X-aws-ec2-metadata-token", token)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            match resp.status().as_u16() {
                404 => Ok(None),
                200 => resp.text().await.map(Some).map_err(|e| e.to_string()),
                other => Err(format!("{path}: HTTP {other}")),
            }
        }
    };
    let tag = |key: &'static str| {
        let get = &get;
        async move {
            get(format!("/latest/meta-data/tags/instance/{key}"))
                .await
                .map(|v| v.map(|v| v.trim().to_string()).filter(|v| !v.is_empty()))
        }
    };
    // Tags first: an Auto Scaling group's instances get their agent id and token as tags
    // (their launch template's user data is the same for all); user data fills in the rest.
    let mut found = Found {
        group: tag(GROUP_TAG).await.map_err(fail)?,
        id: tag(AGENT_TAG).await.map_err(fail)?,
        token: tag(TOKEN_TAG).await.map_err(fail)?,
        manager: tag(SERVER_TAG).await.map_err(fail)?,
    };
    if let Some(user_data) = get("/latest/user-data".into()).await.map_err(fail)? {
        for line in user_data.lines() {
            let Some((k, v)) = line.trim().trim_start_matches("export ").split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
            match k.trim() {
                ENV_SERVER if found.manager.is_none() => found.manager = Some(v),
                ENV_TOKEN if found.token.is_none() => found.token = Some(v),
                ENV_GROUP if found.group.is_none() => found.group = Some(v),
                ENV_ID if found.id.is_none() => found.id = Some(v),
                _ => {}
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_group_agent_and_bootstrap_from_downward_api_files() {
        let dir = tempfile::tempdir().unwrap();
        let (labels, annotations) = (dir.path().join("labels"), dir.path().join("annotations"));
        // The downward API's format, as the kubelet writes it.
        std::fs::write(
            &labels,
            "app=\"trainer\"\ncorral.io/group=\"gpu-a100\"\npod-template-hash=\"5d8f\"\n",
        )
        .unwrap();
        let found = from_pod_files(&labels, &annotations).unwrap();
        assert_eq!(found.group.as_deref(), Some("gpu-a100"));
        assert_eq!(
            (found.id, found.token),
            (None, None),
            "no annotations file: no token"
        );

        // A StatefulSet's pod, labelled and annotated by the provider after it started.
        std::fs::write(
            &labels,
            "corral.io/agent=\"gpu-a100-0a1b2c3d4e\"\ncorral.io/group=\"gpu-a100\"\n",
        )
        .unwrap();
        std::fs::write(
            &annotations,
            "corral.io/bootstrap-token=\"corral_abc\"\ncorral.io/server=\"http://10.0.0.5:8470\"\n",
        )
        .unwrap();
        let found = from_pod_files(&labels, &annotations).unwrap();
        assert_eq!(found.id.as_deref(), Some("gpu-a100-0a1b2c3d4e"));
        assert_eq!(found.token.as_deref(), Some("corral_abc"));
        assert_eq!(found.manager.as_deref(), Some("http://10.0.0.5:8470"));

        std::fs::write(&labels, "app=\"trainer\"\n").unwrap();
        assert_eq!(from_pod_files(&labels, &annotations).unwrap().group, None);
        assert!(from_pod_files(&dir.path().join("missing"), &annotations).is_err());
    }
}
