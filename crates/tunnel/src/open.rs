//! What a stream is opened for: the first frame of every stream the manager opens names the
//! session and what to reach in it. The agent checks both (the session must be its own and
//! running) before it touches anything.

use serde::{Deserialize, Serialize};

/// A stream's purpose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Open {
    pub session: String,
    pub target: Target,
}

/// What the stream reaches in the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Target {
    /// A TCP port the session listens on (an app, or `session port-forward`).
    Tcp { port: u16 },
    /// A command run in the session's environment (`session exec`, `session shell`).
    Exec(Exec),
}

/// A command to run in a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exec {
    /// Program and arguments; empty for a login shell.
    #[serde(default)]
    pub command: Vec<String>,
    /// Whether it runs on a terminal (stdout and stderr then one stream, as on a terminal).
    #[serde(default)]
    pub tty: bool,
    /// The terminal's first size.
    #[serde(default)]
    pub cols: u16,
    #[serde(default)]
    pub rows: u16,
}

impl Open {
    pub fn to_bytes(&self) -> bytes::Bytes {
        serde_json::to_vec(self).expect("serialisable").into()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Open, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("a bad open frame: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_form_is_the_documented_one() {
        let open = Open {
            session: "s1".into(),
            target: Target::Tcp { port: 8888 },
        };
        assert_eq!(
            String::from_utf8(open.to_bytes().to_vec()).unwrap(),
            r#"{"session":"s1","target":{"tcp":{"port":8888}}}"#
        );
        let exec = Open::from_bytes(br#"{"session":"s1","target":{"exec":{"command":["ls"]}}}"#);
        assert_eq!(
            exec.unwrap().target,
            Target::Exec(Exec {
                command: vec!["ls".into()],
                tty: false,
                cols: 0,
                rows: 0
            })
        );
        let bad = Open::from_bytes(br#"{"session":"s1","target":{"tcp":{"port":70000}}}"#);
        assert!(bad.unwrap_err().contains("a bad open frame"));
    }
}
