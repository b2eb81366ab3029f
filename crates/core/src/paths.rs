//! The paths of a session's files (inputs it is given, outputs it leaves) as people write them:
//! relative, `/`-separated, with no empty, `.` or `..` component, no control character, at most
//! 1,024 bytes and 255 a component. Only such paths can be uploaded, stored, staged and
//! downloaded as given, so the manager refuses any other at submit, and the agent, the runtime
//! and the client check again what they are handed, by this one rule.

use std::path::Path;

/// The longest path.
pub const MAX_PATH: usize = 1024;
/// The longest component (what file systems allow).
pub const MAX_COMPONENT: usize = 255;

/// Why a path is not a session path; the text completes "the path ...".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("is empty")]
    Empty,
    #[error("is longer than {MAX_PATH} bytes")]
    TooLong,
    #[error("holds a control character (NUL, newline...)")]
    Control,
    #[error("is absolute")]
    Absolute,
    #[error("has an empty component (`//` or a trailing `/`)")]
    EmptyComponent,
    #[error("has a \".\" component")]
    Current,
    #[error("has a \"..\" component")]
    Parent,
    #[error("has a component longer than {MAX_COMPONENT} bytes")]
    LongComponent,
}

impl PathError {
    /// The path would lead out of the session's directory (rather than being merely malformed).
    pub fn leaves(self) -> bool {
        matches!(self, PathError::Absolute | PathError::Parent)
    }
}

/// `path` as a relative path inside a session's directory, or why it is not one.
pub fn session_path(path: &str) -> Result<&Path, PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.len() > MAX_PATH {
        return Err(PathError::TooLong);
    }
    if path.chars().any(char::is_control) {
        return Err(PathError::Control);
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute);
    }
    for part in path.split('/') {
        match part {
            "" => return Err(PathError::EmptyComponent),
            "." => return Err(PathError::Current),
            ".." => return Err(PathError::Parent),
            p if p.len() > MAX_COMPONENT => return Err(PathError::LongComponent),
            _ => {}
        }
    }
    Ok(Path::new(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_relative_paths_pass_as_given() {
        for good in [
            "a",
            "out/result.txt",
            "x#y?.txt",
            "dir with space/f",
            "é/ü.txt",
        ] {
            assert_eq!(session_path(good), Ok(Path::new(good)), "{good}");
        }
    }

    #[test]
    fn every_other_path_is_refused_with_its_reason() {
        let long_component = "a".repeat(256);
        let long_path = "a/".repeat(513);
        for (bad, why) in [
            ("", PathError::Empty),
            ("/etc/passwd", PathError::Absolute),
            ("../x", PathError::Parent),
            ("a/../../x", PathError::Parent),
            ("a/..", PathError::Parent),
            ("./a", PathError::Current),
            ("a//b", PathError::EmptyComponent),
            ("a/", PathError::EmptyComponent),
            ("a\0b", PathError::Control),
            ("a\nb", PathError::Control),
            (long_component.as_str(), PathError::LongComponent),
            (long_path.as_str(), PathError::TooLong),
        ] {
            assert_eq!(session_path(bad), Err(why), "{bad:?}");
        }
        assert!(PathError::Parent.leaves() && PathError::Absolute.leaves());
        assert!(!PathError::Current.leaves() && !PathError::Control.leaves());
    }
}
