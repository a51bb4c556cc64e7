//! A readiness probe that passes only while the port's listener is the
//! service's own (the supervisor's use of [`crate::listener`]).

use std::sync::Arc;
use std::time::Duration;

use super::spawn::ProcessGroup;
use crate::probe;
use crate::sync::Locked;

/// A readiness probe that passes only while the port's listener is a
/// process of the service; another process's listener is reported (once
/// per holder) and keeps the service from being ready, whatever that
/// process answers.
///
/// Looking was costly: a read of `/proc/net/tcp{,6}`, in which the kernel
/// walks its whole table of TCP connections (about 3 ms of CPU on a host
/// with a large table, 262,144 buckets here), which an attempt every 20 ms
/// took from the very service that was booting. Linux now asks the
/// kernel's socket diagnostics for listeners only (0.02 ms), and macOS
/// asks every process of the user's; so the owner is still looked at
/// before an answer counts, and while the probe fails only at the first
/// attempt and then at most every [`OWNER_LOOK_INTERVAL`] (to name a
/// holder that answers with an error, or listens where the probe does not
/// reach).
pub(super) struct OwnListener {
    inner: Box<dyn probe::Probe>,
    port: u16,
    group: Arc<dyn ProcessGroup>,
    last: std::sync::Mutex<Option<String>>,
    report: Box<dyn Fn(String) + Send + Sync>,
    /// When the owner was last looked at.
    looked: std::sync::Mutex<Option<tokio::time::Instant>>,
}

/// The longest a failing probe goes without a look at the port's owner.
const OWNER_LOOK_INTERVAL: Duration = Duration::from_secs(1);

impl OwnListener {
    /// `inner` behind the owner check of `port`, whose listener must be a
    /// member of `group`; `report` hears each new holder once.
    pub(super) fn new(
        inner: Box<dyn probe::Probe>,
        port: u16,
        group: Arc<dyn ProcessGroup>,
        report: Box<dyn Fn(String) + Send + Sync>,
    ) -> Self {
        Self {
            inner,
            port,
            group,
            last: std::sync::Mutex::new(None),
            report,
            looked: std::sync::Mutex::new(None),
        }
    }

    /// Whether this attempt looks at the owner: always when the probe
    /// passed, else when the last look is [`OWNER_LOOK_INTERVAL`] old.
    fn looks(&self, answered: bool) -> bool {
        let mut looked = self.looked.locked();
        let now = tokio::time::Instant::now();
        let due = answered || looked.is_none_or(|at| now - at >= OWNER_LOOK_INTERVAL);
        if due {
            *looked = Some(now);
        }
        due
    }
}

impl std::fmt::Debug for OwnListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnListener")
            .field("inner", &self.inner)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl probe::Probe for OwnListener {
    fn output_spacing(&self) -> Duration {
        self.inner.output_spacing()
    }

    async fn check(&self) -> Result<(), String> {
        // The probe first, then the owner: a listener that appears between
        // the two is looked at before the answer counts.
        let answered = self.inner.reach().await;
        if !self.looks(answered.is_ok()) {
            return answered.map(drop);
        }
        let members = self.group.members();
        // An answer counts only when the listener that gave it, at the
        // address the probe reached, is the service's; a failing probe
        // names whoever listens on the port at all.
        let owner = match &answered {
            Ok(Some(at)) => crate::listener::owner_at(*at, &members),
            _ => crate::listener::owner(self.port, &members),
        };
        match owner {
            crate::listener::Owner::Other(holder) => {
                let holder = holder.to_string();
                let mut last = self.last.locked();
                if last.as_ref() != Some(&holder) {
                    (self.report)(holder.clone());
                    *last = Some(holder.clone());
                }
                Err(format!("port {} is held by {holder}", self.port))
            }
            // No listener to be seen (another network namespace, say): the
            // probe alone decides, as where there is no /proc.
            _ => answered.map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct NoGroup;

    #[async_trait::async_trait]
    impl ProcessGroup for NoGroup {
        async fn stop(&self, _signal: i32, _grace: Duration) -> bool {
            false
        }
        fn release(&self) {}
    }

    #[derive(Debug)]
    struct NeverAnswers;

    #[async_trait::async_trait]
    impl probe::Probe for NeverAnswers {
        async fn check(&self) -> Result<(), String> {
            Err("connection refused".to_owned())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_owner_is_looked_at_for_every_answer_and_once_a_second_otherwise() {
        let listener =
            OwnListener::new(Box::new(NeverAnswers), 1, Arc::new(NoGroup), Box::new(|_| {}));
        assert!(listener.looks(false), "the first attempt looks");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!listener.looks(false), "20 ms later a failing one does not");
        assert!(listener.looks(true), "an answer is always looked at");
        tokio::time::sleep(Duration::from_millis(980)).await;
        assert!(!listener.looks(false), "not yet a second since the last look");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(listener.looks(false), "a second after the last look");
    }
}
