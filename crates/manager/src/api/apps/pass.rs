//! App passes: what lets a browser into one app of one session, never an API token in a URL.
//! A pass names the session, the app, the hash of the token it was issued for (revoking the
//! token ends its passes) and when it expires, under a MAC with a key derived from the
//! managers' shared secrets key, so that any manager of a database reads any manager's pass.
//! The dashboard and `POST /sessions/{id}/apps/{app}/login` issue a short one for a link; the
//! app's first visit trades it for a longer one in a cookie scoped to the app's path.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use corral_core::Timestamp;
use serde::{Deserialize, Serialize};

use crate::secrets::SecretKey;

/// How long a link's pass lasts: long enough to click, too short to be worth stealing.
pub const LINK_SECS: u64 = 60;
/// How long a browser stays logged in to an app (as long as a dashboard log-in).
pub const COOKIE_SECS: u64 = 12 * 3600;
/// The query parameter a link carries its pass in.
pub const QUERY: &str = "corral_app_token";
/// The cookie a browser keeps its pass in, scoped to the app's path.
pub const COOKIE: &str = "corral_app";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pass {
    #[serde(rename = "s")]
    pub session: String,
    #[serde(rename = "a")]
    pub app: String,
    /// The hash of the token it was issued for.
    #[serde(rename = "h")]
    pub token_hash: String,
    /// Milliseconds since the epoch.
    #[serde(rename = "e")]
    pub expires: i64,
}

/// Why a pass was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    #[error("this app pass is not one (malformed, or not made by this cluster's managers)")]
    Forged,
    #[error("this app pass has expired; open the app again from the dashboard or with `corral session apps ID --login`")]
    Expired,
    #[error("this app pass is for another app")]
    OtherApp,
}

impl Pass {
    pub fn new(session: &str, app: &str, token_hash: &str, now: Timestamp, secs: u64) -> Pass {
        Pass {
            session: session.to_string(),
            app: app.to_string(),
            token_hash: token_hash.to_string(),
            expires: now
                .0
                .saturating_add(i64::try_from(secs * 1000).unwrap_or(i64::MAX)),
        }
    }

    /// `<base64url of the JSON>.<base64url of its MAC>`: the characters of a URL's query and
    /// of a cookie's value alike.
    pub fn issue(&self, key: &SecretKey) -> String {
        let body = B64.encode(serde_json::to_vec(self).expect("a pass is JSON"));
        let mac = key.app_pass_mac(body.as_bytes());
        format!("{body}.{}", B64.encode(mac.as_ref()))
    }

    /// The pass in `text`, if a manager of this cluster made it for `session`'s `app` and it
    /// has not expired.
    pub fn read(
        key: &SecretKey,
        text: &str,
        (session, app): (&str, &str),
        now: Timestamp,
    ) -> Result<Pass, PassError> {
        let (body, mac) = text.split_once('.').ok_or(PassError::Forged)?;
        let mac = B64.decode(mac).map_err(|_| PassError::Forged)?;
        if !key.app_pass_mac_holds(body.as_bytes(), &mac) {
            return Err(PassError::Forged);
        }
        let json = B64.decode(body).map_err(|_| PassError::Forged)?;
        let pass: Pass = serde_json::from_slice(&json).map_err(|_| PassError::Forged)?;
        if pass.session != session || pass.app != app {
            return Err(PassError::OtherApp);
        }
        if pass.expires <= now.0 {
            return Err(PassError::Expired);
        }
        Ok(pass)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SecretKey {
        use base64::engine::general_purpose::STANDARD;
        SecretKey::from_text(&STANDARD.encode([byte; 32]), "test").unwrap()
    }

    #[test]
    fn a_pass_reads_back_for_its_app_until_it_expires() {
        let key = key(1);
        let pass = Pass::new("s-1", "jupyter", "h", Timestamp(1_000), 60);
        let text = pass.issue(&key);
        assert!(text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)));
        let at = |ms| Pass::read(&key, &text, ("s-1", "jupyter"), Timestamp(ms));
        assert_eq!(at(60_999), Ok(pass));
        assert_eq!(at(61_000), Err(PassError::Expired));
        let other = Pass::read(&key, &text, ("s-1", "tb"), Timestamp(2_000));
        assert_eq!(other, Err(PassError::OtherApp));
        let other = Pass::read(&key, &text, ("s-2", "jupyter"), Timestamp(2_000));
        assert_eq!(other, Err(PassError::OtherApp));
    }

    #[test]
    fn a_pass_altered_or_made_with_another_key_is_refused() {
        let pass = Pass::new("s-1", "jupyter", "h", Timestamp(0), 3600).issue(&key(1));
        let read =
            |text: &str, key: &SecretKey| Pass::read(key, text, ("s-1", "jupyter"), Timestamp(1));
        assert_eq!(read(&pass, &key(2)), Err(PassError::Forged));
        // Another expiry under the same MAC.
        let (_, mac) = pass.split_once('.').unwrap();
        let later = Pass::new("s-1", "jupyter", "h", Timestamp(0), 7200);
        let body = B64.encode(serde_json::to_vec(&later).unwrap());
        assert_eq!(
            read(&format!("{body}.{mac}"), &key(1)),
            Err(PassError::Forged)
        );
        for junk in ["", ".", "abc", "a.b", "a.b.c"] {
            assert_eq!(read(junk, &key(1)), Err(PassError::Forged), "{junk:?}");
        }
    }
}
