//! The crash-restart backoff schedule (1, 2, 4, 8, 16, 30 s; reset after a stable run).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// When crashed services are restarted.
///
/// ```
/// use std::time::Duration;
/// let policy = omnidev_core::backoff::BackoffPolicy::default();
/// let waits: Vec<u64> = (1..=7).map(|n| policy.delay(n).as_secs()).collect();
/// assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BackoffPolicy {
    /// The wait before restart attempt 1, 2, …; the last entry repeats.
    pub steps: Vec<Duration>,
    /// A run at least this long resets the attempt counter to zero.
    pub reset_after: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        Self {
            steps: [1, 2, 4, 8, 16, 30].into_iter().map(Duration::from_secs).collect(),
            reset_after: Duration::from_secs(20),
        }
    }
}

impl BackoffPolicy {
    /// The wait before restart `attempt` (1-based). Attempt 0 and an empty
    /// schedule mean no wait.
    pub fn delay(&self, attempt: u32) -> Duration {
        if attempt == 0 {
            return Duration::ZERO;
        }
        let index = (attempt as usize - 1).min(self.steps.len().saturating_sub(1));
        self.steps.get(index).copied().unwrap_or_default()
    }

    /// The attempt number after a crash, given the previous attempt number
    /// and how long the crashed run lasted.
    pub fn next_attempt(&self, previous: u32, ran_for: Duration) -> u32 {
        if ran_for >= self.reset_after { 1 } else { previous.saturating_add(1) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_doubles_to_the_cap_and_stays_there() {
        let policy = BackoffPolicy::default();
        let secs: Vec<u64> = (0..=9).map(|n| policy.delay(n).as_secs()).collect();
        assert_eq!(secs, [0, 1, 2, 4, 8, 16, 30, 30, 30, 30]);
    }

    #[test]
    fn a_stable_run_resets_the_attempts() {
        let policy = BackoffPolicy::default();
        let mut attempt = 0;
        for _ in 0..6 {
            attempt = policy.next_attempt(attempt, Duration::from_secs(1));
        }
        assert_eq!(policy.delay(attempt), Duration::from_secs(30));
        attempt = policy.next_attempt(attempt, Duration::from_secs(20));
        assert_eq!(attempt, 1);
        assert_eq!(policy.delay(attempt), Duration::from_secs(1));
        // Just below the threshold is not stable.
        assert_eq!(policy.next_attempt(1, Duration::from_millis(19_999)), 2);
    }

    #[test]
    fn empty_schedule_means_no_wait() {
        let policy = BackoffPolicy { steps: vec![], reset_after: Duration::from_secs(1) };
        assert_eq!(policy.delay(3), Duration::ZERO);
    }
}
