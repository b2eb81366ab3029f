//! A session's apps, as a user and a script reach them: an HTTP app served under
//! `/apps/SESSION/APP/` with its path whole and the manager's credentials taken off, an
//! upgrade carried both ways, a browser let in by a link's pass traded for a cookie of that
//! app alone, and everyone else kept out.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use crate::common;
use common::{browser_available, ok, python, run_browser_script, text, Cluster};
use serde_json::Value;

/// The app: answers every request with what it saw (path, the headers that matter, its prefix
/// variable) as JSON, and takes `Upgrade: echo` by echoing the raw bytes that follow.
const APP: &str = r#"
import http.server, json, os, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Upgrade") == "echo":
            self.send_response(101)
            self.send_header("Upgrade", "echo")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            while True:
                b = self.connection.recv(65536)
                if not b:
                    return
                self.connection.sendall(b)
        seen = {
            "path": self.path,
            "authorization": self.headers.get("Authorization"),
            "cookie": self.headers.get("Cookie"),
            "prefix": self.headers.get("X-Forwarded-Prefix"),
            "host": self.headers.get("Host"),
            "variable": os.environ.get("CORRAL_APP_WEB_PREFIX"),
        }
        body = json.dumps(seen).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

/// An answer read whole: its status, headers (lowercase names) and body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|_| panic!("{}: {}", self.status, self.body))
    }
}

/// `GET path` with `headers` to the manager, on a connection of its own.
fn get(c: &Cluster, path: &str, headers: &[(&str, &str)]) -> Answer {
    get_at(c.port, path, headers)
}

/// `GET path` with `headers` to a local `port`, on a connection of its own.
fn get_at(port: u16, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    tcp.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(tcp);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let Some((name, value)) = line.trim_end().split_once(": ") else {
            break;
        };
        headers.push((name.to_ascii_lowercase(), value.to_string()));
    }
    let mut body = String::new();
    reader.read_to_string(&mut body).unwrap();
    Answer {
        status,
        headers,
        body,
    }
}

/// Alice's session in `group` (which has an agent) serving [`APP`] as `web` (and a tcp app
/// `db`), once it answers; her token. It says no type: serving apps makes it interactive.
fn serving(c: &Cluster, group: &str) -> (String, String) {
    let alice = c.user_token("alice");
    let port = common::free_port();
    let web = format!("web={port}");
    let out = c.as_user(
        &alice,
        &[
            "session",
            "submit",
            "--group",
            group,
            "--app",
            &web,
            "--app",
            "db=tcp:5432",
            "--",
            "python3",
            "-c",
            APP,
            &port.to_string(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let bearer = format!("Bearer {alice}");
    c.until("the app to answer through the manager", || {
        let answer = get(
            c,
            &format!("/apps/{id}/web/"),
            &[("Authorization", &bearer)],
        );
        (answer.status == 200).then_some(())
    });
    (id, alice)
}

/// `GET .../echo` upgraded to the app's raw echo through the manager, once the answer's head is
/// read: the connection, or why not.
fn upgrade(c: &Cluster, id: &str, bearer: &str) -> Result<BufReader<TcpStream>, String> {
    let mut tcp = TcpStream::connect(("127.0.0.1", c.port)).map_err(|e| e.to_string())?;
    write!(
        tcp,
        "GET /apps/{id}/web/echo HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: Upgrade\r\n\
         Upgrade: echo\r\nAuthorization: {bearer}\r\n\r\n",
        c.port
    )
    .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(tcp);
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| e.to_string())?;
    if !line.starts_with("HTTP/1.1 101") {
        return Err(line);
    }
    while line != "\r\n" {
        line.clear();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
    }
    Ok(reader)
}

#[test]
fn an_http_app_is_served_under_its_path_without_the_managers_credentials() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "g"]));
    let _agent = c.agent("a1", "g", "cpu=2");
    let (id, alice) = serving(&c, "g");
    let bearer = format!("Bearer {alice}");

    let listed = ok(c.as_user(&alice, &["session", "apps", &id]));
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["NAME", "PROTOCOL", "PORT", "URL"], "{listed}");
    assert_eq!(rows[1], ["db", "tcp", "5432", "-"], "{listed}");
    assert_eq!(rows[2][..2], ["web", "http"], "{listed}");
    assert_eq!(
        rows[2][3],
        format!("{}/apps/{id}/web/", c.url()),
        "{listed}"
    );

    // `session port-forward` reaches an app by its name, on the app's port.
    let app_port: u16 = rows[2][2].parse().unwrap();
    let (forward, local) = c.port_forward(&alice, &id, "web", app_port);
    let answer = get_at(local, "/direct", &[]);
    assert_eq!(answer.json()["path"], "/direct");
    drop(forward);
    let out = c.as_user(&alice, &["session", "port-forward", &id, "nope"]);
    assert!(
        text(&out.stderr).contains("serves no app \"nope\" (its apps: db, web)"),
        "{}",
        text(&out.stderr)
    );

    // The path whole, the prefix told both ways, the manager's credentials off.
    let answer = get(
        &c,
        &format!("/apps/{id}/web/tree/x?a=1"),
        &[
            ("Authorization", &bearer),
            ("Cookie", "corral_ui=secret; keep=1"),
        ],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let seen = answer.json();
    assert_eq!(seen["path"], format!("/apps/{id}/web/tree/x?a=1"));
    assert_eq!(seen["authorization"], Value::Null);
    assert_eq!(seen["cookie"], "keep=1");
    assert_eq!(seen["prefix"], format!("/apps/{id}/web"));
    assert_eq!(seen["variable"], format!("/apps/{id}/web/"));
    assert_eq!(seen["host"], format!("127.0.0.1:{}", c.port));

    // Without the slash, sent to the app's path.
    let answer = get(&c, &format!("/apps/{id}/web?a=1"), &[]);
    assert_eq!(answer.status, 308);
    assert_eq!(
        answer.header("location"),
        Some(format!("/apps/{id}/web/?a=1").as_str())
    );

    // An upgrade, carried both ways.
    let mut reader = upgrade(&c, &id, &bearer).unwrap();
    let tcp = reader.get_ref().try_clone().unwrap();
    let payload: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let sender = {
        let mut tcp = tcp.try_clone().unwrap();
        let payload = payload.clone();
        std::thread::spawn(move || tcp.write_all(&payload).unwrap())
    };
    let mut back = vec![0u8; payload.len()];
    reader.read_exact(&mut back).unwrap();
    sender.join().unwrap();
    assert!(back == payload, "the upgraded connection's echo differs");

    // A tcp app is not served over HTTP; an unknown app says which there are.
    let answer = get(
        &c,
        &format!("/apps/{id}/db/"),
        &[("Authorization", &bearer)],
    );
    assert_eq!(answer.status, 409, "{}", answer.body);
    assert!(answer.body.contains("port-forward"), "{}", answer.body);
    let answer = get(
        &c,
        &format!("/apps/{id}/nope/"),
        &[("Authorization", &bearer)],
    );
    assert_eq!(answer.status, 404, "{}", answer.body);
    assert!(answer.body.contains("db, web"), "{}", answer.body);
}

#[test]
fn a_browser_gets_in_with_a_links_pass_and_nobody_else_does() {
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "g"]));
    let _agent = c.agent("a1", "g", "cpu=2");
    let (id, alice) = serving(&c, "g");
    let bob = c.user_token("bob");
    let path = format!("/apps/{id}/web/");

    // Nobody, and another user, are kept out; an admin's script gets in.
    assert_eq!(get(&c, &path, &[]).status, 401);
    let answer = get(&c, &path, &[("Authorization", &format!("Bearer {bob}"))]);
    assert_eq!(answer.status, 403, "{}", answer.body);
    let answer = get(
        &c,
        &path,
        &[("Authorization", &format!("Bearer {}", c.token))],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);

    // The owner's link: its pass traded for a cookie of this app's path, then the app.
    let listed: Value = serde_json::from_str(&ok(
        c.as_user(&alice, &["session", "apps", &id, "--login", "-o", "json"])
    ))
    .unwrap();
    let web = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "web")
        .unwrap();
    let url = web["url"].as_str().unwrap().to_string();
    let link = url.strip_prefix(&c.url()).unwrap();
    assert!(
        link.starts_with(&format!("{path}?corral_app_token=")),
        "{link}"
    );
    assert!(
        !link.contains(&alice),
        "the link carries a pass, never the token"
    );
    let answer = get(&c, link, &[]);
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(answer.header("location"), Some(path.as_str()));
    let cookie = answer.header("set-cookie").unwrap().to_string();
    assert!(cookie.contains(&format!("; Path={path};")), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    let pass = cookie.split(';').next().unwrap().to_string();
    let answer = get(&c, &path, &[("Cookie", &format!("{pass}; theirs=2"))]);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.json()["cookie"],
        "theirs=2",
        "the app never sees its pass"
    );

    // The pass is for this app of this session only, and cannot be altered.
    let other = get(&c, &format!("/apps/{id}/db/"), &[("Cookie", &pass)]);
    assert_eq!(other.status, 401, "{}", other.body);
    let altered = format!("{}x", pass);
    assert_eq!(get(&c, &path, &[("Cookie", &altered)]).status, 401);

    // An upgrade from another site is refused.
    let answer = get(
        &c,
        &format!("{path}echo"),
        &[
            ("Cookie", &pass),
            ("Origin", "http://evil.example"),
            ("Connection", "Upgrade"),
            ("Upgrade", "echo"),
        ],
    );
    assert_eq!(answer.status, 403, "{}", answer.body);

    // A browser opens an app for its owner alone: an admin's link is refused, saying why.
    let out = c.cli(&["session", "apps", &id, "--login"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("owner only"),
        "{}",
        text(&out.stderr)
    );

    // Revoking the token ends its passes.
    let tokens = c.json(&["token", "ls", "-o", "json"]);
    let alices = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["user"] == "alice")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    ok(c.cli(&["token", "revoke", &alices]));
    assert_eq!(get(&c, &path, &[("Cookie", &pass)]).status, 401);

    let events = ok(c.cli(&["events", "--session", &id]));
    assert!(events.contains("alice opened app web"), "{events}");
}

/// The notebook the session writes before JupyterLab starts: one cell whose value is computed.
const NOTEBOOK: &str = r#"{"cells": [{"cell_type": "code", "execution_count": null, "id": "c1",
"metadata": {}, "outputs": [], "source": ["print(sum(i * i for i in range(2000)))"]}],
"metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
"nbformat": 4, "nbformat_minor": 5}"#;

#[test]
fn jupyterlab_runs_a_cell_in_a_browser_through_the_managers_proxy() {
    let needs = || -> Result<(), String> {
        browser_available()?;
        let jupyter = std::process::Command::new(python())
            .args(["-c", "import jupyterlab, ipykernel"])
            .output()
            .is_ok_and(|o| o.status.success());
        jupyter.then_some(()).ok_or_else(|| {
            format!(
                "JupyterLab ({} -c 'import jupyterlab, ipykernel')",
                python()
            )
        })
    };
    if corral_testkit::require_ok(
        "a browser and JupyterLab (apt-get install chromium chromium-driver; pip install selenium jupyterlab)",
        needs(),
    )
    .is_none()
    {
        return;
    }
    let c = Cluster::start(60);
    ok(c.cli(&["group", "create", "g"]));
    let _agent = c.agent("a1", "g", "cpu=2");
    let alice = c.user_token("alice");
    let port = common::free_port();
    // The interpreter itself: a session's environment is its own (a version manager's shim
    // may pick another Python there).
    let executable = ok(std::process::Command::new(python())
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap());
    let start = format!(
        "cat > check.ipynb <<'EOF'\n{NOTEBOOK}\nEOF\n\
         exec {} -m jupyterlab --no-browser --port {port} --ip 127.0.0.1 \
         --ServerApp.base_url=\"$CORRAL_APP_JUPYTER_PREFIX\" --IdentityProvider.token= \
         --ServerApp.allow_remote_access=True --ServerApp.root_dir=. --allow-root",
        executable.trim()
    );
    let app = format!("jupyter={port}");
    let out = c.as_user(
        &alice,
        &[
            "session", "submit", "--group", "g", "--app", &app, "--", "sh", "-c", &start,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let bearer = format!("Bearer {alice}");
    c.until_for(120, "JupyterLab to answer through the manager", || {
        let answer = get(
            &c,
            &format!("/apps/{id}/jupyter/api/status"),
            &[("Authorization", &bearer)],
        );
        (answer.status == 200).then_some(())
    });

    let expected: u64 = (0..2000u64).map(|i| i * i).sum();
    let (url, expect) = (c.url(), expected.to_string());
    let (report, _) = run_browser_script(
        "jupyter",
        &[
            ("DASHBOARD_URL", &url),
            ("ALICE_TOKEN", &alice),
            ("SESSION", &id),
            ("EXPECTED", &expect),
        ],
    );
    assert!(
        report.contains(&format!("the cell printed {expected}")),
        "{report}"
    );
    let events = ok(c.cli(&["events", "--session", &id]));
    assert!(events.contains("alice opened app jupyter"), "{events}");
}

#[test]
fn traffic_on_an_apps_websocket_keeps_it_from_the_idle_policy_and_silence_does_not() {
    let c = Cluster::start(60);
    let _agent = c.idle_group("idle", 8, "i1");
    let (id, alice) = serving(&c, "idle");
    let bearer = format!("Bearer {alice}");
    let mut upgraded = upgrade(&c, &id, &bearer).unwrap();
    // Someone at the notebook: a message a second on its WebSocket (the pauses are the test's
    // input, not a wait for something to happen).
    for _ in 0..16 {
        upgraded.get_mut().write_all(b"x").unwrap();
        let mut back = [0u8; 1];
        upgraded.read_exact(&mut back).unwrap();
        std::thread::sleep(std::time::Duration::from_secs(1));
        assert_eq!(c.listed(&id)["state"], "running", "ended while in use");
    }
    drop(upgraded);
    let ended = c.until_for(60, "the unused session ends", || {
        let s = c.listed(&id);
        (s["state"] == "cancelled").then_some(s)
    });
    assert_eq!(
        ended["end_reason"],
        "ended by the group's policy: idle for 8 s"
    );
}
