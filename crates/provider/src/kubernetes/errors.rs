//! Kubernetes API failures as the manager's error classes. Every message names the call and its
//! object (`create pod "gpu-x1" in namespace "ci"`) and quotes the API server's own status.

use kube::core::Status;

use crate::ProviderError;

/// Classifies a failed call. `call` says what was attempted, on which object.
pub fn classify(call: &str, err: &kube::Error) -> ProviderError {
    match err {
        kube::Error::Api(status) => from_status(call, status),
        // The request never got an answer: refused, reset, timed out, TLS trouble.
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            ProviderError::transient(format!(
                "{call}: cannot reach the API server: {}",
                chain(err)
            ))
        }
        // Configuration, credentials plugins, an answer that is not the Kubernetes API.
        _ => ProviderError::fatal(format!("{call}: {}", chain(err))),
    }
}

fn from_status(call: &str, status: &Status) -> ProviderError {
    let reason = if status.reason.is_empty() {
        "(no reason)"
    } else {
        &status.reason
    };
    let message = format!("{call}: HTTP {} {reason}: {}", status.code, status.message);
    match status.code {
        // ResourceQuota admission: the namespace is full, other templates may still fit.
        403 if status.message.contains("exceeded quota") => ProviderError::capacity(message),
        // Throttled, timed out or the server is struggling: try again later.
        408 | 429 | 500..=599 => ProviderError::transient(message),
        // An optimistic-concurrency conflict (someone else changed the object): a retry rereads it.
        409 if status.reason == "Conflict" => ProviderError::transient(message),
        401 => ProviderError::fatal(format!(
            "{message} (check the token or the kubeconfig's credentials)"
        )),
        // 403 (RBAC), 400/422 (invalid spec), 404 (namespace or StatefulSet), 409 AlreadyExists.
        _ => ProviderError::fatal(message),
    }
}

/// An error and its causes on one line (connection errors hide the useful part in a source).
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
    }

    #[test]
    fn statuses_map_to_classes() {
        let cases = [
            (
                api(
                    403,
                    "Forbidden",
                    "pods \"a\" is forbidden: exceeded quota: q, requested: cpu=1",
                ),
                ErrorClass::Capacity,
            ),
            (
                api(
                    403,
                    "Forbidden",
                    "pods is forbidden: User \"x\" cannot create resource \"pods\"",
                ),
                ErrorClass::Fatal,
            ),
            (api(401, "Unauthorized", "Unauthorized"), ErrorClass::Fatal),
            (
                api(422, "Invalid", "Pod \"a\" is invalid"),
                ErrorClass::Fatal,
            ),
            (
                api(404, "NotFound", "namespaces \"x\" not found"),
                ErrorClass::Fatal,
            ),
            (
                api(409, "AlreadyExists", "pods \"a\" already exists"),
                ErrorClass::Fatal,
            ),
            (
                api(409, "Conflict", "the object has been modified"),
                ErrorClass::Transient,
            ),
            (
                api(429, "TooManyRequests", "slow down"),
                ErrorClass::Transient,
            ),
            (
                api(503, "ServiceUnavailable", "etcd"),
                ErrorClass::Transient,
            ),
        ];
        for (err, class) in cases {
            let e = classify("create pod \"a\"", &err);
            assert_eq!(e.class, class, "{e}");
            assert!(e.message.starts_with("create pod \"a\": HTTP "), "{e}");
        }
    }
}
