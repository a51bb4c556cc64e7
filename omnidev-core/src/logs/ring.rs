//! A bounded buffer of the most recent lines.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::event::LogLine;

/// Rough per-line overhead counted against a ring's byte budget.
const LINE_OVERHEAD: usize = 64;

/// A bounded buffer of the most recent lines.
#[derive(Debug)]
pub(crate) struct Ring {
    /// Shared with the combined ring, so a line is stored once.
    lines: VecDeque<Arc<LogLine>>,
    bytes: usize,
    max_lines: usize,
    max_bytes: usize,
}

impl Ring {
    pub(crate) fn new(max_lines: usize, max_bytes: usize) -> Self {
        Self {
            lines: VecDeque::with_capacity(max_lines.min(1024)),
            bytes: 0,
            max_lines,
            max_bytes,
        }
    }

    pub(crate) fn push(&mut self, line: Arc<LogLine>) {
        if self.max_lines == 0 {
            return;
        }
        self.bytes += line.text.len() + LINE_OVERHEAD;
        self.lines.push_back(line);
        while self.lines.len() > self.max_lines
            || (self.bytes > self.max_bytes && self.lines.len() > 1)
        {
            if let Some(old) = self.lines.pop_front() {
                self.bytes -= old.text.len() + LINE_OVERHEAD;
            }
        }
    }

    pub(crate) fn to_vec(&self) -> Vec<LogLine> {
        self.lines.iter().map(|l| LogLine::clone(l)).collect()
    }

    pub(crate) fn clear(&mut self) {
        self.lines.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Stream;

    #[test]
    fn ring_bounds_lines_and_bytes() {
        let line = |t: &str| LogLine::new("s", Stream::Stdout, t, 0);
        let mut ring = Ring::new(3, usize::MAX);
        for t in ["1", "2", "3", "4"] {
            ring.push(Arc::new(line(t)));
        }
        let texts: Vec<_> = ring.to_vec().into_iter().map(|l| l.text).collect();
        assert_eq!(texts, ["2", "3", "4"]);

        let mut ring = Ring::new(100, 2 * (10 + LINE_OVERHEAD));
        for _ in 0..5 {
            ring.push(Arc::new(line("0123456789")));
        }
        assert_eq!(ring.to_vec().len(), 2);
    }
}
