//! The AWS instance metadata source against a stand-in IMDSv2 on loopback (no real IMDS can run
//! here): it answers the documented requests with the documented shapes, and refuses requests
//! without the session token, as IMDSv2 does.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const TOKEN: &str = "AQAEAFk0XXXXexampleSessionToken==";

/// Serves IMDSv2 for one instance: tag `corral-group` (if given) and the user data.
async fn stand_in(group_tag: Option<&'static str>, user_data: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                let mut request_line = String::new();
                reader.read_line(&mut request_line).await.unwrap();
                let mut has_token = false;
                let mut ttl = false;
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).await.unwrap();
                    let l = line.to_ascii_lowercase();
                    has_token |= l.starts_with("x-aws-ec2-metadata-token:") && line.contains(TOKEN);
                    ttl |= l.starts_with("x-aws-ec2-metadata-token-ttl-seconds:");
                    if let Some(v) = l.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" || line.is_empty() {
                        break;
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).await.unwrap();
                let parts: Vec<&str> = request_line.split_whitespace().collect();
                let (status, text) = match (parts[0], parts[1]) {
                    ("PUT", "/latest/api/token") if ttl => ("200 OK", TOKEN.to_string()),
                    (_, _) if !has_token => ("401 Unauthorized", String::new()),
                    ("GET", "/latest/meta-data/tags/instance/corral-group") => match group_tag {
                        Some(g) => ("200 OK", g.to_string()),
                        None => ("404 Not Found", String::new()),
                    },
                    ("GET", "/latest/user-data") => ("200 OK", user_data.to_string()),
                    _ => ("404 Not Found", String::new()),
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
                reader
                    .into_inner()
                    .write_all(reply.as_bytes())
                    .await
                    .unwrap();
            });
        }
    });
    endpoint
}

#[tokio::test]
async fn the_group_comes_from_the_instance_tag_and_manager_and_token_from_user_data() {
    let endpoint = stand_in(
        Some("gpu-a100"),
        "#!/bin/sh\nexport CORRAL_SERVER=http://10.0.0.5:8470\nCORRAL_TOKEN='corral_abc'\nCORRAL_AGENT_ID=gpu-a100-0a1b2c3d4e\n",
    )
    .await;
    let found = corral_agent::metadata::from_imds(&endpoint).await.unwrap();
    assert_eq!(found.group.as_deref(), Some("gpu-a100"));
    assert_eq!(found.manager.as_deref(), Some("http://10.0.0.5:8470"));
    assert_eq!(found.token.as_deref(), Some("corral_abc"));
    assert_eq!(found.id.as_deref(), Some("gpu-a100-0a1b2c3d4e"));
}

#[tokio::test]
async fn without_the_tag_the_user_data_names_the_group() {
    let endpoint = stand_in(None, "CORRAL_AGENT_GROUP=cpu\n").await;
    let found = corral_agent::metadata::from_imds(&endpoint).await.unwrap();
    assert_eq!(found.group.as_deref(), Some("cpu"));
    assert_eq!(found.token, None);
}

#[tokio::test]
async fn no_metadata_service_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = corral_agent::metadata::from_imds(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no session token"), "{err}");
}
