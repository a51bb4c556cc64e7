//! Waiting for the signals that should shut a supervisor down (SIGINT,
//! SIGTERM, SIGHUP, SIGQUIT), for the CLI to call `shutdown()`.

use std::io;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// A shutdown signal that arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownSignal {
    /// Ctrl-C.
    Interrupt,
    /// `kill`, a service manager.
    Terminate,
    /// The terminal went away (tab closed).
    Hangup,
    /// Ctrl-\.
    Quit,
}

impl ShutdownSignal {
    /// The signal number.
    pub fn number(self) -> i32 {
        match self {
            ShutdownSignal::Interrupt => libc::SIGINT,
            ShutdownSignal::Terminate => libc::SIGTERM,
            ShutdownSignal::Hangup => libc::SIGHUP,
            ShutdownSignal::Quit => libc::SIGQUIT,
        }
    }
}

/// The signal's name, as people know it (`SIGINT`).
impl std::fmt::Display for ShutdownSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ShutdownSignal::Interrupt => "SIGINT",
            ShutdownSignal::Terminate => "SIGTERM",
            ShutdownSignal::Hangup => "SIGHUP",
            ShutdownSignal::Quit => "SIGQUIT",
        })
    }
}

/// Installed handlers for the shutdown signals. Creating it replaces the
/// default action of SIGINT, SIGTERM, SIGHUP and SIGQUIT (for the whole
/// process, for good), so nothing is lost between installing and waiting.
#[derive(Debug)]
pub struct ShutdownSignals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Signal,
}

impl ShutdownSignals {
    /// Installs the handlers. Needs a tokio runtime.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
        })
    }

    /// Resolves when the next of those signals arrives, saying which.
    pub async fn recv(&mut self) -> ShutdownSignal {
        tokio::select! {
            _ = self.interrupt.recv() => ShutdownSignal::Interrupt,
            _ = self.terminate.recv() => ShutdownSignal::Terminate,
            _ = self.hangup.recv() => ShutdownSignal::Hangup,
            _ = self.quit.recv() => ShutdownSignal::Quit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolves_on_sighup() {
        let mut signals = ShutdownSignals::new().expect("install handlers");
        // SIGHUP has a handler installed just above.
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).expect("raise");
        let got = tokio::time::timeout(std::time::Duration::from_secs(20), signals.recv())
            .await
            .expect("signal seen");
        assert_eq!(got, ShutdownSignal::Hangup);
        assert_eq!(got.to_string(), "SIGHUP");
        assert_eq!(got.number(), libc::SIGHUP);
    }
}
