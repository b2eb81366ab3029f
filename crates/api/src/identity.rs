//! The names that carry an instance's identity from the provider that launched it to the agent
//! that runs on it: environment variables (processes, containers, pods), AWS tags (read back
//! through instance metadata) and Kubernetes labels and annotations (read back through the
//! downward API). Providers write them and the agent reads them, so they live here, once.

/// The manager's URL the agent joins.
pub const ENV_SERVER: &str = "CORRAL_SERVER";
/// The one-time bootstrap token it joins with.
pub const ENV_TOKEN: &str = "CORRAL_TOKEN";
/// The group it joins.
pub const ENV_GROUP: &str = "CORRAL_AGENT_GROUP";
/// The agent id it was launched as.
pub const ENV_ID: &str = "CORRAL_AGENT_ID";
/// The template's slots, which the agent offers instead of what it detects.
pub const ENV_CAPACITY: &str = "CORRAL_AGENT_CAPACITY";
/// Seconds from the agent's start after which it takes nothing new (`corral agent --drain-after`),
/// for an agent whose end is known: a pilot job's walltime. Not in [`AGENT_ENV`]: an operator
/// may set it.
pub const ENV_DRAIN_AFTER: &str = "CORRAL_AGENT_DRAIN_AFTER";
/// A pilot job's own id, as its scheduler gave it to the job (`corral agent --batch-job`): the
/// manager takes the pilot's bootstrap token only from that job, while it runs.
pub const ENV_BATCH_JOB: &str = "CORRAL_AGENT_BATCH_JOB";
/// The variables a provider sets itself, which operators' extra variables may not replace.
pub const AGENT_ENV: [&str; 5] = [ENV_SERVER, ENV_TOKEN, ENV_GROUP, ENV_ID, ENV_CAPACITY];

/// AWS tag naming the group an instance belongs to. EC2 instance metadata cannot show tag
/// keys holding `/`, so AWS tags use this form rather than the Kubernetes labels'.
pub const GROUP_TAG: &str = "corral-group";
/// AWS tag naming the agent id an instance joins as.
pub const AGENT_TAG: &str = "corral-agent";
/// AWS tag naming the template an instance was launched from.
pub const TEMPLATE_TAG: &str = "corral-template";
/// AWS tag (Auto Scaling group mode) holding an instance's one-time bootstrap token.
pub const TOKEN_TAG: &str = "corral-bootstrap-token";
/// AWS tag (Auto Scaling group mode) holding the manager's URL.
pub const SERVER_TAG: &str = "corral-server";

/// Kubernetes (and Docker) labels: the group, the agent id and the template.
pub const GROUP_LABEL: &str = "corral.io/group";
pub const AGENT_LABEL: &str = "corral.io/agent";
pub const TEMPLATE_LABEL: &str = "corral.io/template";
/// Kubernetes annotations (StatefulSet mode): the bootstrap token and the manager's URL.
pub const BOOTSTRAP_ANNOTATION: &str = "corral.io/bootstrap-token";
pub const SERVER_ANNOTATION: &str = "corral.io/server";
