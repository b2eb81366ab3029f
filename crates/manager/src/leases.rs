//! Which groups this manager runs (docs/high-availability.md). Each group's passes and scaling
//! driver run in one manager at a time, the holder of the group's lease in the database; its
//! writes are fenced with the lease's epoch ([`corral_store::Fence`]). Every `lease / 3` the
//! keeper says this manager is at work, renews its leases, and takes or lets go of groups so
//! that they spread over the managers at work (rendezvous hashing: when a manager comes or
//! goes, only its share moves). A lease its holder stopped renewing is taken over once it
//! expires, by the database's clock (managers' own clocks may disagree). On SQLite, one manager owns the database (the data directory's lock): it takes
//! every lease when it starts, whoever held it (an earlier start of itself).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corral_core::Timestamp;
use corral_store::{Lease, Store, StoreError, Wake};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::control::Control;
use crate::now;

/// This manager's part in sharing groups with the others on its database.
pub struct Leases {
    /// This manager, as leases name it: unique per process start.
    pub owner: String,
    ttl: Duration,
    /// One manager per database (SQLite): it counts on no other, and takes every lease when it
    /// starts, whoever held it.
    single: bool,
    /// Rounds the keeper runs early (a group this manager does not run was woken).
    kick: Notify,
    /// Groups another manager held at the last round: a wake of one needs no round here.
    held_elsewhere: Mutex<HashSet<String>>,
    /// The manager stopped: the keeper takes nothing more.
    stopped: AtomicBool,
    /// The managers at work at the last round, this one among them.
    at_work: Mutex<Vec<String>>,
}

/// What a round does to the groups.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Moves {
    /// Free (never held, let go, or expired): this manager takes them.
    pub take: Vec<String>,
    /// Held here, but another manager at work is where they belong.
    pub release: Vec<String>,
}

impl Leases {
    pub fn new(ttl: Duration, single: bool) -> Self {
        let mut random = [0u8; 4];
        getrandom::fill(&mut random).expect("the system's random source works");
        let host = hostname();
        Leases {
            owner: format!("{host}-{}-{}", std::process::id(), hex::encode(random)),
            ttl,
            single,
            kick: Notify::new(),
            held_elsewhere: Mutex::default(),
            stopped: AtomicBool::new(false),
            at_work: Mutex::default(),
        }
    }

    /// Whether the work of the whole database named `job` (not a group's: the retention's)
    /// is this manager's: the one it belongs with among those at work, as groups are spread.
    /// Until the first round has seen the others, it is nobody's.
    pub(crate) fn runs_here(&self, job: &str) -> bool {
        let at_work = self.at_work.lock().unwrap_or_else(|p| p.into_inner());
        self.single || belongs_with(job, &at_work) == Some(self.owner.as_str())
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// A group this manager does not run was woken: unless another manager held it at the
    /// last round, the keeper looks at once (a new group is taken without waiting a round).
    pub(crate) fn unowned_woken(&self, group: &str) {
        let elsewhere = self
            .held_elsewhere
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(group);
        if !elsewhere {
            self.kick.notify_one();
        }
    }
}

/// The manager `group` belongs with among `managers`: the one with the highest hash of the
/// pair (rendezvous hashing).
pub fn belongs_with<'a>(group: &str, managers: &'a [String]) -> Option<&'a str> {
    managers
        .iter()
        .max_by_key(|m| {
            let mut h = Sha256::new();
            h.update(group.as_bytes());
            h.update([0]);
            h.update(m.as_bytes());
            let d = h.finalize();
            (u64::from_be_bytes(d[..8].try_into().expect("8 bytes")), *m)
        })
        .map(String::as_str)
}

/// What this manager (`me`) does with each group, from the leases and the managers at work
/// (`me` among them). A free lease goes to the manager it belongs with; when that one has not
/// taken it within a lease's length (busy, or just gone), any manager may. With `force`, every
/// lease not held here is taken.
pub(crate) fn moves(
    me: &str,
    groups: &[String],
    leases: &[Lease],
    managers: &[String],
    now: Timestamp,
    ttl_ms: i64,
    force: bool,
) -> Moves {
    let by_group: HashMap<&str, &Lease> = leases.iter().map(|l| (l.group.as_str(), l)).collect();
    let mut out = Moves::default();
    for group in groups {
        let lease = by_group.get(group.as_str());
        let mine = lease.is_some_and(|l| l.owner == me && l.expires_at > now);
        if force {
            if !mine {
                out.take.push(group.clone());
            }
            continue;
        }
        let home = belongs_with(group, managers).unwrap_or(me);
        let expired_at = lease.map_or(Timestamp(0), |l| l.expires_at);
        match (mine, home == me) {
            (true, false) => out.release.push(group.clone()),
            (false, true) if expired_at <= now => out.take.push(group.clone()),
            (false, false) if expired_at.0.saturating_add(ttl_ms) <= now.0 => {
                out.take.push(group.clone())
            }
            _ => {}
        }
    }
    out
}

/// Runs the keeper until the process ends.
pub(crate) async fn keep(control: Arc<Control>, leases: Arc<Leases>, store: Store) {
    let every = (leases.ttl / 3).max(Duration::from_millis(100));
    let mut force = leases.single;
    while !leases.stopped.load(Ordering::SeqCst) {
        match round(&control, &leases, &store, force).await {
            Ok(()) => force = false,
            Err(e) => tracing::warn!(error = %e, "the lease round failed; trying again"),
        }
        tokio::select! {
            _ = leases.kick.notified() => {}
            _ = tokio::time::sleep(every) => {}
        }
    }
}

async fn round(
    control: &Arc<Control>,
    leases: &Leases,
    store: &Store,
    force: bool,
) -> Result<(), StoreError> {
    // The database's clock: every manager judges the leases by the same one.
    let now = store.clock(now()).await?;
    let ttl = leases.ttl_ms();
    let until = Timestamp(now.0.saturating_add(ttl));
    // Managers silent for a day are forgotten; those silent for a lease are not at work. The
    // one manager of a SQLite database counts on no other, and need not say it is at work.
    if !leases.single {
        store
            .manager_seen(&leases.owner, now, Timestamp(now.0 - 86_400_000))
            .await?;
    }
    let held = store.renew_leases(&leases.owner, until).await?;
    let held_names: HashSet<&str> = held.iter().map(|l| l.group.as_str()).collect();
    // Lost meanwhile (taken over while this manager was paused or cut off).
    for group in control.owned() {
        if !held_names.contains(group.as_str()) {
            tracing::warn!(group, "lost the group's lease to another manager");
            control.disown(&group);
        }
    }
    for lease in &held {
        if !control.owns(&lease.group) {
            control.own(lease).await?;
        }
    }
    let groups = store.group_names().await?;
    let all = store.list_leases().await?;
    let mut managers = match leases.single {
        true => Vec::new(),
        false => store.live_managers(Timestamp(now.0 - ttl)).await?,
    };
    if !managers.contains(&leases.owner) {
        managers.push(leases.owner.clone());
    }
    let moves = moves(&leases.owner, &groups, &all, &managers, now, ttl, force);
    leases
        .at_work
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone_from(&managers);
    for group in &moves.release {
        tracing::info!(
            group,
            "handing the group over to the manager it belongs with"
        );
        control.disown(group);
        store.release_lease(group, &leases.owner).await?;
    }
    for group in &moves.take {
        if leases.stopped.load(Ordering::SeqCst) {
            break;
        }
        if let Some(lease) = store
            .take_lease(group, &leases.owner, now, until, force)
            .await?
        {
            tracing::info!(group, epoch = lease.epoch, "took the group's lease");
            control.own(&lease).await?;
        }
    }
    let elsewhere = all
        .iter()
        .filter(|l| l.owner != leases.owner && l.expires_at > now)
        .map(|l| l.group.clone())
        .collect();
    *leases
        .held_elsewhere
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = elsewhere;
    Ok(())
}

/// The manager stops: its groups are let go at once rather than when their leases expire.
pub(crate) async fn stop(control: &Control, leases: &Leases, store: &Store) {
    leases.stopped.store(true, Ordering::SeqCst);
    leases.kick.notify_one();
    for group in control.owned() {
        control.disown(&group);
        if let Err(e) = store.release_lease(&group, &leases.owner).await {
            tracing::warn!(group, error = %e, "could not let the group's lease go");
        }
    }
    if let Err(e) = store.manager_stopped(&leases.owner).await {
        tracing::warn!(error = %e, "could not say that this manager stops");
    }
}

/// Passes what other managers tell on (PostgreSQL): wakes of the groups this one runs and of
/// the agents whose syncs wait here, and tokens revoked (dropped from the cache).
pub(crate) async fn listen(
    control: Arc<Control>,
    store: Store,
    tokens: Arc<crate::auth::TokenCache>,
) {
    loop {
        let mut wakes = match store.listen_wakes().await {
            Ok(Some(wakes)) => wakes,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "listening to other managers' wakes failed; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            match wakes.next().await {
                Ok(Wake::Group(group)) if control.owns(&group) => control.wake(&group),
                Ok(Wake::Group(_)) => {}
                Ok(Wake::Agents(agents)) => {
                    for agent in &agents {
                        control.wake_agent_if_waiting(agent);
                    }
                }
                Ok(Wake::Tokens(hashes)) => {
                    for hash in &hashes {
                        tokens.forget(hash);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "listening to other managers' wakes failed; trying again");
                    break;
                }
            }
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "manager".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(group: &str, owner: &str, expires_at: i64) -> Lease {
        Lease {
            group: group.into(),
            owner: owner.into(),
            epoch: 1,
            expires_at: Timestamp(expires_at),
        }
    }

    #[test]
    fn a_job_of_the_whole_database_runs_in_one_manager_at_work() {
        let managers: Vec<Leases> = (0..3)
            .map(|_| Leases::new(Duration::from_secs(5), false))
            .collect();
        let owners: Vec<String> = managers.iter().map(|m| m.owner.clone()).collect();
        // Before a round has seen the others, nobody runs it.
        assert!(managers.iter().all(|m| !m.runs_here("retention")));
        for m in &managers {
            m.at_work.lock().unwrap().clone_from(&owners);
        }
        let running = managers.iter().filter(|m| m.runs_here("retention")).count();
        assert_eq!(running, 1);
        // The one manager of a SQLite database runs it, whoever it has seen.
        assert!(Leases::new(Duration::from_secs(5), true).runs_here("retention"));
    }

    fn names(n: usize, prefix: &str) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    #[test]
    fn groups_spread_over_the_managers_and_only_a_leavers_share_moves() {
        let groups = names(300, "g");
        let three = names(3, "m");
        let home = |managers: &[String]| -> Vec<String> {
            groups
                .iter()
                .map(|g| belongs_with(g, managers).unwrap().to_string())
                .collect()
        };
        let before = home(&three);
        for m in &three {
            let share = before.iter().filter(|h| *h == m).count();
            assert!((70..=130).contains(&share), "{m} has {share} of 300");
        }
        let after = home(&three[..2]);
        for (b, a) in before.iter().zip(&after) {
            if b != "m2" {
                assert_eq!(a, b, "a group of a manager that stayed moved");
            }
        }
    }

    #[test]
    fn a_free_lease_goes_home_and_after_a_lease_anyone_takes_it() {
        let managers = names(2, "m");
        let group = (0..)
            .map(|i| format!("g{i}"))
            .find(|g| belongs_with(g, &managers) == Some("m1"))
            .unwrap();
        let groups = vec![group.clone()];
        let now = Timestamp(10_000);
        let expired = [lease(&group, "m9", 9_000)];
        let at_home = moves("m1", &groups, &expired, &managers, now, 5_000, false);
        assert_eq!(at_home.take, groups);
        let away = moves("m0", &groups, &expired, &managers, now, 5_000, false);
        assert!(away.take.is_empty(), "its home takes it first");
        let long_expired = [lease(&group, "m9", 4_000)];
        let away = moves("m0", &groups, &long_expired, &managers, now, 5_000, false);
        assert_eq!(away.take, groups, "its home did not take it within a lease");
        let held = [lease(&group, "m9", 12_000)];
        assert_eq!(
            moves("m1", &groups, &held, &managers, now, 5_000, false),
            Moves::default(),
            "a lease held is never taken"
        );
        let mine_away = [lease(&group, "m0", 12_000)];
        let handed = moves("m0", &groups, &mine_away, &managers, now, 5_000, false);
        assert_eq!(handed.release, groups, "handed over to its home");
        assert_eq!(
            moves("m0", &groups, &held, &managers, now, 5_000, true).take,
            groups,
            "a forced round takes every lease"
        );
    }
}
