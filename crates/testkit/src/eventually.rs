//! Waiting for a condition: the one way a test waits for something to happen (a process to
//! end, an agent to join, a file to appear). It looks again with a short backoff until the
//! condition holds, and fails the test naming what it waited for once the time is up.
//!
//! The condition is a closure returning a [`Ready`]: `bool`, `Option<T>` (the value found is
//! returned), or `Result<T, E>` (the last error is quoted when the time is up, to say what was
//! seen instead). [`eventually`] is for plain tests, [`eventually_async`] for async ones: it
//! sleeps on tokio's clock instead of blocking the runtime's thread.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// The first pause between two looks; it doubles up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// What a condition gives: ready with a value, or not yet (with what was seen, if anything).
pub trait Ready {
    type Value;
    fn ready(self) -> Result<Self::Value, Option<String>>;
}

impl Ready for bool {
    type Value = ();
    fn ready(self) -> Result<(), Option<String>> {
        if self {
            Ok(())
        } else {
            Err(None)
        }
    }
}

impl<T> Ready for Option<T> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Display> Ready for Result<T, E> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

/// Looks at `check` until it is ready and returns its value; panics naming `what` (and what
/// was seen last) when it is still not ready after `within`.
#[track_caller]
pub fn eventually<R: Ready>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> R,
) -> R::Value {
    let deadline = std::time::Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    loop {
        let seen = match check().ready() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        let now = std::time::Instant::now();
        if now >= deadline {
            timed_out(what, within, seen);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// [`eventually`] for async tests: `check` makes a future per look (`|| async { ... }`), and
/// the pauses are tokio sleeps, so the tasks the test waits for go on running meanwhile.
pub async fn eventually_async<R, F>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> F,
) -> R::Value
where
    R: Ready,
    F: Future<Output = R>,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    loop {
        let seen = match check().await.ready() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        let now = tokio::time::Instant::now();
        if now >= deadline {
            timed_out(what, within, seen);
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

#[track_caller]
fn timed_out(what: &str, within: Duration, seen: Option<String>) -> ! {
    match seen {
        Some(seen) => panic!("timed out after {within:?} waiting for {what}; last seen: {seen}"),
        None => panic!("timed out after {within:?} waiting for {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_becomes_true_is_waited_for_and_its_value_returned() {
        let mut looks = 0;
        let found = eventually("the third look", Duration::from_secs(5), || {
            looks += 1;
            (looks == 3).then_some(looks)
        });
        assert_eq!(found, 3);
    }

    #[test]
    #[should_panic(expected = "waiting for the impossible; last seen: still 1")]
    fn a_condition_that_never_holds_fails_naming_it_and_what_was_seen() {
        eventually("the impossible", Duration::from_millis(30), || {
            Err::<(), _>("still 1")
        });
    }

    #[tokio::test]
    async fn the_async_form_lets_other_tasks_run_while_it_waits() {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            tx.send(true).unwrap();
            // Keep the sender until the waiter has seen the value.
            std::future::pending::<()>().await;
        });
        eventually_async("the task's signal", Duration::from_secs(5), || {
            let seen = *rx.borrow();
            async move { seen }
        })
        .await;
    }
}
