//! Image auto-update on the agent: the digest of each image it holds (new sessions of the image
//! start on it, pinned), and, while its group's policy is on, a check every interval of what
//! the registry's tag names now, a new digest pulled in the background. Running sessions keep
//! their image. What it holds goes to the manager at the next sync after a change; what it
//! could not check or pull goes too, and is tried again later and later (backoff). The digests
//! held are kept in `<work_root>/images.json`: an agent restarted after an update starts new
//! sessions on the digest it last ran, not on the older one the host's tag still names.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use corral_api::images::{HeldImage, ImageCheck, ImageProblem, RegistryLogin};
use corral_core::image_update::next_check_secs;
use corral_registry::{Credentials, Reference, Registries};
use corral_runtime::{repository_of, DockerRuntime};
use tokio::time::Instant;

/// How long one registry request may take.
const REGISTRY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one pull may take: a daemon that hangs must not stop the checks for good.
const PULL_TIMEOUT: Duration = Duration::from_secs(1800);

#[derive(Default)]
pub(crate) struct Images {
    state: Mutex<State>,
    /// Where the digests held are kept across restarts (none in tests).
    file: Option<PathBuf>,
}

#[derive(Default)]
struct State {
    held: BTreeMap<String, Held>,
    /// Bumped at each change of `held`; `reported` is the last one the manager has.
    changes: u64,
    reported: Option<u64>,
    problems: Vec<ImageProblem>,
    /// The group's policy, as the last sync said (`None`: off).
    policy: Option<ImageCheck>,
    /// Checks failed in a row.
    failures: u32,
    next_check: Option<Instant>,
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Held {
    digest: String,
    offered: Option<String>,
}

/// What goes to the manager in a sync.
pub(crate) struct Report {
    pub images: Option<Vec<HeldImage>>,
    pub problems: Vec<ImageProblem>,
    changes: u64,
}

/// The file the digests held are kept in, under the agent's work directory.
const FILE: &str = "images.json";

impl Images {
    /// The digests kept in `work_root` by an earlier run (none if there is no readable file).
    pub(crate) fn kept(work_root: &std::path::Path) -> Images {
        let file = work_root.join(FILE);
        let held = match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %file.display(), error = %e, "unreadable image record ignored");
                BTreeMap::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "image record not read");
                BTreeMap::new()
            }
        };
        Images {
            state: Mutex::new(State {
                held,
                ..State::default()
            }),
            file: Some(file),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps the digests held for the next run. A failure is reported, not fatal: without the
    /// record a restarted agent learns digests from the host again.
    fn keep(&self) {
        let Some(file) = &self.file else { return };
        let held = self.lock().held.clone();
        let written = serde_json::to_vec(&held)
            .map_err(std::io::Error::other)
            .and_then(|bytes| corral_runtime::write_atomic(file, &bytes));
        if let Err(e) = written {
            tracing::warn!(file = %file.display(), error = %e, "image record not kept");
        }
    }

    /// What a session of `image` runs: the digest held, pinned; one seen first is learned from
    /// the host (the digest its tag came from). An image from no registry runs as named.
    pub(crate) async fn pinned(&self, docker: &DockerRuntime, image: &str) -> String {
        if let Some(held) = self.lock().held.get(image) {
            return format!("{}@{}", repository_of(image), held.digest);
        }
        match docker.image_digest(image).await {
            Ok(Some(digest)) => {
                let pinned = format!("{}@{digest}", repository_of(image));
                {
                    let mut state = self.lock();
                    state.held.entry(image.to_string()).or_insert(Held {
                        digest,
                        offered: None,
                    });
                    state.changes += 1;
                }
                self.keep();
                pinned
            }
            Ok(None) => image.to_string(),
            Err(e) => {
                tracing::warn!(image, error = %e, "could not read the image's digest");
                image.to_string()
            }
        }
    }

    /// The group's policy as the last sync said. Switched on, or to another interval, the next
    /// check is one (new) interval away.
    pub(crate) fn set_policy(&self, policy: Option<ImageCheck>) {
        let mut state = self.lock();
        let interval = |p: &Option<ImageCheck>| p.as_ref().map(|p| p.interval_secs);
        if interval(&policy) != interval(&state.policy) {
            state.next_check = None;
            state.failures = 0;
        }
        state.policy = policy;
    }

    /// The manager may have forgotten what it was told (a new join): tell it again.
    pub(crate) fn joined(&self) {
        self.lock().reported = None;
    }

    /// What to tell the manager now.
    pub(crate) fn report(&self) -> Report {
        let mut state = self.lock();
        let images = (state.reported != Some(state.changes)).then(|| {
            state
                .held
                .iter()
                .map(|(image, h)| HeldImage {
                    image: image.clone(),
                    digest: h.digest.clone(),
                    offered: h.offered.clone(),
                })
                .collect()
        });
        Report {
            images,
            problems: std::mem::take(&mut state.problems),
            changes: state.changes,
        }
    }

    /// The sync carrying `report` went through (`true`) or not: problems not told are told
    /// at the next.
    pub(crate) fn reported(&self, report: Report, delivered: bool) {
        let mut state = self.lock();
        if delivered {
            if report.images.is_some() {
                state.reported = Some(report.changes);
            }
        } else {
            let mut problems = report.problems;
            problems.append(&mut state.problems);
            state.problems = problems;
        }
    }

    /// Checks the images it holds if the policy is on and their time has come; whether
    /// anything changed or failed (something to report).
    pub(crate) async fn check_if_due(
        &self,
        docker: &DockerRuntime,
        registries: &Registries,
    ) -> bool {
        let (interval, logins, held) = {
            let mut state = self.lock();
            let Some(policy) = &state.policy else {
                return false;
            };
            let interval = policy.interval_secs;
            let logins = policy.logins.clone();
            let now = Instant::now();
            match state.next_check {
                // The first check is one interval after the policy is heard.
                None => {
                    state.next_check = Some(now + Duration::from_secs(interval));
                    return false;
                }
                Some(at) if at > now => return false,
                Some(_) => {}
            }
            (interval, logins, state.held.clone())
        };
        let mut checked = Checked::default();
        for (image, held) in held {
            match newest(docker, registries, &logins, &image, &held).await {
                Ok(offered) => checked.found.push((image, offered)),
                Err(reason) => checked.failed.push((image, reason)),
            }
        }
        let (something, changed) = {
            let mut state = self.lock();
            let changes = state.changes;
            let something = state.apply(interval, checked, Instant::now());
            (something, state.changes != changes)
        };
        if changed {
            self.keep();
        }
        something
    }
}

/// What one check found: the digest each image's tag names now (held, pulled if new), and
/// the images it could not check or pull, with why.
#[derive(Default)]
struct Checked {
    found: Vec<(String, String)>,
    failed: Vec<(String, String)>,
}

impl State {
    /// Takes in a check's results at `now`: the digests held, the next check (backed off while
    /// checks fail), the problems to report; whether there is something to report.
    fn apply(&mut self, interval: u64, checked: Checked, now: Instant) -> bool {
        self.failures = match checked.failed.is_empty() {
            true => 0,
            false => self.failures.saturating_add(1),
        };
        let wait = next_check_secs(interval, self.failures);
        self.next_check = Some(now + Duration::from_secs(wait));
        let mut changed = false;
        for (image, offered) in checked.found {
            if let Some(h) = self.held.get_mut(&image) {
                if h.digest != offered || h.offered.as_deref() != Some(&offered) {
                    tracing::info!(image, from = h.digest, to = offered, "image updated");
                    h.digest = offered.clone();
                    h.offered = Some(offered);
                    changed = true;
                }
            }
        }
        if changed {
            self.changes += 1;
        }
        for (image, reason) in checked.failed {
            tracing::warn!(image, reason, retry_secs = wait, "image check failed");
            self.problems.push(ImageProblem {
                image,
                reason,
                retry_secs: wait,
            });
        }
        changed || !self.problems.is_empty()
    }
}

/// The digest `image`'s tag names now, pulled if it is not the one held; with the group's
/// account on its registry, if it has one.
async fn newest(
    docker: &DockerRuntime,
    registries: &Registries,
    logins: &[RegistryLogin],
    image: &str,
    held: &Held,
) -> Result<String, String> {
    let reference: Reference = image.parse().map_err(|e| format!("{e}"))?;
    let login = logins
        .iter()
        .find(|l| l.registry == reference.registry())
        .map(|l| Credentials {
            username: l.username.clone(),
            password: l.password.clone(),
        });
    let asked = registries.digest(&reference, login.as_ref());
    let offered = tokio::time::timeout(REGISTRY_TIMEOUT, asked)
        .await
        .map_err(|_| {
            format!(
                "the registry did not answer within {} s",
                REGISTRY_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| e.to_string())?
        .to_string();
    if offered != held.digest {
        let login = login.map(|l| (l.username, l.password));
        let pull = docker.pull(repository_of(image), &offered, login);
        tokio::time::timeout(PULL_TIMEOUT, pull)
            .await
            .map_err(|_| format!("the pull took over {} s", PULL_TIMEOUT.as_secs()))?
            .map_err(|e| e.to_string())?;
    }
    Ok(offered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digests_held_outlive_a_restart() {
        let root = tempfile::tempdir().unwrap();
        let before = Images::kept(root.path());
        holding(&before, "registry.example/app:1", "sha256:v2");
        before.keep();
        let after = Images::kept(root.path());
        let report = after.report().images.unwrap();
        assert_eq!(report.len(), 1);
        assert_eq!(
            (report[0].image.as_str(), report[0].digest.as_str()),
            ("registry.example/app:1", "sha256:v2")
        );
        std::fs::write(root.path().join(FILE), "not json").unwrap();
        assert!(Images::kept(root.path())
            .report()
            .images
            .unwrap()
            .is_empty());
    }

    fn holding(images: &Images, image: &str, digest: &str) {
        let mut state = images.lock();
        state.held.insert(
            image.into(),
            Held {
                digest: digest.into(),
                offered: None,
            },
        );
        state.changes += 1;
    }

    fn problem(image: &str) -> ImageProblem {
        ImageProblem {
            image: image.into(),
            reason: "down".into(),
            retry_secs: 4,
        }
    }

    #[test]
    fn what_it_holds_is_told_once_after_each_change_and_again_after_a_join() {
        let images = Images::default();
        let first = images.report();
        assert_eq!(first.images, Some(Vec::new()), "told at the start");
        images.reported(first, true);
        assert_eq!(images.report().images, None);
        holding(&images, "r/x:1", "sha256:a");
        let told = images.report();
        assert_eq!(
            told.images,
            Some(vec![HeldImage {
                image: "r/x:1".into(),
                digest: "sha256:a".into(),
                offered: None,
            }])
        );
        // A change while the sync was under way is told at the next.
        holding(&images, "r/y:1", "sha256:b");
        images.reported(told, true);
        assert_eq!(images.report().images.map(|i| i.len()), Some(2));
        let again = images.report();
        images.reported(again, true);
        assert_eq!(images.report().images, None);
        images.joined();
        assert_eq!(images.report().images.map(|i| i.len()), Some(2));
    }

    #[test]
    fn problems_not_delivered_are_told_at_the_next_sync_in_order() {
        let images = Images::default();
        images.lock().problems.push(problem("r/x:1"));
        let lost = images.report();
        assert_eq!(lost.problems, [problem("r/x:1")]);
        images.lock().problems.push(problem("r/y:1"));
        images.reported(lost, false);
        let next = images.report();
        assert_eq!(next.problems, [problem("r/x:1"), problem("r/y:1")]);
        images.reported(next, true);
        assert!(images.report().problems.is_empty());
    }

    #[test]
    fn a_policy_switched_on_or_to_another_interval_checks_one_interval_later() {
        let images = Images::default();
        let on = |secs| {
            Some(ImageCheck {
                interval_secs: secs,
                logins: Vec::new(),
            })
        };
        images.set_policy(on(60));
        images.lock().next_check = Some(Instant::now());
        images.lock().failures = 3;
        images.set_policy(on(60));
        assert!(
            images.lock().next_check.is_some(),
            "the same policy keeps its schedule"
        );
        images.set_policy(on(5));
        let state = images.lock();
        assert_eq!((state.next_check, state.failures), (None, 0));
    }

    #[test]
    fn a_check_moves_to_what_the_registry_offers_and_failed_checks_back_off() {
        let mut state = State::default();
        state.held.insert(
            "r/x:1".into(),
            Held {
                digest: "sha256:a".into(),
                offered: None,
            },
        );
        let now = Instant::now();
        let found = |digest: &str| Checked {
            found: vec![("r/x:1".into(), digest.into())],
            failed: Vec::new(),
        };
        let failed = || Checked {
            found: Vec::new(),
            failed: vec![("r/x:1".into(), "down".into())],
        };

        assert!(
            state.apply(2, found("sha256:b"), now),
            "a new digest is news"
        );
        assert_eq!(state.held["r/x:1"].digest, "sha256:b");
        assert_eq!(state.next_check, Some(now + Duration::from_secs(2)));
        assert!(
            !state.apply(2, found("sha256:b"), now),
            "the same digest is not"
        );

        // Each failure in a row doubles the wait; its problem names it.
        for wait in [4, 8, 16] {
            assert!(state.apply(2, failed(), now));
            assert_eq!(state.next_check, Some(now + Duration::from_secs(wait)));
            assert_eq!(state.problems.pop().map(|p| p.retry_secs), Some(wait));
        }
        assert_eq!(
            state.held["r/x:1"].digest, "sha256:b",
            "a failure keeps what is held"
        );
        // A check that goes through ends the backoff.
        state.apply(2, found("sha256:b"), now);
        assert_eq!(
            (state.failures, state.next_check),
            (0, Some(now + Duration::from_secs(2)))
        );
    }
}
