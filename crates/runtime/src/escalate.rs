//! Ending processes that may not want to end: SIGTERM, a grace to exit cleanly, then SIGKILL,
//! sent again at each look for processes forked meanwhile, for a bounded time. The runtime
//! ends what a session left behind this way, and the providers that start local agents end
//! them the same way.

use std::future::Future;
use std::time::Duration;

/// How often the processes being ended are looked at.
const POLL: Duration = Duration::from_millis(50);

/// Ends what `send` reaches. `send(Some(signal))` signals everything it reaches and
/// `send(None)` only looks; both return the processes still alive. SIGTERM first, up to
/// `grace` for them to go, then SIGKILL at each look up to `after_kill`. Returns what outlived
/// that (empty when everything ended).
pub async fn terminate_then_kill<F, Fut>(
    mut send: F,
    grace: Duration,
    after_kill: Duration,
) -> Vec<i32>
where
    F: FnMut(Option<i32>) -> Fut,
    Fut: Future<Output = Vec<i32>>,
{
    let mut left = send(Some(libc::SIGTERM)).await;
    let deadline = tokio::time::Instant::now() + grace;
    while !left.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        left = send(None).await;
    }
    if left.is_empty() {
        return left;
    }
    tracing::info!(pids = ?left, "outlived SIGTERM; SIGKILL");
    let deadline = tokio::time::Instant::now() + after_kill;
    loop {
        left = send(Some(libc::SIGKILL)).await;
        if left.is_empty() || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A stand-in for processes: how many signals of each kind they need before they go.
    async fn run(term_needed: bool, killable: bool) -> (Vec<i32>, Vec<Option<i32>>) {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let log = sent.clone();
        let left = terminate_then_kill(
            move |signal| {
                log.lock().unwrap().push(signal);
                let seen = log.lock().unwrap().clone();
                let gone = (term_needed && seen.contains(&Some(libc::SIGTERM)))
                    || (killable && seen.contains(&Some(libc::SIGKILL)));
                async move {
                    if gone {
                        vec![]
                    } else {
                        vec![42]
                    }
                }
            },
            Duration::from_millis(120),
            Duration::from_millis(120),
        )
        .await;
        let sent = sent.lock().unwrap().clone();
        (left, sent)
    }

    #[tokio::test(start_paused = true)]
    async fn what_obeys_sigterm_is_never_killed() {
        let (left, sent) = run(true, true).await;
        assert!(left.is_empty());
        assert_eq!(sent, vec![Some(libc::SIGTERM)]);
    }

    #[tokio::test(start_paused = true)]
    async fn what_ignores_sigterm_gets_sigkill_after_the_grace() {
        let (left, sent) = run(false, true).await;
        assert!(left.is_empty());
        assert_eq!(sent.first(), Some(&Some(libc::SIGTERM)));
        assert_eq!(sent.last(), Some(&Some(libc::SIGKILL)));
        assert!(
            sent.iter().filter(|s| s.is_none()).count() >= 2,
            "looked during the grace: {sent:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn what_outlives_sigkill_is_returned_after_a_bounded_time() {
        let (left, sent) = run(false, false).await;
        assert_eq!(left, vec![42]);
        assert!(
            sent.iter().filter(|s| **s == Some(libc::SIGKILL)).count() >= 2,
            "{sent:?}"
        );
    }
}
