//! A child's output read line by line on a thread of its own, so a test
//! can wait for the line that shows something happened (the positive
//! event), with a deadline, and still see everything printed.

use std::io::{BufRead as _, BufReader, Read};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// The lines of a stream, as they come.
#[derive(Debug)]
pub struct Lines {
    rx: Receiver<String>,
    seen: Vec<String>,
    ended: bool,
}

impl Lines {
    /// Reads `stream` (a child's stdout or stderr) on a thread until its
    /// end.
    pub fn new(stream: impl Read + Send + 'static) -> Self {
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { rx, seen: Vec::new(), ended: false }
    }

    /// Waits for a line `matches`, and returns it; panics naming `what`
    /// with every line seen when the stream ends or `deadline` passes
    /// first.
    pub fn wait_for(
        &mut self,
        what: &str,
        deadline: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> String {
        let start = Instant::now();
        loop {
            let left = deadline.saturating_sub(start.elapsed());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if matches(&line) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "timed out after {deadline:?} waiting for {what}; lines so far:\n{}",
                    self.seen.join("\n")
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    self.ended = true;
                    panic!("the output ended before {what}; its lines:\n{}", self.seen.join("\n"))
                }
            }
        }
    }

    /// Reads to the end of the stream (within `deadline`); every line seen.
    pub fn to_end(&mut self, deadline: Duration) -> &[String] {
        let start = Instant::now();
        while !self.ended {
            let left = deadline.saturating_sub(start.elapsed());
            match self.rx.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Disconnected) => self.ended = true,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "the output did not end within {deadline:?}; lines so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
        &self.seen
    }

    /// The lines seen so far.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_waited_for_and_the_rest_kept() {
        let mut lines = Lines::new(&b"one\ntwo\nthree\n"[..]);
        let found = lines.wait_for("two", Duration::from_secs(5), |l| l == "two");
        assert_eq!(found, "two");
        assert_eq!(lines.to_end(Duration::from_secs(5)), ["one", "two", "three"]);
    }

    #[test]
    fn a_line_that_never_comes_fails_with_what_came() {
        let failed = std::panic::catch_unwind(|| {
            Lines::new(&b"one\n"[..]).wait_for("two", Duration::from_secs(5), |l| l == "two");
        })
        .expect_err("must fail");
        let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("ended before two") && message.contains("one"), "{message}");
    }
}
