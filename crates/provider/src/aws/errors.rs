//! Classifies AWS failures by their error code, so the manager knows whether to try another
//! template (capacity), retry soon (transient) or wait for an operator (fatal).

use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use crate::{ErrorClass, ProviderError};

/// The vendor has no room, the account hit a quota, or the instance type is not offered here.
const CAPACITY: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientFreeAddressesInSubnet",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "Unsupported",
];

/// Throttling and AWS-side failures: the same call may well work shortly.
const TRANSIENT: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "ServerInternal",
    "RequestTimeout",
    "RequestTimeoutException",
    // Auto Scaling: another scaling activity holds the group.
    "ScalingActivityInProgress",
    "ResourceContention",
];

/// The class of an AWS error code. Unknown codes are fatal: they mean a request AWS rejects as
/// written (bad AMI, parameters, credentials, permissions), which retrying does not fix.
pub fn class_of(code: &str, message: &str) -> ErrorClass {
    if CAPACITY.contains(&code) || names_instance_type(code, message) {
        ErrorClass::Capacity
    } else if TRANSIENT.contains(&code) {
        ErrorClass::Transient
    } else {
        ErrorClass::Fatal
    }
}

/// An instance type unknown or not offered here: another template may well launch, so this
/// backs the template off instead of stopping the group. Moto (with instance type validation)
/// answers `InvalidInstanceType.NotFound`; AWS answers `InvalidParameterValue` naming
/// `InstanceType`.
fn names_instance_type(code: &str, message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    code.starts_with("InvalidInstanceType")
        || (code == "InvalidParameterValue"
            && (message.contains("instancetype") || message.contains("instance type")))
}

/// A failed SDK call as a provider error. `what` names the call and its subject, e.g.
/// `RunInstances g4dn.xlarge`.
pub fn sdk_error<E>(what: &str, err: SdkError<E, HttpResponse>) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let detail = DisplayErrorContext(&err).to_string();
    match &err {
        SdkError::ServiceError(service) => match service.err().code() {
            Some(code) => {
                let message = service.err().message().unwrap_or("");
                ProviderError {
                    class: class_of(code, message),
                    message: format!("{what}: {code}: {message}"),
                }
            }
            None => {
                let status = service.raw().status();
                let class = if status.is_server_error() || status.as_u16() == 429 {
                    ErrorClass::Transient
                } else {
                    ErrorClass::Fatal
                };
                ProviderError {
                    class,
                    message: format!("{what}: HTTP {}: {detail}", status.as_u16()),
                }
            }
        },
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            ProviderError::transient(format!("{what}: {detail}"))
        }
        // Network failures are transient; the rest (credentials that cannot be loaded, a
        // request that cannot be signed) need an operator.
        SdkError::DispatchFailure(failure) if failure.is_io() || failure.is_timeout() => {
            ProviderError::transient(format!("{what}: {detail}"))
        }
        _ => ProviderError::fatal(format!("{what}: {detail}")),
    }
}

/// The error code of a failed call, if AWS answered with one.
pub fn code_of<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<&str> {
    match err {
        SdkError::ServiceError(service) => service.err().code(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_ec2::operation::run_instances::RunInstancesError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;

    #[test]
    fn codes_decide_the_class() {
        let cases = [
            ("InsufficientInstanceCapacity", "", ErrorClass::Capacity),
            ("InstanceLimitExceeded", "", ErrorClass::Capacity),
            ("VcpuLimitExceeded", "", ErrorClass::Capacity),
            (
                "Unsupported",
                "not offered in us-east-1e",
                ErrorClass::Capacity,
            ),
            ("InvalidInstanceType.NotFound", "", ErrorClass::Capacity),
            (
                "InvalidParameterValue",
                "Invalid value 'x9.mega' for InstanceType.",
                ErrorClass::Capacity,
            ),
            ("InvalidParameterValue", "Invalid subnet", ErrorClass::Fatal),
            ("RequestLimitExceeded", "", ErrorClass::Transient),
            ("Throttling", "", ErrorClass::Transient),
            ("InternalError", "", ErrorClass::Transient),
            ("ServiceUnavailable", "", ErrorClass::Transient),
            ("AuthFailure", "", ErrorClass::Fatal),
            ("UnauthorizedOperation", "", ErrorClass::Fatal),
            ("InvalidAMIID.NotFound", "", ErrorClass::Fatal),
            ("InvalidAMIID.Malformed", "", ErrorClass::Fatal),
            ("InvalidParameterCombination", "", ErrorClass::Fatal),
            ("UnsupportedOperation", "", ErrorClass::Fatal),
        ];
        for (code, message, class) in cases {
            assert_eq!(class_of(code, message), class, "{code}: {message}");
        }
    }

    fn service_error(status: u16, code: Option<&str>) -> SdkError<RunInstancesError, HttpResponse> {
        let mut meta = ErrorMetadata::builder().message("We have no capacity");
        if let Some(code) = code {
            meta = meta.code(code);
        }
        let raw = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        SdkError::service_error(RunInstancesError::generic(meta.build()), raw)
    }

    #[test]
    fn sdk_errors_name_the_call_code_and_message() {
        let error = sdk_error(
            "RunInstances g4dn.xlarge",
            service_error(500, Some("InsufficientInstanceCapacity")),
        );
        assert_eq!(error.class, ErrorClass::Capacity);
        assert_eq!(
            error.message,
            "RunInstances g4dn.xlarge: InsufficientInstanceCapacity: We have no capacity"
        );
        // Without a code, the HTTP status decides.
        let error = sdk_error("RunInstances m5.large", service_error(503, None));
        assert_eq!(error.class, ErrorClass::Transient, "{error}");
        assert!(error.message.contains("HTTP 503"), "{error}");
        let error = sdk_error("RunInstances m5.large", service_error(403, None));
        assert_eq!(error.class, ErrorClass::Fatal, "{error}");
    }

    #[test]
    fn no_answer_is_transient_unless_the_request_could_not_be_made() {
        let timeout = SdkError::<RunInstancesError, HttpResponse>::timeout_error("slow");
        let error = sdk_error("RunInstances m5.large", timeout);
        assert_eq!(error.class, ErrorClass::Transient);
        assert!(
            error.message.starts_with("RunInstances m5.large: "),
            "{error}"
        );
        let refused = SdkError::<RunInstancesError, HttpResponse>::dispatch_failure(
            ConnectorError::io("connection refused".into()),
        );
        assert_eq!(sdk_error("x", refused).class, ErrorClass::Transient);
        let no_credentials = SdkError::<RunInstancesError, HttpResponse>::dispatch_failure(
            ConnectorError::other("no credentials in the chain".into(), None),
        );
        let error = sdk_error("DescribeInstances", no_credentials);
        assert_eq!(error.class, ErrorClass::Fatal);
        assert!(error.message.contains("no credentials"), "{error}");
    }
}
