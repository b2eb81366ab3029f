//! Image references as Docker reads them (`registry:5000/team/name:tag`, `name` meaning
//! `docker.io/library/name:latest`, `name@sha256:...` pinned), and content digests.

use std::fmt;
use std::str::FromStr;

/// Docker Hub, for references that name no registry, and where its API is served.
const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// A reference that does not parse, saying which part is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference:?} is not an image reference: {why}")]
pub struct ReferenceError {
    pub reference: String,
    pub why: &'static str,
}

/// A content digest: `sha256:` and 64 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    pub(crate) fn of_sha256(bytes: &[u8]) -> Digest {
        Digest(format!("sha256:{}", hex::encode(bytes)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Digest {
    type Err = &'static str;

    fn from_str(s: &str) -> Result<Digest, &'static str> {
        let hex = s
            .strip_prefix("sha256:")
            .ok_or("a digest is sha256: and 64 hex digits")?;
        if hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(Digest(s.to_string()))
        } else {
            Err("a digest is sha256: and 64 lower-case hex digits")
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An image reference: registry, repository, and a tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    registry: String,
    repository: String,
    tag: String,
    digest: Option<Digest>,
}

impl Reference {
    /// `docker.io`, `127.0.0.1:5000`, `ghcr.io`.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// `library/busybox`, `team/tiny`.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag (`latest` when none was given).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The digest a pinned reference names.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// The same image pinned to `digest` (what a session started now runs).
    pub fn pinned(&self, digest: Digest) -> Reference {
        Reference {
            digest: Some(digest),
            ..self.clone()
        }
    }

    /// Where the registry's API is served.
    pub(crate) fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_API
        } else {
            &self.registry
        }
    }

    /// A registry on this host (`localhost`, `127.x.x.x`), reached over plain HTTP.
    pub(crate) fn is_loopback(&self) -> bool {
        let host = match self.registry.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => &self.registry,
        };
        host == "localhost"
            || host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl FromStr for Reference {
    type Err = ReferenceError;

    fn from_str(s: &str) -> Result<Reference, ReferenceError> {
        let fail = |why| ReferenceError {
            reference: s.to_string(),
            why,
        };
        if s.is_empty() || s.len() > 255 {
            return Err(fail("it is empty or longer than 255 characters"));
        }
        let (name, digest) = match s.split_once('@') {
            Some((name, digest)) => (name, Some(digest.parse().map_err(fail)?)),
            None => (s, None),
        };
        // A tag is after the last ':' of the last component (a ':' before a '/' is a port).
        let last = name.rsplit('/').next().unwrap_or(name);
        let (name, tag) = match last.rsplit_once(':') {
            Some((_, tag)) => (&name[..name.len() - tag.len() - 1], tag),
            None => (name, "latest"),
        };
        if !is_tag(tag) {
            return Err(fail(
                "a tag is 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'",
            ));
        }
        // The first component is a registry when it looks like a host.
        let (registry, path) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first, rest)
            }
            _ => (DOCKER_HUB, name),
        };
        if !is_host(registry) {
            return Err(fail(
                "the registry is not a host name with an optional port",
            ));
        }
        if path.is_empty() || !path.split('/').all(is_path_component) {
            return Err(fail(
                "the repository is lower-case letters and digits, in parts joined by '/', separated within by '.', '_', '__' or '-'",
            ));
        }
        let repository = if registry == DOCKER_HUB && !path.contains('/') {
            format!("library/{path}")
        } else {
            path.to_string()
        };
        Ok(Reference {
            registry: registry.to_string(),
            repository,
            tag: tag.to_string(),
            digest,
        })
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        match &self.digest {
            Some(d) => write!(f, "@{d}"),
            None => write!(f, ":{}", self.tag),
        }
    }
}

fn is_tag(tag: &str) -> bool {
    (1..=128).contains(&tag.len())
        && !tag.starts_with(['.', '-'])
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

fn is_host(host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    let name_ok = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    name_ok && port_ok
}

/// `[a-z0-9]+` parts joined by `.`, `_`, `__` or any number of `-`.
fn is_path_component(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &part[start..i];
        let ok = separator == "."
            || separator == "_"
            || separator == "__"
            || separator.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(s: &str) -> (String, String, String, Option<String>) {
        let r: Reference = s.parse().unwrap();
        (
            r.registry().into(),
            r.repository().into(),
            r.tag().into(),
            r.digest().map(|d| d.to_string()),
        )
    }

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_read_as_docker_reads_them() {
        let own = |r: &str, p: &str, t: &str| (r.to_string(), p.to_string(), t.to_string(), None);
        assert_eq!(
            parts("busybox"),
            own("docker.io", "library/busybox", "latest")
        );
        assert_eq!(parts("team/app:1.2"), own("docker.io", "team/app", "1.2"));
        assert_eq!(
            parts("127.0.0.1:5000/tiny:v2"),
            own("127.0.0.1:5000", "tiny", "v2")
        );
        assert_eq!(
            parts("localhost/a/b-c__d.e"),
            own("localhost", "a/b-c__d.e", "latest")
        );
        assert_eq!(parts("ghcr.io/o/r:x_y"), own("ghcr.io", "o/r", "x_y"));
        let pinned = parts(&format!("ghcr.io/o/r@{D}"));
        assert_eq!(pinned.3.as_deref(), Some(D));
        let r: Reference = "127.0.0.1:5000/tiny".parse().unwrap();
        assert_eq!(r.to_string(), "127.0.0.1:5000/tiny:latest");
        assert_eq!(
            r.pinned(D.parse().unwrap()).to_string(),
            format!("127.0.0.1:5000/tiny@{D}")
        );
    }

    #[test]
    fn bad_references_say_which_part_is_wrong() {
        for (bad, part) in [
            ("", "empty"),
            ("Team/app", "repository"),
            ("app:", "tag"),
            ("app:.x", "tag"),
            ("a..b", "repository"),
            ("host:99999999/app", "registry"),
            ("app@sha256:xyz", "digest"),
            ("app@md5:00", "digest"),
            ("a/-b", "repository"),
        ] {
            let e = bad.parse::<Reference>().unwrap_err();
            assert!(e.to_string().contains(part), "{bad}: {e}");
        }
    }

    #[test]
    fn loopback_registries_are_told_apart() {
        for (r, loopback) in [
            ("127.0.0.1:5000/a", true),
            ("localhost:5000/a", true),
            ("127.1.2.3/a", true),
            ("registry.example:5000/a", false),
            ("a", false),
        ] {
            assert_eq!(
                r.parse::<Reference>().unwrap().is_loopback(),
                loopback,
                "{r}"
            );
        }
    }
}
