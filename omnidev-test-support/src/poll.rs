//! Waiting for a condition with a generous deadline: the one way tests
//! wait for something to happen (never a fixed sleep standing for it).

use std::time::{Duration, Instant};

/// How often a condition is looked at.
const EVERY: Duration = Duration::from_millis(20);

/// Looks at `condition` every 20 ms until it holds; panics naming `what`
/// and how long it waited when `deadline` passes first.
///
/// ```
/// use std::time::Duration;
/// let mut n = 0;
/// omnidev_test_support::poll_until("n to reach 3", Duration::from_secs(5), || {
///     n += 1;
///     n == 3
/// });
/// ```
pub fn poll_until(what: &str, deadline: Duration, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < deadline, "timed out after {deadline:?} waiting for {what}");
        std::thread::sleep(EVERY);
    }
}

/// [`poll_until`] on the tokio runtime (the wait between looks is a tokio
/// sleep, so other tasks of a current-thread runtime run meanwhile).
pub async fn poll_until_async(what: &str, deadline: Duration, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < deadline, "timed out after {deadline:?} waiting for {what}");
        tokio::time::sleep(EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_never_holds_fails_naming_it() {
        let failed = std::panic::catch_unwind(|| {
            poll_until("the moon", Duration::from_millis(50), || false);
        })
        .expect_err("must fail");
        let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("waiting for the moon"), "{message}");
    }

    #[tokio::test]
    async fn the_async_wait_lets_other_tasks_run() {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let set = flag.clone();
        tokio::spawn(async move { set.store(true, std::sync::atomic::Ordering::SeqCst) });
        poll_until_async("the task to run", Duration::from_secs(5), || {
            flag.load(std::sync::atomic::Ordering::SeqCst)
        })
        .await;
    }
}
