//! Where the client finds its manager and token: flags, then the environment (both via clap),
//! then the config file, then the default server. `corral dev` writes the same file.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The manager a client talks to when nothing else says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8470";

/// Where `corral server` keeps the admin token by default, relative to where it was started.
const LOCAL_ADMIN_TOKEN: &str = "corral-data/admin.token";

/// `config.toml`: `server = "http://127.0.0.1:8470"` and `token = "corral_..."`, and for an
/// HTTPS manager whose certificate the system does not trust, `ca_file = "ca.pem"`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The group `corral session run` submits to when `--group` is not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// PEM certificates trusted for an `https://` server besides the system's roots; a
    /// relative path is relative to the config file's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// The config file: `$CORRAL_CONFIG`, else `$XDG_CONFIG_HOME/corral/config.toml`, else
/// `~/.config/corral/config.toml`; `None` when there is no home directory to put it in.
pub fn client_config_path() -> Option<PathBuf> {
    if let Some(path) = non_empty_env("CORRAL_CONFIG") {
        return Some(PathBuf::from(path));
    }
    let base = non_empty_env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::home_dir().map(|home| home.join(".config")))?;
    Some(base.join("corral").join("config.toml"))
}

/// Reads the config file; a missing file is an empty config, a malformed one an error naming it.
pub fn load_client_config() -> Result<ClientConfig> {
    match client_config_path() {
        Some(path) => load_client_config_from(&path),
        None => Ok(ClientConfig::default()),
    }
}

pub fn load_client_config_from(path: &Path) -> Result<ClientConfig> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ClientConfig::default()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut config = parse_client_config(&text)
        .with_context(|| format!("{}: not a valid corral config", path.display()))?;
    if let (Some(ca), Some(dir)) = (&config.ca_file, path.parent()) {
        config.ca_file = Some(dir.join(ca));
    }
    Ok(config)
}

pub fn parse_client_config(text: &str) -> Result<ClientConfig> {
    let mut config: ClientConfig = toml::from_str(text)?;
    // An empty value means "not set", as it does for the environment variables.
    config.server = config.server.filter(|s| !s.trim().is_empty());
    config.token = config.token.filter(|t| !t.trim().is_empty());
    config.ca_file = config.ca_file.filter(|p| !p.as_os_str().is_empty());
    Ok(config)
}

/// The manager's base URL, the caller's token and the CA file, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// `http://host:port` or `https://host:port`, no trailing slash.
    pub server: String,
    pub token: String,
    /// Trusted besides the system's roots for an `https://` server.
    pub ca_file: Option<PathBuf>,
}

/// Resolves server, token and CA file from what clap gathered (flag or environment), then the
/// config file (read only if one of them is missing), then the default server. A missing
/// token is an error that says how to pass one; it never silently picks up
/// `./corral-data/admin.token`.
pub fn resolve(
    server: Option<&str>,
    token: Option<&str>,
    ca_file: Option<&Path>,
) -> Result<Resolved> {
    let server = server.map(str::trim).filter(|s| !s.is_empty());
    let token = token.map(str::trim).filter(|t| !t.is_empty());
    let ca_file = ca_file.filter(|p| !p.as_os_str().is_empty());
    let config = if server.is_none() || token.is_none() || ca_file.is_none() {
        load_client_config()?
    } else {
        ClientConfig::default()
    };
    let server = server
        .map(str::to_string)
        .or(config.server)
        .unwrap_or_else(|| DEFAULT_SERVER.to_string());
    let Some(token) = token.map(str::to_string).or(config.token) else {
        bail!("{}", missing_token_message());
    };
    Ok(Resolved {
        server: normalize_server(&server)?,
        token: token.trim().to_string(),
        ca_file: ca_file.map(Path::to_path_buf).or(config.ca_file),
    })
}

fn missing_token_message() -> String {
    let file =
        client_config_path().map_or("the config file".to_string(), |p| p.display().to_string());
    let mut message = format!(
        "no API token: pass --token TOKEN, set CORRAL_TOKEN, or put token = \"...\" in {file}"
    );
    if Path::new(LOCAL_ADMIN_TOKEN).exists() {
        message.push_str(&format!(
            "\n(this directory holds a manager's admin token; to act as admin, run: \
             export CORRAL_TOKEN=$(cat {LOCAL_ADMIN_TOKEN}))"
        ));
    }
    message
}

/// `host:port` gains `http://`; a trailing slash goes. `http://` and `https://` only.
fn normalize_server(server: &str) -> Result<String> {
    let server = server.trim();
    let server = if server.contains("://") {
        server.to_string()
    } else {
        format!("http://{server}")
    };
    let server = server.trim_end_matches('/');
    let url =
        reqwest::Url::parse(server).with_context(|| format!("{server:?} is not a server URL"))?;
    if !matches!(url.scheme(), "http" | "https") {
        bail!("{server}: the server URL must start with http:// or https://");
    }
    if url.host_str().is_none() {
        bail!("{server}: the server URL has no host");
    }
    Ok(server.to_string())
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_server_and_token_and_rejects_typos() {
        let c = parse_client_config("server = \"http://h:1\"\ntoken = \"corral_x\"\n").unwrap();
        assert_eq!(c.server.as_deref(), Some("http://h:1"));
        assert_eq!(c.token.as_deref(), Some("corral_x"));
        assert_eq!(parse_client_config("").unwrap(), ClientConfig::default());
        assert_eq!(parse_client_config("token = \"\"").unwrap().token, None);
        assert!(parse_client_config("tokn = \"x\"").is_err());
    }

    #[test]
    fn round_trips_for_corral_dev() {
        let c = ClientConfig {
            server: Some(DEFAULT_SERVER.into()),
            token: Some("corral_x".into()),
            group: Some("dev".into()),
            ca_file: None,
        };
        assert_eq!(
            parse_client_config(&toml::to_string(&c).unwrap()).unwrap(),
            c
        );
    }

    #[test]
    fn normalizes_server_urls() {
        assert_eq!(
            normalize_server("127.0.0.1:8470").unwrap(),
            "http://127.0.0.1:8470"
        );
        assert_eq!(normalize_server("http://h:1/").unwrap(), "http://h:1");
        assert_eq!(normalize_server("https://h:1/").unwrap(), "https://h:1");
        assert!(normalize_server("ftp://h").is_err());
        assert!(normalize_server("http://").is_err());
    }

    #[test]
    fn a_ca_file_in_the_config_is_relative_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "ca_file = \"ca.pem\"\n").unwrap();
        assert_eq!(
            load_client_config_from(&path).unwrap().ca_file,
            Some(dir.path().join("ca.pem"))
        );
        std::fs::write(&path, "ca_file = \"/etc/corral/ca.pem\"\n").unwrap();
        assert_eq!(
            load_client_config_from(&path).unwrap().ca_file,
            Some(PathBuf::from("/etc/corral/ca.pem"))
        );
        std::fs::write(&path, "ca_file = \"\"\n").unwrap();
        assert_eq!(load_client_config_from(&path).unwrap().ca_file, None);
    }

    #[test]
    fn a_missing_file_is_an_empty_config() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            load_client_config_from(&dir.path().join("none.toml")).unwrap(),
            ClientConfig::default()
        );
    }
}
