//! The apps a session serves: named ports (`jupyter=8888`, `ssh=tcp:22`) that the manager
//! serves under `/apps/{session}/{app}/` (HTTP, WebSockets included) or that
//! `session port-forward` reaches (TCP). Parsing and checking are here, shared by the CLI that
//! reads `--app` and the manager that checks a submission.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Most apps one session declares.
pub const MAX_APPS: usize = 16;
/// Longest app name.
pub const MAX_NAME: usize = 32;

/// A session's apps by name (lowercase letters, digits and `-`, starting with a letter; at
/// most 32): a map, so that no name is declared twice.
pub type Apps = BTreeMap<String, App>;

/// Where an app is served in its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct App {
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 65535))]
    pub port: u16,
    #[serde(default)]
    pub protocol: AppProtocol,
}

/// One app with its name, as `--app NAME=PORT` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppPort {
    pub name: String,
    pub app: App,
}

/// How an app is reached: `http` apps through the manager's `/apps/` path (WebSockets
/// included), `tcp` apps through `session port-forward` only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AppProtocol {
    #[default]
    Http,
    Tcp,
}

impl fmt::Display for AppProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AppProtocol::Http => "http",
            AppProtocol::Tcp => "tcp",
        })
    }
}

/// An app of a running session as `GET /sessions/{id}/apps` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AppView {
    pub name: String,
    #[serde(flatten)]
    pub app: App,
    /// Where the manager serves it, relative to the manager's URL (`/apps/{session}/{app}/`);
    /// null for a `tcp` app, which `session port-forward` reaches.
    pub path: Option<String>,
}

/// `POST /sessions/{id}/apps/{app}/login`: a link that logs a browser in to one app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AppLogin {
    /// The app's path with a short-lived app token (never an API token) in its query; the
    /// first visit trades it for a cookie of that app alone.
    pub path: String,
    /// Seconds the link stays valid.
    pub expires_in: u64,
}

/// Why an app's declaration is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadApp(String);

/// The path under which the manager serves `app` of `session`.
pub fn app_path(session: &str, app: &str) -> String {
    format!("/apps/{session}/{app}/")
}

/// The environment variable that tells a session where app `name` is served, so that an app
/// can take it as its base URL (Jupyter's `--ServerApp.base_url`, TensorBoard's
/// `--path_prefix`): `CORRAL_APP_JUPYTER_PREFIX` for `jupyter`, `-` read as `_`.
pub fn prefix_variable(name: &str) -> String {
    format!(
        "CORRAL_APP_{}_PREFIX",
        name.to_ascii_uppercase().replace('-', "_")
    )
}

/// Checks an app name: lowercase letters, digits and `-`, starting with a letter.
pub fn check_name(name: &str) -> Result<(), BadApp> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(BadApp(format!(
            "{name:?} is not an app name (lowercase letters, digits and '-', starting with a \
             letter, at most {MAX_NAME})"
        )))
    }
}

/// Checks a session's apps: each named well and on a port, at most `MAX_APPS`.
pub fn check_apps(apps: &Apps) -> Result<(), BadApp> {
    if apps.len() > MAX_APPS {
        return Err(BadApp(format!(
            "{} apps declared; at most {MAX_APPS}",
            apps.len()
        )));
    }
    for (name, app) in apps {
        check_name(name)?;
        if app.port == 0 {
            return Err(BadApp(format!("app {name:?}: port 0 is not a port")));
        }
    }
    Ok(())
}

/// The apps of `--app` flags as a map; a name given twice is refused.
pub fn collect(given: Vec<AppPort>) -> Result<Apps, BadApp> {
    let mut apps = Apps::new();
    for AppPort { name, app } in given {
        if apps.insert(name.clone(), app).is_some() {
            return Err(BadApp(format!("app {name:?} is given twice")));
        }
    }
    check_apps(&apps)?;
    Ok(apps)
}

impl FromStr for AppPort {
    type Err = BadApp;

    /// `NAME=PORT` (an HTTP app) or `NAME=PROTOCOL:PORT` (`http` or `tcp`).
    fn from_str(text: &str) -> Result<AppPort, BadApp> {
        let (name, rest) = text.split_once('=').ok_or_else(|| {
            BadApp(format!(
                "{text:?} is not NAME=PORT or NAME=PROTOCOL:PORT (e.g. jupyter=8888, ssh=tcp:22)"
            ))
        })?;
        let (protocol, port) = match rest.split_once(':') {
            Some((p, port)) => (p.parse()?, port),
            None => (AppProtocol::Http, rest),
        };
        check_name(name)?;
        Ok(AppPort {
            name: name.to_string(),
            app: App {
                port: parse_port(port)?,
                protocol,
            },
        })
    }
}

impl FromStr for AppProtocol {
    type Err = BadApp;

    fn from_str(text: &str) -> Result<AppProtocol, BadApp> {
        match text {
            "http" => Ok(AppProtocol::Http),
            "tcp" => Ok(AppProtocol::Tcp),
            other => Err(BadApp(format!(
                "{other:?} is not an app protocol (http or tcp)"
            ))),
        }
    }
}

fn parse_port(text: &str) -> Result<u16, BadApp> {
    text.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| BadApp(format!("{text:?} is not a port (1 to 65535)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str, port: u16, protocol: AppProtocol) -> AppPort {
        AppPort {
            name: name.into(),
            app: App { port, protocol },
        }
    }

    #[test]
    fn the_cli_forms_are_read() {
        assert_eq!(
            "jupyter=8888".parse(),
            Ok(app("jupyter", 8888, AppProtocol::Http))
        );
        assert_eq!("ssh=tcp:22".parse(), Ok(app("ssh", 22, AppProtocol::Tcp)));
        assert_eq!(
            "tb=http:6006".parse(),
            Ok(app("tb", 6006, AppProtocol::Http))
        );
        for bad in [
            "jupyter", "j=0", "j=65536", "J=80", "1a=80", "a=udp:53", "a/b=80", "=80",
        ] {
            assert!(bad.parse::<AppPort>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_name_twice_or_too_many_apps_are_refused() {
        let both = collect(vec![
            app("a", 80, AppProtocol::Http),
            app("b", 80, AppProtocol::Tcp),
        ]);
        assert_eq!(both.map(|m| m.len()), Ok(2));
        let twice = collect(vec![
            app("a", 80, AppProtocol::Http),
            app("a", 81, AppProtocol::Http),
        ]);
        assert!(twice
            .unwrap_err()
            .to_string()
            .contains("\"a\" is given twice"));
        let many: Vec<_> = (1..=17)
            .map(|i| app(&format!("a{i}"), i, AppProtocol::Http))
            .collect();
        assert!(collect(many).is_err());
        let bad = Apps::from([(
            "Bad".to_string(),
            App {
                port: 1,
                protocol: AppProtocol::Http,
            },
        )]);
        assert!(check_apps(&bad).is_err());
    }

    #[test]
    fn the_prefix_variable_names_the_app() {
        assert_eq!(prefix_variable("jupyter"), "CORRAL_APP_JUPYTER_PREFIX");
        assert_eq!(prefix_variable("my-tb"), "CORRAL_APP_MY_TB_PREFIX");
        assert_eq!(app_path("s-1", "tb"), "/apps/s-1/tb/");
    }
}
