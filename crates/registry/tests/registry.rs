//! Digests from a real registry: Debian's `docker-registry` (the distribution registry), started
//! by each test on a free loopback port with a store of its own. Images are pushed with the
//! registry's own HTTP API (blobs, then a manifest), so each version's digest is known: the
//! SHA-256 of the manifest as sent. With the registry's htpasswd auth, a client needs the
//! credentials (HTTP Basic); with its `silly` auth (the distribution's stand-in for a token
//! service: it answers with a real bearer challenge and takes any bearer token), the client
//! fetches a token from the realm the challenge names, here a one-route server of the test's.

use corral_registry::{Credentials, Digest, Reference, Registries, RegistryError};
use serde_json::json;
use sha2::{Digest as _, Sha256};

struct Registry {
    process: corral_testkit::Registry,
    /// How the test's own pushes authenticate.
    push_as: Option<Auth>,
}

#[derive(Clone)]
enum Auth {
    Basic(String, String),
    Bearer(String),
}

impl Auth {
    fn apply(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Auth::Basic(u, p) => r.basic_auth(u, Some(p)),
            Auth::Bearer(t) => r.bearer_auth(t),
        }
    }
}

impl Registry {
    /// Starts one, or `None` after the skip policy's message when the package is missing.
    async fn start() -> Option<Registry> {
        Registry::start_with(|_| String::new(), None).await
    }

    /// [`Registry::start`] with an `auth` section (YAML, made with the registry's directory),
    /// pushing as `push_as`.
    async fn start_with(
        auth: impl FnOnce(&std::path::Path) -> String,
        push_as: Option<Auth>,
    ) -> Option<Registry> {
        corral_api::tls::install_crypto_provider();
        let process = corral_testkit::Registry::start(auth)?;
        Some(Registry { process, push_as })
    }

    fn authed(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.push_as {
            Some(auth) => auth.apply(r),
            None => r,
        }
    }

    fn url(&self) -> String {
        self.process.url()
    }

    /// Uploads a blob; its digest and size.
    async fn blob(&self, http: &reqwest::Client, repository: &str, data: &[u8]) -> (String, usize) {
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(data)));
        let started = self
            .authed(http.post(format!("{}/v2/{repository}/blobs/uploads/", self.url())))
            .send()
            .await
            .unwrap();
        assert_eq!(started.status(), 202, "{:?}", started.text().await);
        let location = started.headers()["location"].to_str().unwrap().to_string();
        let location = if location.starts_with('/') {
            format!("{}{location}", self.url())
        } else {
            location
        };
        let separator = if location.contains('?') { '&' } else { '?' };
        let put = self
            .authed(http.put(format!("{location}{separator}digest={digest}")))
            .header("content-type", "application/octet-stream")
            .body(data.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 201, "{:?}", put.text().await);
        (digest, data.len())
    }

    /// Pushes an image whose only layer is `layer` as `repository:tag`; its manifest's digest.
    async fn push(&self, repository: &str, tag: &str, layer: &[u8]) -> Digest {
        let http = reqwest::Client::new();
        let config = json!({"architecture": "amd64", "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": []}});
        let (config_digest, config_size) = self
            .blob(&http, repository, config.to_string().as_bytes())
            .await;
        let (layer_digest, layer_size) = self.blob(&http, repository, layer).await;
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest, "size": layer_size}],
        })
        .to_string();
        let put = self
            .authed(http.put(format!("{}/v2/{repository}/manifests/{tag}", self.url())))
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(manifest.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 201, "{:?}", put.text().await);
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(manifest.as_bytes()))
        )
        .parse()
        .unwrap()
    }
}

fn registries() -> Registries {
    Registries::new(reqwest::Client::new(), Vec::new())
}

#[tokio::test]
async fn a_tag_names_the_digest_of_its_latest_push() {
    let Some(registry) = Registry::start().await else {
        return;
    };
    let r = registries();
    let tiny: Reference = format!("127.0.0.1:{}/team/tiny:latest", registry.process.port)
        .parse()
        .unwrap();
    assert_eq!(r.base_url(&tiny), format!("{}/v2/", registry.url()));

    let v1 = registry.push("team/tiny", "latest", b"layer of v1").await;
    assert_eq!(r.digest(&tiny, None).await.unwrap(), v1);
    // Pushed again under the same tag: the tag names the new digest.
    let v2 = registry.push("team/tiny", "latest", b"layer of v2").await;
    assert_ne!(v1, v2);
    assert_eq!(r.digest(&tiny, None).await.unwrap(), v2);
    // Another tag keeps its own.
    let kept = registry.push("team/tiny", "stable", b"layer of v1").await;
    let stable: Reference = format!("127.0.0.1:{}/team/tiny:stable", registry.process.port)
        .parse()
        .unwrap();
    assert_eq!(r.digest(&stable, None).await.unwrap(), kept);
    // A pinned reference is its own digest, whatever the tag says now.
    assert_eq!(r.digest(&tiny.pinned(v1.clone()), None).await.unwrap(), v1);
}

#[tokio::test]
async fn a_missing_tag_and_a_registry_that_is_gone_say_so() {
    let Some(registry) = Registry::start().await else {
        return;
    };
    let r = registries();
    let port = registry.process.port;
    registry.push("tiny", "v1", b"layer").await;
    let missing: Reference = format!("127.0.0.1:{port}/tiny:v9").parse().unwrap();
    let e = r.digest(&missing, None).await.unwrap_err();
    assert!(matches!(e, RegistryError::NotFound { .. }), "{e}");
    assert!(e.to_string().contains("has no tiny:v9"), "{e}");
    let unknown: Reference = format!("127.0.0.1:{port}/nothing:v1").parse().unwrap();
    assert!(matches!(
        r.digest(&unknown, None).await,
        Err(RegistryError::NotFound { .. })
    ));
    drop(registry);
    let gone = r.digest(&missing, None).await.unwrap_err();
    assert!(matches!(gone, RegistryError::Unreachable { .. }), "{gone}");
    assert!(
        gone.to_string().contains(&format!("127.0.0.1:{port}")),
        "{gone}"
    );
}

#[tokio::test]
async fn a_registry_with_htpasswd_takes_the_configured_credentials_only() {
    let robot = Auth::Basic("robot".into(), "s3cret".into());
    corral_api::tls::install_crypto_provider();
    let Some(process) = corral_testkit::Registry::start_with_user("robot", "s3cret") else {
        return;
    };
    let registry = Registry {
        process,
        push_as: Some(robot),
    };
    let pushed = registry.push("private/app", "1.0", b"layer").await;
    let app: Reference = format!("127.0.0.1:{}/private/app:1.0", registry.process.port)
        .parse()
        .unwrap();
    let r = registries();
    let good = Credentials {
        username: "robot".into(),
        password: "s3cret".into(),
    };
    assert_eq!(r.digest(&app, Some(&good)).await.unwrap(), pushed);
    let none = r.digest(&app, None).await.unwrap_err();
    assert!(none.to_string().contains("none are configured"), "{none}");
    let wrong = Credentials {
        password: "guess".into(),
        ..good
    };
    let refused = r.digest(&app, Some(&wrong)).await.unwrap_err();
    assert!(
        matches!(refused, RegistryError::Denied { .. })
            && refused.to_string().contains("\"robot\" were refused"),
        "{refused}"
    );
}

/// Answers every request with a token, once per request; the scopes it was asked for.
async fn token_service() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let realm = format!("http://{}/token", listener.local_addr().unwrap());
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = vec![0; 4096];
            let n = stream.read(&mut request).await.unwrap_or(0);
            let line = String::from_utf8_lossy(&request[..n])
                .lines()
                .next()
                .unwrap_or_default()
                .to_string();
            seen.lock().unwrap().push(line);
            let body = r#"{"token": "a-token"}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    (realm, asked)
}

#[tokio::test]
async fn a_bearer_challenge_is_answered_with_a_token_from_its_realm() {
    let (realm, asked) = token_service().await;
    let silly = |_: &std::path::Path| {
        format!("auth:\n  silly:\n    realm: {realm}\n    service: corral-test\n")
    };
    let any = Auth::Bearer("pusher".into());
    let Some(registry) = Registry::start_with(silly, Some(any)).await else {
        return;
    };
    let pushed = registry.push("team/tiny", "v1", b"layer").await;
    let tiny: Reference = format!("127.0.0.1:{}/team/tiny:v1", registry.process.port)
        .parse()
        .unwrap();
    assert_eq!(registries().digest(&tiny, None).await.unwrap(), pushed);
    let asked = asked.lock().unwrap().clone();
    assert!(!asked.is_empty(), "no token was asked for");
    assert!(
        asked.iter().all(|line| line.starts_with("GET /token?")
            && line.contains("scope=repository%3Ateam%2Ftiny%3Apull")
            && line.contains("service=corral-test")),
        "{asked:?}"
    );
}
