//! The names and paths the API accepts. Every name that becomes part of a URL path or a file
//! path is checked here, once, before anything is written.

use std::path::{Path, PathBuf};

use crate::error::ApiError;

/// 1-64 ASCII letters, digits or `extra` characters, starting with a letter or digit (so never
/// `.` or `..`).
fn is_word(text: &str, extra: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
        && text
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
}

/// Names of groups, agents, templates and users: one URL path segment and one file name, shown
/// in logs unquoted. 1-64 letters, digits, `.`, `_`, `-` or `:`, starting with a letter or
/// digit (so never `.` or `..`), and no `/`.
pub fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    if is_word(name, "._-:") {
        return Ok(());
    }
    Err(ApiError::invalid(
        field,
        format!(
            "{name:?} is not a valid name: 1-64 letters, digits, '.', '_', '-' or ':', \
             starting with a letter or digit"
        ),
    ))
}

/// Versions of Corral (`1.4.0`, `1.4.0-rc.1+site.2`): 1-64 letters, digits, `.`, `_`, `-` or
/// `+`, starting with a letter or digit. A version is a URL path segment.
pub fn check_version(field: &str, version: &str) -> Result<(), ApiError> {
    if corral_core::agent_update::is_version(version) {
        return Ok(());
    }
    Err(ApiError::invalid(
        field,
        format!(
            "{version:?} is not a version: 1-64 letters, digits, '.', '_', '-' or '+', \
             starting with a letter or digit"
        ),
    ))
}

/// Image names are container image references (`registry:5000/team/name:tag`), so they may
/// hold `/`, but only between components that are themselves valid names; in a URL the `/`
/// is percent-encoded (`images/team%2Fname:tag`).
pub fn check_image_name(field: &str, name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name.split('/').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-:@".contains(c))
                && part
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric())
        });
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!(
                "{name:?} is not a valid image name: up to 255 characters, components of \
                 letters, digits, '.', '_', '-', ':' or '@' separated by '/', each starting with \
                 a letter or digit"
            ),
        ))
    }
}

/// A path inside a session's directory as people write it (`corral_core::paths`).
pub fn check_relative(field: &str, path: &str) -> Result<PathBuf, ApiError> {
    corral_core::paths::session_path(path)
        .map(Path::to_path_buf)
        .map_err(|why| {
            ApiError::invalid(
                field,
                format!("{path:?} {why}; give a relative path inside the session's directory"),
            )
        })
}

/// A value that ends up in a process's arguments or environment: C strings cannot hold NUL.
pub fn check_no_nul(field: &str, value: &str) -> Result<(), ApiError> {
    if value.contains('\0') {
        Err(ApiError::invalid(
            field,
            "holds a NUL character, which no command line or environment can carry",
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_used_in_paths_refuse_separators_and_dots() {
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "x/y",
            "../etc",
            "-a",
            "a b",
            "a\0",
            &"a".repeat(65),
        ] {
            assert!(check_name("id", bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a1", "gpu-pool", "node.example.com", "a:b_c"] {
            assert!(check_name("id", good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn image_names_are_references_without_dot_components() {
        for bad in [
            "",
            "/busybox",
            "busybox/",
            "a//b",
            "a/../b",
            "./b",
            "a/.hidden",
            "a b",
        ] {
            assert!(check_image_name("name", bad).is_err(), "{bad:?} accepted");
        }
        for good in [
            "busybox",
            "registry:5000/team/py:3.12",
            "ubuntu@sha256:ab12",
        ] {
            assert!(check_image_name("name", good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn relative_paths_are_the_ones_that_round_trip() {
        let long = "a".repeat(300);
        for bad in [
            "",
            ".",
            "./x",
            "a/",
            "a//b",
            "..",
            "a/../b",
            "/etc/passwd",
            "a\0b",
            "a\nb",
            &long,
        ] {
            assert!(
                check_relative("inputs[0]", bad).is_err(),
                "{bad:?} accepted"
            );
        }
        for good in ["data.csv", "dir/x#y?z.txt", "..foo", "a.b/c"] {
            assert!(
                check_relative("inputs[0]", good).is_ok(),
                "{good:?} refused"
            );
        }
    }
}
