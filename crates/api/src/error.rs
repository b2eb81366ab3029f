//! Errors: the body the manager answers a refused request with, and what a client call can
//! end in, each worded for the person who reads it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Every refused request's body: `{"error": {"code", "message", "details"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// A stable word for programs: `bad_request`, `invalid_field`, `not_found`, `conflict`...
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true, value_type = String))]
    pub code: Option<String>,
    /// What was wrong, for people; names the field or object.
    pub message: String,
    /// What programs may act on (`{"field": ...}`, a log's stored `size`...), or null.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub details: Option<Value>,
}

#[cfg(feature = "client")]
pub use client_error::*;

#[cfg(feature = "client")]
mod client_error {
    use std::path::PathBuf;

    use serde_json::Value;

    use crate::tls::{CertificateProblem, TlsError};

    /// How a client call failed.
    #[derive(Debug, thiserror::Error)]
    pub enum ClientError {
        /// The manager refused the request and said why.
        #[error("{}", refused(.server, *.status, .message))]
        Refused {
            server: String,
            status: u16,
            code: Option<String>,
            message: String,
            details: Value,
        },
        /// Something answered with an error that is not the manager's (a proxy, an older manager).
        #[error("the manager at {server} answered {status}: {snippet}")]
        Unexpected {
            server: String,
            status: u16,
            snippet: String,
        },
        /// No answer: the manager could not be reached, was too slow, or its certificate was refused.
        #[error("{}", transport(.server, .kind, .cause, .ca_file.as_deref()))]
        Transport {
            server: String,
            kind: Transport,
            cause: String,
            ca_file: Option<PathBuf>,
        },
        /// An answer in a form this client does not know.
        #[error("the manager at {server} answered in a form this client does not read: {message}")]
        Unreadable { server: String, message: String },
        #[error("{server:?} is not a server URL (http://HOST:PORT or https://HOST:PORT)")]
        NotAServer { server: String },
        #[error(transparent)]
        Tls(#[from] TlsError),
    }

    /// Why a request got no answer.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Transport {
        Unreachable,
        Timeout,
        Certificate(CertificateProblem),
        Other,
    }

    impl ClientError {
        /// The HTTP status of a refusal, if the manager (or something in front of it) answered.
        pub fn status(&self) -> Option<u16> {
            match self {
                ClientError::Refused { status, .. } | ClientError::Unexpected { status, .. } => {
                    Some(*status)
                }
                _ => None,
            }
        }
    }

    fn refused(server: &str, status: u16, message: &str) -> String {
        if status == 401 {
            format!("{message} (the manager at {server} did not accept the token)")
        } else {
            message.to_string()
        }
    }

    fn transport(
        server: &str,
        kind: &Transport,
        cause: &str,
        ca_file: Option<&std::path::Path>,
    ) -> String {
        match kind {
            Transport::Unreachable => format!("cannot reach the manager at {server}: {cause}"),
            Transport::Timeout => format!("the manager at {server} did not answer in time"),
            Transport::Certificate(CertificateProblem::NotTrusted) => {
                let by = match ca_file {
                    Some(ca) => format!("neither by the system's roots nor by {}", ca.display()),
                    None => "by the system's roots".to_string(),
                };
                format!(
                    "the manager's certificate at {server} is not trusted {by}: {cause} \
                     (give the CA that signed it with --ca-file FILE)"
                )
            }
            Transport::Certificate(CertificateProblem::WrongName) => format!(
                "the manager's certificate is not valid for the host of {server}: {cause} \
                 (use a host name or address the certificate names)"
            ),
            Transport::Certificate(CertificateProblem::Invalid) => {
                format!("the manager's certificate at {server} was refused: {cause}")
            }
            Transport::Other => format!("talking to the manager at {server}: {cause}"),
        }
    }
}
