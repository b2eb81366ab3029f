//! What the providers that start programs on this host share (`process`, `docker`, `exec`): the
//! agent's command line and environment built from a launch request, the identity of a process
//! in `/proc` (pid plus start time, so a reused pid is not mistaken for an agent), stopping the
//! process groups of a session (with the runtime's escalation to SIGKILL), and the option
//! checks they have in common.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use crate::{Context, Instance, LaunchRequest, ProviderError, TemplateOffer, TEMPLATE_LABEL};

pub(crate) use corral_api::identity::{
    AGENT_ENV, ENV_CAPACITY, ENV_GROUP, ENV_ID, ENV_SERVER, ENV_TOKEN,
};

/// How the agent runs its sessions (`corral agent --runtime`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentRuntime {
    /// Processes of the agent's host.
    #[default]
    Process,
    /// Docker containers on the agent's host.
    Docker,
}

impl AgentRuntime {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentRuntime::Process => "process",
            AgentRuntime::Docker => "docker",
        }
    }
}

/// Everything one launched agent must be told, from the context and its launch request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentSpec {
    pub server: String,
    pub group: String,
    pub agent_id: String,
    pub template: String,
    /// The template's slots in canonical form; `None` lets the agent detect its capacity.
    pub capacity: Option<String>,
    pub token: String,
}

impl AgentSpec {
    /// Fails (fatal) for a template the group does not have, and for an agent id that is not
    /// of the manager's form: ids become file and container names.
    pub fn new(
        context: &Context,
        template: &str,
        request: &LaunchRequest,
    ) -> Result<Self, ProviderError> {
        if !is_agent_id(&request.agent_id) {
            return Err(ProviderError::fatal(format!(
                "agent id {:?} is not of the form [a-z0-9]([a-z0-9-]*[a-z0-9])? (at most 52 chars)",
                request.agent_id
            )));
        }
        let slots = context.template(template)?.slots.to_string();
        Ok(AgentSpec {
            server: context.manager_url.clone(),
            group: context.group.clone(),
            agent_id: request.agent_id.clone(),
            template: template.to_string(),
            capacity: Some(slots).filter(|s| !s.is_empty()),
            token: request.token.clone(),
        })
    }

    /// `--label corral.io/template=<template>`'s value: the agent advertises its template.
    pub fn template_label(&self) -> String {
        format!("{TEMPLATE_LABEL}={}", self.template)
    }

    /// The `corral agent` flags naming group, id, capacity and template label. The manager URL
    /// is a global flag (before `agent`) and the token is never a flag (argv is world-readable).
    pub fn agent_flags(&self) -> Vec<String> {
        let mut flags = vec![
            "--group".to_string(),
            self.group.clone(),
            "--id".into(),
            self.agent_id.clone(),
        ];
        if let Some(capacity) = &self.capacity {
            flags.extend(["--capacity".into(), capacity.clone()]);
        }
        flags.extend(["--label".into(), self.template_label()]);
        flags
    }

    /// All settings as the agent's environment variables.
    pub fn environment(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            (ENV_SERVER, self.server.clone()),
            (ENV_TOKEN, self.token.clone()),
            (ENV_GROUP, self.group.clone()),
            (ENV_ID, self.agent_id.clone()),
        ];
        if let Some(capacity) = &self.capacity {
            env.push((ENV_CAPACITY, capacity.clone()));
        }
        env
    }
}

/// Whether `id` has the form the manager gives agent ids: `[a-z0-9]([a-z0-9-]*[a-z0-9])?`, at
/// most 52 characters. Such an id is safe as a file name and in a container name.
pub(crate) fn is_agent_id(id: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !id.is_empty()
        && id.len() <= 52
        && id.chars().all(|c| ok_char(c) || c == '-')
        && !id.starts_with('-')
        && !id.ends_with('-')
}

/// The group's templates as offers: what the local providers can launch.
pub(crate) fn offers(context: &Context) -> Vec<TemplateOffer> {
    context
        .templates
        .iter()
        .map(|t| TemplateOffer {
            name: t.name.clone(),
            slots: t.slots.to_string(),
            price_per_hour: Some(t.price_per_hour),
        })
        .collect()
}

/// Launches the requests one after the other and stops at the first failure (the next ones
/// would most likely fail alike). A failure after some launches is a partial launch: those are
/// returned and the rest count as failed; a failure of the first is the call's error.
pub(crate) async fn launch_each<'a, F, Fut>(
    provider: &str,
    template: &str,
    requests: &'a [LaunchRequest],
    mut launch_one: F,
) -> Result<Vec<Instance>, ProviderError>
where
    F: FnMut(&'a LaunchRequest) -> Fut,
    Fut: Future<Output = Result<Instance, ProviderError>>,
{
    let mut launched = Vec::with_capacity(requests.len());
    for request in requests {
        match launch_one(request).await {
            Ok(instance) => launched.push(instance),
            Err(e) if launched.is_empty() => return Err(e),
            Err(e) => {
                tracing::warn!(
                    provider,
                    template,
                    agent = %request.agent_id,
                    error = %e,
                    "partial launch: {} of {} started",
                    launched.len(),
                    requests.len()
                );
                break;
            }
        }
    }
    Ok(launched)
}

/// Terminates every id at once (so that grace periods and scheduler calls overlap); the first
/// failure, if any, after all were tried.
pub(crate) async fn terminate_each<'a, F, Fut>(
    ids: &'a [String],
    terminate_one: F,
) -> Result<(), ProviderError>
where
    F: FnMut(&'a String) -> Fut,
    Fut: Future<Output = Result<(), ProviderError>>,
{
    let results = futures_util::future::join_all(ids.iter().map(terminate_one)).await;
    results.into_iter().collect()
}

// What /proc says of processes: the runtime crate reads it for sessions, the same way.
pub(crate) use corral_runtime::procfs::{
    is_same_live_process, session_groups, signal_group, stat as proc_stat,
};

/// How long processes get to vanish after SIGKILL (they cannot ignore it).
const AFTER_KILL: Duration = Duration::from_secs(2);

/// Stops every process group of the session `sid`: SIGTERM, up to `grace` for them to exit,
/// then SIGKILL (see `corral_runtime::terminate_then_kill`). Bounded by `grace` plus two
/// seconds; fails if live members remain after that.
pub(crate) async fn stop_session(sid: i32, grace: Duration) -> io::Result<()> {
    let mut failed = None;
    let left = corral_runtime::terminate_then_kill(
        |signal| {
            let groups = session_groups(sid);
            if let Some(signal) = signal {
                for &pgid in &groups {
                    if let Err(e) = signal_group(pgid, signal) {
                        failed.get_or_insert(e);
                    }
                }
            }
            std::future::ready(groups.into_iter().collect())
        },
        grace,
        AFTER_KILL,
    )
    .await;
    match (left.is_empty(), failed) {
        (true, _) => Ok(()),
        (false, Some(e)) => Err(e),
        (false, None) => Err(io::Error::other(format!(
            "process groups {left:?} of session {sid} are still alive after SIGKILL"
        ))),
    }
}

/// Kills a process group with SIGKILL when dropped, unless disarmed: a call whose future is
/// dropped (the manager's timeout) leaves nothing of what it started running.
pub(crate) struct KillGroupOnDrop {
    pgid: Option<i32>,
}

impl KillGroupOnDrop {
    pub fn new(pgid: i32) -> Self {
        KillGroupOnDrop { pgid: Some(pgid) }
    }

    /// The group's leader was reaped: its id may be reused, so it must not be signalled.
    pub fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            let _ = signal_group(pgid, libc::SIGKILL);
        }
    }
}

/// Option fields checked while they are read, so that configuration errors name the field.
pub(crate) mod checked {
    use super::*;
    use serde::de::Error;

    /// A map of environment variables: POSIX names, values without NUL.
    pub fn env_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
        let map = BTreeMap::<String, String>::deserialize(d)?;
        for (name, value) in &map {
            check_env_name(name).map_err(D::Error::custom)?;
            if value.contains('\0') {
                return Err(D::Error::custom(format!(
                    "the value of {name} holds a NUL byte"
                )));
            }
        }
        Ok(map)
    }

    /// Like [`env_map`], without the variables the provider sets for the agent itself.
    pub fn extra_agent_env<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        let map = env_map(d)?;
        if let Some(name) = map.keys().find(|k| AGENT_ENV.contains(&k.as_str())) {
            return Err(D::Error::custom(format!(
                "{name} is set by the provider for each agent"
            )));
        }
        Ok(map)
    }

    /// Command-line arguments: none holds a NUL byte (they could not be passed).
    pub fn args<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        let args = Vec::<String>::deserialize(d)?;
        if let Some(i) = args.iter().position(|a| a.contains('\0')) {
            return Err(D::Error::custom(format!("argument {i} holds a NUL byte")));
        }
        Ok(args)
    }

    /// A string that is not empty.
    pub fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim().is_empty() {
            return Err(D::Error::custom("must not be empty"));
        }
        Ok(s)
    }

    fn check_env_name(name: &str) -> Result<(), String> {
        let mut chars = name.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            Ok(())
        } else {
            Err(format!(
                "{name:?} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_core::InstanceTemplate;

    fn context() -> Context {
        Context {
            group: "gpu".into(),
            manager_url: "http://127.0.0.1:8470".into(),
            templates: vec![InstanceTemplate {
                name: "small".into(),
                slots: "mem=4GiB,cpu=2".parse().unwrap(),
                price_per_hour: 0.5,
                max: 0,
                labels: BTreeMap::new(),
                devices: Vec::new(),
            }],
            corral_binary: "/usr/bin/corral".into(),
            state_dir: "/tmp/x".into(),
        }
    }

    #[test]
    fn agent_ids_of_the_managers_form_only() {
        for good in ["a", "a1", "ab-cd-9", &"x".repeat(52)] {
            assert!(is_agent_id(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "../x", "a/b", &"x".repeat(53)] {
            assert!(!is_agent_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_spec_carries_canonical_slots_and_keeps_the_token_out_of_flags() {
        let request = LaunchRequest {
            agent_id: "a-1".into(),
            token: "tok".into(),
        };
        let spec = AgentSpec::new(&context(), "small", &request).unwrap();
        assert_eq!(
            spec.agent_flags(),
            [
                "--group",
                "gpu",
                "--id",
                "a-1",
                "--capacity",
                "cpu=2,mem=4GiB",
                "--label",
                "corral.io/template=small"
            ]
        );
        assert!(!spec.agent_flags().iter().any(|f| f.contains("tok")));
        assert!(spec.environment().contains(&(ENV_TOKEN, "tok".into())));
        let e = AgentSpec::new(&context(), "large", &request).unwrap_err();
        assert_eq!(e.class, crate::ErrorClass::Fatal);
        let bad = LaunchRequest {
            agent_id: "../etc".into(),
            token: "t".into(),
        };
        assert!(AgentSpec::new(&context(), "small", &bad).is_err());
    }
}
