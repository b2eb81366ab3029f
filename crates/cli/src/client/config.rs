//! Where the client finds its manager and token: flags, then the environment (both via clap),
//! then the config file's chosen context, then the default server. `corral dev` adds its own
//! context to the same file and leaves the others as they were.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The manager a client talks to when nothing else says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8470";

/// The name of the context written at the top of the file (the format before contexts).
pub const DEFAULT_CONTEXT: &str = "default";

/// Where `corral server` keeps the admin token by default, relative to where it was started.
const LOCAL_ADMIN_TOKEN: &str = "corral-data/admin.token";

/// One manager and who the client is there: `server = "http://127.0.0.1:8470"` and
/// `token = "corral_..."`, and for an HTTPS manager whose certificate the system does not
/// trust, `ca_file = "ca.pem"`.
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

impl ClientConfig {
    fn is_empty(&self) -> bool {
        *self == ClientConfig::default()
    }

    /// An empty value means "not set", as it does for the environment variables.
    fn without_empty_values(self) -> ClientConfig {
        ClientConfig {
            server: self.server.filter(|s| !s.trim().is_empty()),
            token: self.token.filter(|t| !t.trim().is_empty()),
            group: self.group.filter(|g| !g.trim().is_empty()),
            ca_file: self.ca_file.filter(|p| !p.as_os_str().is_empty()),
        }
    }
}

/// `config.toml`: managers side by side as named contexts (`[contexts.prod]`), the one used
/// when no `--context` says (`current = "prod"`), and, as files written before contexts have,
/// one context at the top, named `default`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ca_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    contexts: BTreeMap<String, ClientConfig>,
}

impl ConfigFile {
    pub fn parse(text: &str) -> Result<ConfigFile> {
        let mut file: ConfigFile = toml::from_str(text)?;
        if let Some(name) = file.contexts.keys().find(|n| !is_context_name(n)) {
            bail!("{name:?} is not a context name (letters, digits, '.', '_' and '-')");
        }
        if !file.top().is_empty() && file.contexts.contains_key(DEFAULT_CONTEXT) {
            bail!(
                "both a context at the top of the file and [contexts.{DEFAULT_CONTEXT}]: \
                 keep one of them"
            );
        }
        file.current = file.current.filter(|c| !c.trim().is_empty());
        file.contexts = (file.contexts.into_iter())
            .map(|(name, c)| (name, c.without_empty_values()))
            .collect();
        Ok(file)
    }

    /// The context written at the top of the file.
    fn top(&self) -> ClientConfig {
        ClientConfig {
            server: self.server.clone(),
            token: self.token.clone(),
            group: self.group.clone(),
            ca_file: self.ca_file.clone(),
        }
        .without_empty_values()
    }

    /// Every context by name, the one at the top of the file as `default`.
    pub fn contexts(&self) -> BTreeMap<String, ClientConfig> {
        let mut all = self.contexts.clone();
        let top = self.top();
        if !top.is_empty() {
            all.insert(DEFAULT_CONTEXT.to_string(), top);
        }
        all
    }

    /// The context named, else the current one, else the one at the top of the file (empty
    /// when there is none). A name the file does not hold is an error listing those it does.
    pub fn select(&self, name: Option<&str>) -> Result<ClientConfig> {
        let Some(name) = name.or(self.current.as_deref()) else {
            return Ok(self.top());
        };
        match self.contexts().remove(name) {
            Some(context) => Ok(context),
            None if name == DEFAULT_CONTEXT && self.contexts.is_empty() => Ok(self.top()),
            None => bail!("{}", self.unknown(name)),
        }
    }

    fn unknown(&self, name: &str) -> String {
        let known: Vec<String> = self.contexts().into_keys().collect();
        if known.is_empty() {
            format!("no context {name:?}: the config file has none")
        } else {
            format!(
                "no context {name:?}; the config file has: {}",
                known.join(", ")
            )
        }
    }

    /// Adds or replaces context `name` (the top of the file, for `default`).
    pub fn set(&mut self, name: &str, context: ClientConfig) -> Result<()> {
        if !is_context_name(name) {
            bail!("{name:?} is not a context name (letters, digits, '.', '_' and '-')");
        }
        if name == DEFAULT_CONTEXT && !self.contexts.contains_key(name) {
            self.server = context.server;
            self.token = context.token;
            self.group = context.group;
            self.ca_file = context.ca_file;
        } else {
            self.contexts.insert(name.to_string(), context);
        }
        Ok(())
    }

    /// Makes `name` the context used when no `--context` says; it must be one the file holds.
    pub fn use_context(&mut self, name: &str) -> Result<()> {
        if !self.contexts().contains_key(name) {
            bail!("{}", self.unknown(name));
        }
        self.current = Some(name.to_string());
        Ok(())
    }

    /// The name of the context used when no `--context` says, if the file has one.
    pub fn current_name(&self) -> Option<String> {
        self.current
            .clone()
            .or_else(|| (!self.top().is_empty()).then(|| DEFAULT_CONTEXT.to_string()))
    }
}

fn is_context_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
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

/// The config file read whole; a missing file is an empty one, a malformed one an error naming
/// it.
pub fn read_config_file(path: &Path) -> Result<ConfigFile> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ConfigFile::default()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    ConfigFile::parse(&text)
        .with_context(|| format!("{}: not a valid corral config", path.display()))
}

/// Writes the config file (it holds tokens: readable by its owner only), beside and renamed,
/// so a client that reads it as it is written never finds it half-written.
pub fn write_config_file(path: &Path, file: &ConfigFile) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let text = toml::to_string(file).context("writing the client configuration")?;
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut beside = path.as_os_str().to_owned();
        beside.push(".new");
        let beside = PathBuf::from(beside);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&beside)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&beside, path)
    };
    write().with_context(|| format!("writing {}", path.display()))
}

/// The context chosen by `context` (`--context`, `CORRAL_CONTEXT`), else the file's current
/// one; no file is an empty context.
pub fn load_client_config(context: Option<&str>) -> Result<ClientConfig> {
    match client_config_path() {
        Some(path) => load_client_config_from(&path, context),
        None if context.is_some() => bail!("no config file to take context {context:?} from"),
        None => Ok(ClientConfig::default()),
    }
}

pub fn load_client_config_from(path: &Path, context: Option<&str>) -> Result<ClientConfig> {
    let mut config = read_config_file(path)?
        .select(context)
        .with_context(|| format!("{}", path.display()))?;
    if let (Some(ca), Some(dir)) = (&config.ca_file, path.parent()) {
        config.ca_file = Some(dir.join(ca));
    }
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
    /// The context's group, for commands whose `--group` was not given.
    pub group: Option<String>,
}

/// Resolves server, token and CA file from what clap gathered (flag or environment), then the
/// config file's context (`context`, else its current one), then the default server. A missing
/// token is an error that says how to pass one; it never silently picks up
/// `./corral-data/admin.token`.
pub fn resolve(
    server: Option<&str>,
    token: Option<&str>,
    ca_file: Option<&Path>,
    context: Option<&str>,
) -> Result<Resolved> {
    let server = server.map(str::trim).filter(|s| !s.is_empty());
    let token = token.map(str::trim).filter(|t| !t.is_empty());
    let ca_file = ca_file.filter(|p| !p.as_os_str().is_empty());
    let context = context.map(str::trim).filter(|c| !c.is_empty());
    let complete = server.is_some() && token.is_some() && ca_file.is_some();
    let config = match load_client_config(context) {
        Ok(config) => config,
        // Everything given: the file is needed for a default group at most.
        Err(_) if complete && context.is_none() => ClientConfig::default(),
        Err(e) => return Err(e),
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
        group: config.group,
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

    fn parse_client_config(text: &str) -> Result<ClientConfig> {
        ConfigFile::parse(text)?.select(None)
    }

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
            load_client_config_from(&path, None).unwrap().ca_file,
            Some(dir.path().join("ca.pem"))
        );
        std::fs::write(&path, "ca_file = \"/etc/corral/ca.pem\"\n").unwrap();
        assert_eq!(
            load_client_config_from(&path, None).unwrap().ca_file,
            Some(PathBuf::from("/etc/corral/ca.pem"))
        );
        std::fs::write(&path, "ca_file = \"\"\n").unwrap();
        assert_eq!(load_client_config_from(&path, None).unwrap().ca_file, None);
    }

    #[test]
    fn a_missing_file_is_an_empty_config() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            load_client_config_from(&dir.path().join("none.toml"), None).unwrap(),
            ClientConfig::default()
        );
    }

    fn context(server: &str) -> ClientConfig {
        ClientConfig {
            server: Some(server.into()),
            token: Some("corral_t".into()),
            ..ClientConfig::default()
        }
    }

    #[test]
    fn a_file_from_before_contexts_is_the_default_context() {
        let file =
            ConfigFile::parse("server = \"https://prod:8470\"\ntoken = \"corral_p\"\n").unwrap();
        assert_eq!(file.current_name().as_deref(), Some("default"));
        assert_eq!(
            file.select(Some("default")).unwrap().server.as_deref(),
            Some("https://prod:8470")
        );
        assert_eq!(file.contexts().into_keys().collect::<Vec<_>>(), ["default"]);
    }

    #[test]
    fn contexts_are_chosen_by_name_else_the_current_one() {
        let mut file =
            ConfigFile::parse("server = \"https://prod:8470\"\ntoken = \"corral_p\"\n").unwrap();
        file.set("dev", context("http://127.0.0.1:8470")).unwrap();
        // Adding a context changes nothing the file's user gets until it is used.
        assert_eq!(
            file.select(None).unwrap().server.as_deref(),
            Some("https://prod:8470")
        );
        file.use_context("dev").unwrap();
        let again = ConfigFile::parse(&toml::to_string(&file).unwrap()).unwrap();
        assert_eq!(again, file);
        assert_eq!(
            again.select(None).unwrap().server.as_deref(),
            Some("http://127.0.0.1:8470")
        );
        assert_eq!(
            again.select(Some("default")).unwrap().server.as_deref(),
            Some("https://prod:8470")
        );
        assert_eq!(
            again.select(Some("staging")).unwrap_err().to_string(),
            "no context \"staging\"; the config file has: default, dev"
        );
        let mut refused = again.clone();
        assert!(refused.use_context("staging").is_err());
        assert_eq!(refused, again, "a refused change changes nothing");
    }

    #[test]
    fn context_names_are_checked_and_default_is_held_once() {
        assert!(ConfigFile::parse("[contexts.\"a/b\"]\nserver = \"http://h\"\n").is_err());
        assert!(ConfigFile::default()
            .set("../x", context("http://h"))
            .is_err());
        let both = "server = \"http://a\"\n[contexts.default]\nserver = \"http://b\"\n";
        assert!(ConfigFile::parse(both).is_err());
        assert!(
            ConfigFile::parse("current = \"x\"\n[contexts.x]\nservr = \"http://h\"\n").is_err()
        );
    }
}
