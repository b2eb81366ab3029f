//! Where an agent learns its group (and, on a cloud, its manager and bootstrap token) when no
//! flag says: the pod's labels on Kubernetes (downward API file), the instance's tags and user
//! data on AWS (IMDSv2). Each source is asked only when the operator names it, so an agent never
//! probes a metadata address it was not told about.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The label or tag naming the group.
pub const GROUP_LABEL: &str = "corral.io/group";
/// EC2 tag keys cannot hold '/' in instance metadata: the tag is `corral-group`.
pub const GROUP_TAG: &str = "corral-group";

/// What a metadata source says; empty fields were not found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    pub group: Option<String>,
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

/// Kubernetes: the downward API's labels file (`key="value"` lines), label `corral.io/group`.
pub fn from_pod_labels(path: &Path) -> Result<Found, MetadataError> {
    let text = std::fs::read_to_string(path).map_err(|source| MetadataError::File {
        path: path.display().to_string(),
        source,
    })?;
    let labels: BTreeMap<&str, String> = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim().trim_matches('"').replace("\\\"", "\"")))
        .collect();
    Ok(Found {
        group: labels.get(GROUP_LABEL).cloned(),
        ..Found::default()
    })
}

/// AWS: IMDSv2 at `endpoint` (normally `http://169.254.169.254`): the instance tag
/// `corral-group` (instance tags in metadata must be enabled), and `CORRAL_SERVER=`,
/// `CORRAL_TOKEN=`, `CORRAL_AGENT_GROUP=` lines of the user data a provider wrote.
pub async fn from_imds(endpoint: &str) -> Result<Found, MetadataError> {
    let endpoint = endpoint.trim_end_matches('/');
    let fail = |message: String| MetadataError::Imds {
        endpoint: endpoint.to_string(),
        message,
    };
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
    let get = |path: &'static str| {
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
    let mut found = Found {
        group: get("/latest/meta-data/tags/instance/corral-group")
            .await
            .map_err(fail)?
            .map(|g| g.trim().to_string()),
        ..Found::default()
    };
    if let Some(user_data) = get("/latest/user-data").await.map_err(fail)? {
        for line in user_data.lines() {
            let Some((k, v)) = line.trim().trim_start_matches("export ").split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
            match k.trim() {
                "CORRAL_SERVER" => found.manager = Some(v),
                "CORRAL_TOKEN" => found.token = Some(v),
                "CORRAL_AGENT_GROUP" if found.group.is_none() => found.group = Some(v),
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
    fn reads_the_group_from_downward_api_labels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("labels");
        // The downward API's format, as the kubelet writes it.
        std::fs::write(
            &path,
            "app=\"trainer\"\ncorral.io/group=\"gpu-a100\"\npod-template-hash=\"5d8f\"\n",
        )
        .unwrap();
        assert_eq!(
            from_pod_labels(&path).unwrap().group.as_deref(),
            Some("gpu-a100")
        );
        std::fs::write(&path, "app=\"trainer\"\n").unwrap();
        assert_eq!(from_pod_labels(&path).unwrap().group, None);
        assert!(from_pod_labels(&dir.path().join("missing")).is_err());
    }
}
