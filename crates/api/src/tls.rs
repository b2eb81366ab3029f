//! The HTTP client settings of the agent and the `corral` client commands: `http://` or
//! `https://` managers, a manager's certificate verified against the system's roots plus the
//! certificates of an optional CA file (for a manager with a private CA or a self-signed
//! certificate).
//!
//! TLS is rustls with the ring crypto provider, the one the rest of the `corral` binary (AWS
//! SDK, kube) already links. reqwest is built without a provider of its own, so every client
//! must either come from [`client_builder`] or be built after [`install_crypto_provider`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// A CA file that cannot be used, or TLS settings rustls refuses.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("CA file {}: {message}", path.display())]
    CaFile { path: PathBuf, message: String },
    #[error("TLS settings: {0}")]
    Settings(String),
}

/// Makes ring the process's default rustls provider (if none is yet), for reqwest clients
/// built without [`client_builder`].
pub fn install_crypto_provider() {
    // An error means a provider is installed already, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A reqwest client builder that verifies `https://` managers against the system's roots
/// plus the certificates in `ca_file` (PEM). A client of an `http://` manager (`https` false)
/// skips reading the system's roots, which costs a short command most of its start-up.
pub fn client_builder(
    https: bool,
    ca_file: Option<&Path>,
) -> Result<reqwest::ClientBuilder, TlsError> {
    let mut config = rustls_config(https, ca_file)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(reqwest::Client::builder().tls_backend_preconfigured(config))
}

/// The rustls settings of [`client_builder`], for connections made without reqwest (the
/// WebSockets of [`crate::client::Client::websocket`]).
pub fn rustls_config(
    https: bool,
    ca_file: Option<&Path>,
) -> Result<rustls::ClientConfig, TlsError> {
    install_crypto_provider();
    let mut roots = if https {
        system_roots().clone()
    } else {
        rustls::RootCertStore::empty()
    };
    if let Some(path) = ca_file {
        let fail = |message: String| TlsError::CaFile {
            path: path.to_path_buf(),
            message,
        };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| fail(pem_message(e)))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail(pem_message(e)))?;
        if certs.is_empty() {
            return Err(fail("no PEM certificate (BEGIN CERTIFICATE) in it".into()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| fail(format!("not a CA certificate: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Settings(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn pem_message(e: rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(e) => format!("cannot read it: {e}"),
        e => format!("not a PEM certificate file: {e}"),
    }
}

/// The system's trusted roots (SSL_CERT_FILE / SSL_CERT_DIR, else the distribution's bundle),
/// read once. A host without any (a `FROM scratch` agent image) gets none: `http://` and a CA
/// file still work.
fn system_roots() -> &'static rustls::RootCertStore {
    static ROOTS: OnceLock<rustls::RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::debug!(error = %e, "reading the system's CA certificates");
        }
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(found.certs);
        roots
    })
}

/// What is wrong with a server certificate this client refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertificateProblem {
    /// Not signed by a trusted root (a private CA, or self-signed).
    NotTrusted,
    /// Valid, but not for the host name or address the URL gives.
    WrongName,
    /// Expired, revoked, malformed...
    Invalid,
}

/// Why `e` (or what caused it) refused the server's certificate, if it did.
pub fn certificate_problem(e: &(dyn std::error::Error + 'static)) -> Option<CertificateProblem> {
    use rustls::CertificateError as C;
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(rustls::Error::InvalidCertificate(kind)) = c.downcast_ref::<rustls::Error>() {
            return Some(match kind {
                C::UnknownIssuer | C::BadSignature | C::UnhandledCriticalExtension => {
                    CertificateProblem::NotTrusted
                }
                C::NotValidForName | C::NotValidForNameContext { .. } => {
                    CertificateProblem::WrongName
                }
                _ => CertificateProblem::Invalid,
            });
        }
        // rustls errors reach reqwest wrapped in io::Error, whose source skips the inner error.
        if let Some(inner) = c
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            if let Some(p) = certificate_problem(inner) {
                return Some(p);
            }
        }
        cause = c.source();
    }
    None
}
