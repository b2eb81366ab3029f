//! Provider secrets at rest: each secret value of a group's provider configuration (the option
//! keys its provider declares secret, such as aws `secret_access_key` or exec `secret_env`) is
//! sealed with XChaCha20-Poly1305 before it is stored, and opened when the API or a scaling
//! driver reads the configuration back.
//!
//! The key (256 bits) is kept apart from the database: `CORRAL_SECRETS_KEY` (base64) or a key
//! file, by default `<data dir>/secrets.key`, created at first start. Managers sharing one
//! PostgreSQL database must share the key. A stored value reads `enc:v1:<base64 of the 24-byte
//! nonce, then the ciphertext and its tag>`, with a random nonce per value; a value without the
//! tag is plaintext from an older version: it is still read, and sealed at start.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use corral_provider::{ProviderConfig, ProviderSettings, REDACTED};
use corral_store::StoreError;

/// What a sealed value starts with; the version names the cipher and layout.
const SEALED: &str = "enc:v1:";
const NONCE_LEN: usize = 24;
const KEY_LEN: usize = 32;
/// The key file's name in the data directory.
pub const KEY_FILE: &str = "secrets.key";

/// Where the key comes from.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum KeySource {
    /// `<data dir>/secrets.key`, created at first start.
    #[default]
    DataDir,
    /// A key file (created, readable by its owner only, if it does not exist).
    File(PathBuf),
    /// The key itself, 32 bytes in base64 (what `CORRAL_SECRETS_KEY` holds).
    Value(String),
}

/// Never shows the key itself.
impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::DataDir => write!(f, "DataDir"),
            KeySource::File(path) => f.debug_tuple("File").field(path).finish(),
            KeySource::Value(_) => write!(f, "Value(<redacted>)"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("secrets key from {origin}: {reason}; a key is 32 random bytes in base64, such as `openssl rand -base64 32` prints")]
    BadKey { origin: String, reason: String },
    #[error("secrets key file {}: {source}", path.display())]
    KeyFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what}: sealed with another secrets key, or altered; start the manager with the key that sealed it (CORRAL_SECRETS_KEY or --secrets-key-file; all managers of one database need the same key), or set the secret again")]
    WrongKey { what: String },
    #[error("{what}: not a sealed value ({reason})")]
    Malformed { what: String, reason: String },
}

/// The key that seals and opens provider secrets, and the MAC keys derived from it that
/// external agents' challenges and app passes are made with (shared, as it is, by the managers
/// of a database).
pub struct SecretKey {
    cipher: XChaCha20Poly1305,
    challenges: ring::hmac::Key,
    app_passes: ring::hmac::Key,
}

/// What the challenges' MAC key is derived for: a key of its own, never the sealing key itself.
const CHALLENGES_PURPOSE: &[u8] = b"corral: the MAC key of external agents' challenges, v1";
/// What the app passes' MAC key is derived for (`crate::apps::pass`).
const APP_PASSES_PURPOSE: &[u8] = b"corral: the MAC key of app passes, v1";

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}

impl SecretKey {
    /// Reads the key from `source`; a key file that does not exist yet is created with a new
    /// random key, and its path returned with it. `data_dir` is where [`KeySource::DataDir`]
    /// looks.
    pub fn load(
        source: &KeySource,
        data_dir: &Path,
    ) -> Result<(SecretKey, Option<PathBuf>), SecretsError> {
        let path = match source {
            KeySource::Value(text) => {
                return Ok((Self::from_text(text, "CORRAL_SECRETS_KEY")?, None))
            }
            KeySource::File(path) => path.clone(),
            KeySource::DataDir => data_dir.join(KEY_FILE),
        };
        let origin = path.display().to_string();
        let failed = |source| SecretsError::KeyFile {
            path: path.clone(),
            source,
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok((Self::from_text(&text, &origin)?, None)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let text = BASE64.encode(random::<KEY_LEN>());
                // create_new: two managers starting at once never overwrite each other's key.
                match crate::auth::create_private(&path) {
                    Ok(mut file) => {
                        file.write_all(format!("{text}\n").as_bytes())
                            .and_then(|()| file.sync_all())
                            .map_err(failed)?;
                        tracing::info!(path = %path.display(), "created the secrets key");
                        Ok((Self::from_text(&text, &origin)?, Some(path.clone())))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        let text = std::fs::read_to_string(&path).map_err(failed)?;
                        Ok((Self::from_text(&text, &origin)?, None))
                    }
                    Err(e) => Err(failed(e)),
                }
            }
            Err(e) => Err(failed(e)),
        }
    }

    /// A key from its base64 text (surrounding whitespace ignored).
    pub fn from_text(text: &str, origin: &str) -> Result<SecretKey, SecretsError> {
        let bad = |reason: String| SecretsError::BadKey {
            origin: origin.to_string(),
            reason,
        };
        let bytes = BASE64
            .decode(text.trim())
            .map_err(|e| bad(format!("not base64: {e}")))?;
        if bytes.len() != KEY_LEN {
            return Err(bad(format!("{} bytes, not {KEY_LEN}", bytes.len())));
        }
        let cipher = XChaCha20Poly1305::new_from_slice(&bytes)
            .map_err(|_| bad(format!("not {KEY_LEN} bytes")))?;
        let master = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes);
        let derive = |purpose: &[u8]| {
            let derived = ring::hmac::sign(&master, purpose);
            ring::hmac::Key::new(ring::hmac::HMAC_SHA256, derived.as_ref())
        };
        Ok(SecretKey {
            cipher,
            challenges: derive(CHALLENGES_PURPOSE),
            app_passes: derive(APP_PASSES_PURPOSE),
        })
    }

    /// The MAC (HMAC-SHA256) of `message` under the challenges' key.
    pub fn challenge_mac(&self, message: &[u8]) -> ring::hmac::Tag {
        ring::hmac::sign(&self.challenges, message)
    }

    /// Whether `tag` is `message`'s MAC under the challenges' key (compared in constant time).
    pub fn challenge_mac_holds(&self, message: &[u8], tag: &[u8]) -> bool {
        ring::hmac::verify(&self.challenges, message, tag).is_ok()
    }

    /// The MAC (HMAC-SHA256) of `message` under the app passes' key.
    pub fn app_pass_mac(&self, message: &[u8]) -> ring::hmac::Tag {
        ring::hmac::sign(&self.app_passes, message)
    }

    /// Whether `tag` is `message`'s MAC under the app passes' key (in constant time).
    pub fn app_pass_mac_holds(&self, message: &[u8], tag: &[u8]) -> bool {
        ring::hmac::verify(&self.app_passes, message, tag).is_ok()
    }

    /// `enc:v1:<base64>`, with a fresh random nonce.
    pub fn seal(&self, plain: &str) -> String {
        let nonce = random::<NONCE_LEN>();
        let sealed = self
            .cipher
            .encrypt(&XNonce::from(nonce), plain.as_bytes())
            .expect("XChaCha20-Poly1305 seals any value that fits in memory");
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        format!("{SEALED}{}", BASE64.encode(bytes))
    }

    /// The plaintext of a sealed value; `what` names it in errors.
    pub fn open(&self, stored: &str, what: &str) -> Result<String, SecretsError> {
        let malformed = |reason: &str| SecretsError::Malformed {
            what: what.to_string(),
            reason: reason.to_string(),
        };
        let body = stored
            .strip_prefix(SEALED)
            .ok_or_else(|| malformed("no enc:v1: tag"))?;
        let bytes = BASE64
            .decode(body)
            .map_err(|_| malformed("not base64 after the enc:v1: tag"))?;
        if bytes.len() < NONCE_LEN {
            return Err(malformed("too short"));
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().expect("split at the nonce's length");
        let plain = self
            .cipher
            .decrypt(&XNonce::from(nonce), sealed)
            .map_err(|_| SecretsError::WrongKey {
                what: what.to_string(),
            })?;
        String::from_utf8(plain).map_err(|_| malformed("not UTF-8 once opened"))
    }
}

/// Whether a stored value is sealed (rather than plaintext an older version stored).
pub fn is_sealed(value: &str) -> bool {
    value.starts_with(SEALED)
}

/// A group's provider configuration as the store keeps it (its secrets still sealed); the
/// static provider's when none is stored. Text that does not parse is `Corrupt`, naming the
/// group.
pub fn parse_stored(group: &str, stored: Option<&str>) -> Result<ProviderConfig, StoreError> {
    stored.map_or(Ok(ProviderConfig::default()), |text| {
        serde_json::from_str(text).map_err(|e| {
            StoreError::Corrupt(format!(
                "group {group:?}: the stored provider configuration does not parse: {e}"
            ))
        })
    })
}

/// Seals the configuration's secret values that are not sealed yet; returns how many it sealed.
pub fn seal_config(key: &SecretKey, config: &mut ProviderConfig) -> usize {
    let mut sealed = 0;
    for (_, value) in config.secrets_mut() {
        if !is_sealed(value) {
            *value = key.seal(value);
            sealed += 1;
        }
    }
    sealed
}

/// Opens the configuration's sealed secret values in place (plaintext ones stay as they are);
/// errors name the group and the option.
pub fn open_config(
    key: &SecretKey,
    config: &mut ProviderConfig,
    group: &str,
) -> Result<(), SecretsError> {
    for (option, value) in config.secrets_mut() {
        if is_sealed(value) {
            let what = format!("group {group:?}: provider option {option}");
            *value = key.open(value, &what)?;
        }
    }
    Ok(())
}

/// Opens what it can of the configuration's sealed secrets; one that does not open (another
/// key) is logged, naming the group, and replaced by [`REDACTED`]: nothing sealed ever passes
/// for a value.
pub fn open_config_or_redact(key: &SecretKey, config: &mut ProviderConfig, group: &str) {
    for (option, value) in config.secrets_mut() {
        if is_sealed(value) {
            let what = format!("group {group:?}: provider option {option}");
            *value = key.open(value, &what).unwrap_or_else(|e| {
                tracing::error!(error = %e, "a provider secret cannot be opened");
                REDACTED.to_string()
            });
        }
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key() -> SecretKey {
        SecretKey::from_text(&BASE64.encode(random::<KEY_LEN>()), "test").unwrap()
    }

    fn exec_config() -> ProviderConfig {
        serde_json::from_value(json!({"name": "exec", "options": {
            "command": "/opt/plugin", "secret_env": {"API_KEY": "s3cret", "OTHER": "two"}}}))
        .unwrap()
    }

    #[test]
    fn a_sealed_value_opens_to_what_was_sealed_and_never_shows_it() {
        let k = key();
        let sealed = k.seal("s3cret");
        assert!(sealed.starts_with("enc:v1:"), "{sealed}");
        assert!(!sealed.contains("s3cret"));
        // A random nonce per value: the same secret never seals to the same text.
        assert_ne!(sealed, k.seal("s3cret"));
        assert_eq!(k.open(&sealed, "x").unwrap(), "s3cret");
        assert_eq!(k.open(&k.seal(""), "x").unwrap(), "");
    }

    #[test]
    fn another_key_or_an_altered_value_is_an_error_naming_the_value() {
        let sealed = key().seal("s3cret");
        let e = key().open(&sealed, "group \"g\"").unwrap_err();
        assert!(matches!(e, SecretsError::WrongKey { .. }), "{e}");
        assert!(e.to_string().contains("group \"g\""), "{e}");
        assert!(e.to_string().contains("another secrets key"), "{e}");

        let k = key();
        let mut altered = k.seal("s3cret");
        altered.pop();
        altered.push(if altered.ends_with('A') { 'B' } else { 'A' });
        assert!(k.open(&altered, "x").is_err());
        for bad in ["enc:v1:", "enc:v1:!!", "enc:v1:AAAA", "plain"] {
            let e = k.open(bad, "x").unwrap_err();
            assert!(matches!(e, SecretsError::Malformed { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn configurations_seal_only_their_secrets_and_open_back() {
        let k = key();
        let mut config = exec_config();
        assert_eq!(seal_config(&k, &mut config), 2);
        let text = serde_json::to_string(&config).unwrap();
        assert!(
            !text.contains("s3cret") && text.contains("/opt/plugin"),
            "{text}"
        );
        // Already sealed values are left alone.
        assert_eq!(seal_config(&k, &mut config), 0);
        open_config(&k, &mut config, "g").unwrap();
        assert_eq!(config, exec_config());

        // Plaintext an older version stored still reads.
        let mut old = exec_config();
        open_config(&k, &mut old, "g").unwrap();
        assert_eq!(old, exec_config());

        let mut config = exec_config();
        seal_config(&k, &mut config);
        let e = open_config(&key(), &mut config.clone(), "cloud").unwrap_err();
        assert!(
            e.to_string()
                .contains("group \"cloud\": provider option secret_env.API_KEY"),
            "{e}"
        );
        // Where an answer only shows it redacted, it reads as redacted.
        open_config_or_redact(&key(), &mut config, "cloud");
        assert_eq!(config.redacted(), exec_config().redacted());
        assert_eq!(config.options["secret_env"]["API_KEY"], REDACTED);
    }

    #[test]
    fn keys_are_read_from_text_or_a_file_created_once() {
        let e = SecretKey::from_text("c2hvcnQ=", "CORRAL_SECRETS_KEY").unwrap_err();
        assert!(
            e.to_string()
                .contains("CORRAL_SECRETS_KEY: 5 bytes, not 32"),
            "{e}"
        );
        assert!(SecretKey::from_text("not base64!", "x").is_err());

        let dir = tempfile::tempdir().unwrap();
        let (first, created) = SecretKey::load(&KeySource::DataDir, dir.path()).unwrap();
        let path = dir.path().join(KEY_FILE);
        assert_eq!(created.as_deref(), Some(path.as_path()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // The file is read again, not replaced: what the first key sealed, the next opens.
        let (again, created) =
            SecretKey::load(&KeySource::File(path.clone()), Path::new("/nowhere")).unwrap();
        assert!(created.is_none());
        assert_eq!(again.open(&first.seal("v"), "x").unwrap(), "v");
        let text = std::fs::read_to_string(&path).unwrap();
        let (from_env, _) =
            SecretKey::load(&KeySource::Value(text), Path::new("/nowhere")).unwrap();
        assert_eq!(from_env.open(&first.seal("v"), "x").unwrap(), "v");
        assert_eq!(
            format!("{:?}", KeySource::Value("k".into())),
            "Value(<redacted>)"
        );
    }
}
