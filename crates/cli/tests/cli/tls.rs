//! HTTPS end to end: `corral server` with a certificate of a CA made here, the CLI and an agent
//! that trust that CA through `--ca-file` (or `CORRAL_CA_FILE`, or `ca_file` in the client
//! config), and what users see when something does not fit.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{eventually, free_port, start_manager, text, KillLeftovers, Proc, CORRAL};

/// A CA, and a certificate it signed for 127.0.0.1 and localhost, as PEM files in `dir`.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn make_pki(dir: &Path) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Corral test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::from_params(&ca_params, &ca_key);

    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "corral manager");
    let cert = params.signed_by(&key, &issuer).unwrap();

    let pki = Pki {
        ca: dir.join("ca.pem"),
        cert: dir.join("manager.pem"),
        key: dir.join("manager.key"),
    };
    std::fs::write(&pki.ca, ca_cert.pem()).unwrap();
    std::fs::write(&pki.cert, cert.pem()).unwrap();
    std::fs::write(&pki.key, key.serialize_pem()).unwrap();
    pki
}

struct Tls {
    /// Kills what the test started under `dir`, also when it fails.
    _leftovers: KillLeftovers,
    dir: tempfile::TempDir,
    pki: Pki,
    port: u16,
    token: String,
    _server: Proc,
}

impl Tls {
    fn start() -> Tls {
        let dir = tempfile::tempdir().unwrap();
        let pki = make_pki(dir.path());
        let data = dir.path().join("data");
        let ca = pki.ca.to_str().unwrap().to_string();
        let (server, port) = start_manager(&data, &[("CORRAL_CA_FILE", &ca)], || {
            let mut command = Command::new(CORRAL);
            command
                .args(["server", "--data-dir"])
                .arg(&data)
                .args(["--heartbeat-secs", "1", "--lost-after-secs", "10"])
                .arg("--tls-cert")
                .arg(&pki.cert)
                .arg("--tls-key")
                .arg(&pki.key)
                .env_remove("CORRAL_DATABASE_URL")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            command
        });
        let token = std::fs::read_to_string(dir.path().join("data/admin.token"))
            .unwrap()
            .trim()
            .to_string();
        Tls {
            _leftovers: KillLeftovers::new(dir.path()),
            dir,
            pki,
            port,
            token,
            _server: server,
        }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// `corral ARGS` against this manager; no CA unless the arguments or `env` give one.
    fn cli(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(CORRAL)
            .args(args)
            .env("CORRAL_SERVER", self.url())
            .env("CORRAL_TOKEN", &self.token)
            .env("CORRAL_CONFIG", self.dir.path().join("none.toml"))
            .env_remove("CORRAL_CA_FILE")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    fn ca(&self) -> &str {
        self.pki.ca.to_str().unwrap()
    }
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn fails(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected a failure: {}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

#[test]
fn the_cli_trusts_an_https_manager_through_its_ca_file_only() {
    let m = Tls::start();
    // With the CA: flag, environment, config file.
    ok(&m.cli(&["group", "create", "g", "--ca-file", m.ca()], &[]));
    assert!(ok(&m.cli(&["group", "ls"], &[("CORRAL_CA_FILE", m.ca())])).contains('g'));
    let config = m.dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "server = \"{}\"\ntoken = \"{}\"\nca_file = \"ca.pem\"\n",
            m.url(),
            m.token
        ),
    )
    .unwrap();
    let out = Command::new(CORRAL)
        .args(["group", "ls", "-o", "json"])
        .env("CORRAL_CONFIG", &config)
        .env_remove("CORRAL_SERVER")
        .env_remove("CORRAL_TOKEN")
        .env_remove("CORRAL_CA_FILE")
        .output()
        .unwrap();
    assert!(ok(&out).contains("\"g\""));

    // Without it, the certificate is not trusted, and the error says what to do.
    let stderr = fails(&m.cli(&["group", "ls"], &[]));
    assert!(stderr.contains("is not trusted"), "{stderr}");
    assert!(stderr.contains("--ca-file"), "{stderr}");

    // A CA file that is not one is named.
    let bogus = m.dir.path().join("bogus.pem");
    std::fs::write(&bogus, "not a certificate\n").unwrap();
    let stderr = fails(&m.cli(&["group", "ls", "--ca-file", bogus.to_str().unwrap()], &[]));
    assert!(stderr.contains("bogus.pem"), "{stderr}");

    // Plain HTTP to the HTTPS port is refused, with the reason.
    let plain = format!("http://127.0.0.1:{}", m.port);
    let stderr = fails(&m.cli(
        &["group", "ls", "--server", &plain, "--ca-file", m.ca()],
        &[],
    ));
    assert!(stderr.contains("serves HTTPS"), "{stderr}");
}

#[test]
fn an_agent_joins_an_https_manager_and_runs_a_session() {
    let m = Tls::start();
    ok(&m.cli(&["group", "create", "g", "--ca-file", m.ca()], &[]));
    let _agent = Proc(
        Command::new(CORRAL)
            .args([
                "agent",
                "--group",
                "g",
                "--id",
                "a1",
                "--capacity",
                "cpu=1",
                "--ca-file",
            ])
            .arg(&m.pki.ca)
            .arg("--work-dir")
            .arg(m.dir.path().join("a1"))
            .env("CORRAL_SERVER", m.url())
            .env("CORRAL_TOKEN", &m.token)
            .env("CORRAL_CONFIG", m.dir.path().join("none.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    eventually("the agent to join", Duration::from_secs(30), || {
        let agents = text(
            &m.cli(
                &["agent", "ls", "-o", "json"],
                &[("CORRAL_CA_FILE", m.ca())],
            )
            .stdout,
        );
        if agents.contains("\"alive\"") {
            Ok(())
        } else {
            Err(agents)
        }
    });
    // Submitted, run, logs streamed back: all over HTTPS.
    let out = m.cli(
        &["session", "run", "--group", "g", "--", "echo", "over https"],
        &[("CORRAL_CA_FILE", m.ca())],
    );
    assert_eq!(ok(&out), "over https\n");
}

#[test]
fn a_missing_or_mismatched_certificate_stops_the_server_at_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let start = |cert: &Path, key: &Path| {
        Command::new(CORRAL)
            .args(["server", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .env_remove("CORRAL_DATABASE_URL")
            .output()
            .unwrap()
    };
    let missing = dir.path().join("missing.pem");
    let stderr = fails(&start(&missing, &pki.key));
    assert!(stderr.contains("missing.pem"), "{stderr}");
    // A key that is not the certificate's: the key file is named.
    let other = rcgen::KeyPair::generate().unwrap();
    let other_key = dir.path().join("other.key");
    std::fs::write(&other_key, other.serialize_pem()).unwrap();
    let stderr = fails(&start(&pki.cert, &other_key));
    assert!(stderr.contains("other.key"), "{stderr}");
    // The certificate file given as the key.
    let stderr = fails(&start(&pki.cert, &pki.cert));
    assert!(stderr.contains("manager.pem"), "{stderr}");
    // One without the other is a usage error.
    let out = Command::new(CORRAL)
        .args(["server", "--tls-cert"])
        .arg(&pki.cert)
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("--tls-key"),
        "{}",
        text(&out.stderr)
    );
}
