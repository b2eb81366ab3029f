//! The apps a session serves: named ports (`jupyter=8888`, `ssh=tcp:22`) that the manager
//! serves under `/apps/{session}/{app}/` (HTTP, WebSockets included) or that
//! `session port-forward` reaches (TCP). Parsing and checking are here, shared by the CLI that
//! reads `--app` and the manager that checks a submission.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Most apps one session declares.
pub const MAX_APPS: usize = 16;
/// Longest app name.
pub const MAX_NAME: usize = 32;

/// One port a session serves, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AppPort {
    /// Lowercase letters, digits and `-`, starting with a letter; at most 32.
    pub name: String,
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 65535))]
    pub port: u16,
    #[serde(default)]
    pub protocol: AppProtocol,
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
    #[serde(flatten)]
    pub app: AppPort,
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

/// Checks a session's apps: each named well, on a port, no name or port twice, at most
/// `MAX_APPS`.
pub fn check_apps(apps: &[AppPort]) -> Result<(), BadApp> {
    if apps.len() > MAX_APPS {
        return Err(BadApp(format!(
            "{} apps declared; at most {MAX_APPS}",
            apps.len()
        )));
    }
    for (i, app) in apps.iter().enumerate() {
        check_name(&app.name)?;
        if app.port == 0 {
            return Err(BadApp(format!("app {:?}: port 0 is not a port", app.name)));
        }
        if let Some(twin) = apps[..i]
            .iter()
            .find(|a| a.name == app.name || a.port == app.port)
        {
            let what = if twin.name == app.name {
                format!("the name {:?}", app.name)
            } else {
                format!("port {}", app.port)
            };
            return Err(BadApp(format!("{what} is declared twice")));
        }
    }
    Ok(())
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
        let app = AppPort {
            name: name.to_string(),
            port: parse_port(port)?,
            protocol,
        };
        check_name(&app.name)?;
        Ok(app)
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
            port,
            protocol,
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
            let err = bad.parse::<AppPort>().unwrap_err().to_string();
            assert!(!err.is_empty(), "{bad}");
        }
    }

    #[test]
    fn a_name_or_port_twice_is_refused() {
        let one = app("a", 80, AppProtocol::Http);
        assert!(check_apps(&[one.clone(), app("b", 81, AppProtocol::Tcp)]).is_ok());
        let err = check_apps(&[one.clone(), app("a", 81, AppProtocol::Http)]).unwrap_err();
        assert!(err.to_string().contains("\"a\" is declared twice"), "{err}");
        let err = check_apps(&[one, app("b", 80, AppProtocol::Http)]).unwrap_err();
        assert!(err.to_string().contains("port 80"), "{err}");
        let many: Vec<_> = (1..=17)
            .map(|i| app(&format!("a{i}"), i, AppProtocol::Http))
            .collect();
        assert!(check_apps(&many).is_err());
    }

    #[test]
    fn the_prefix_variable_names_the_app() {
        assert_eq!(prefix_variable("jupyter"), "CORRAL_APP_JUPYTER_PREFIX");
        assert_eq!(prefix_variable("my-tb"), "CORRAL_APP_MY_TB_PREFIX");
        assert_eq!(app_path("s-1", "tb"), "/apps/s-1/tb/");
    }
}
