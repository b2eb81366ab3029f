//! How the agent takes the manager's answers to its join, against a stand-in manager on
//! loopback: a 503 (a pilot whose job's submission the manager has not recorded yet) is tried
//! again; a refusal (403) ends the agent with it. The join names the pilot's batch job.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// Answers each `POST /api/v1/agents/join` with the next status of `answers`; keeps the bodies.
async fn stand_in(answers: Vec<u16>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let joins = Arc::new(Mutex::new(Vec::new()));
    let seen = joins.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            reader.read_line(&mut request_line).await.unwrap();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).await.unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).await.unwrap();
            let (status, code) = if request_line.starts_with("POST /api/v1/agents/join ") {
                let mut joins = seen.lock().unwrap();
                joins.push(String::from_utf8_lossy(&body).into_owned());
                let status = answers.get(joins.len() - 1).copied().unwrap_or(403);
                (
                    status,
                    if status == 503 {
                        "not_ready"
                    } else {
                        "forbidden"
                    },
                )
            } else {
                (404, "not_found")
            };
            let text =
                format!(r#"{{"error": {{"code": "{code}", "message": "answer {status}"}}}}"#);
            let reply = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{text}",
                text.len()
            );
            reader
                .into_inner()
                .write_all(reply.as_bytes())
                .await
                .unwrap();
        }
    });
    (url, joins)
}

#[tokio::test]
async fn a_join_answered_503_is_tried_again_and_a_refusal_ends_the_agent() {
    let (url, joins) = stand_in(vec![503, 503, 403]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = corral_agent::Config {
        manager: url,
        token: "bootstrap".into(),
        key: None,
        id: "hpc-0123456789".into(),
        group: "hpc".into(),
        capacity: Some("cpu=1".parse().unwrap()),
        labels: Default::default(),
        work_root: dir.path().join("work"),
        nvidia_smi: "nvidia-smi".into(),
        stop_grace: Duration::from_secs(1),
        ca_file: None,
        drain_after: None,
        self_update: None,
        resume_token: None,
        batch_job: Some("812".into()),
    };
    let runtime =
        corral_runtime::Runtime::Process(corral_runtime::ProcessRuntime::new(Default::default()));
    let ended = tokio::time::timeout(
        Duration::from_secs(30),
        corral_agent::run(config, runtime, std::future::pending()),
    )
    .await
    .expect("the agent ends once refused");
    let e = ended.unwrap_err().to_string();
    assert!(e.contains("answer 403"), "{e}");
    let joins = joins.lock().unwrap();
    assert_eq!(joins.len(), 3, "{joins:?}");
    for join in joins.iter() {
        let body: serde_json::Value = serde_json::from_str(join).unwrap();
        assert_eq!(body["batch_job"], "812", "{join}");
    }
}
