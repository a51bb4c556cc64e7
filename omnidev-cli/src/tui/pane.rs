//! One scrollable log pane: a bounded buffer of lines, follow mode, the
//! scroll position and search over the text without its ANSI codes.
//!
//! A line still waiting for its newline (a prompt, a progress bar redrawn
//! with `\r`; the supervisor publishes it as it stands after
//! `omnidev_core::logs::PARTIAL_LINE_AFTER`, then at most that often) is
//! shown where it is and replaced there by its next state and, at last, by
//! the finished line: one line on screen, never a trail of redraws.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::SystemTime;

use omnidev_core::Stream;

use crate::terminal_text;

/// Bytes of lines a service's pane keeps (besides its line bound).
pub const SERVICE_PANE_BYTES: usize = 4 * 1024 * 1024;
/// Bytes of lines the combined pane keeps. A line in both panes is held
/// once (shared), so the TUI keeps at most these bytes of text in all.
pub const COMBINED_PANE_BYTES: usize = 8 * 1024 * 1024;

/// Lines each pane keeps (within its bytes).
pub const PANE_LINES: usize = 5_000;
/// Bytes counted for a line besides its text.
const LINE_OVERHEAD: usize = 96;

/// A line as kept by a pane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaneLine {
    /// Who wrote it (a service name, or `omnidev` for supervisor messages);
    /// shown as a prefix in the combined pane.
    pub tag: String,
    /// The text as shown: SGR colour kept, every other control made
    /// visible (see [`terminal_text`]).
    pub raw: String,
    /// Whether the supervisor wrote it (rendered dimmed).
    pub supervisor: bool,
    /// When it was read (shown with timestamps on).
    pub at: SystemTime,
}

impl PaneLine {
    /// A line from `tag` with raw (possibly coloured) text, read at `at`.
    pub fn new(tag: &str, raw: &str, supervisor: bool, at: SystemTime) -> Self {
        Self {
            tag: tag.to_owned(),
            raw: terminal_text::sanitise(raw, true).into_owned(),
            supervisor,
            at,
        }
    }

    /// The text without colour; what search looks at. Made when asked
    /// (only a coloured line differs from [`PaneLine::raw`]), so a line is
    /// kept once, not twice.
    pub fn plain(&self) -> std::borrow::Cow<'_, str> {
        if self.raw.contains('\x1b') {
            std::borrow::Cow::Owned(terminal_text::plain(&self.raw))
        } else {
            std::borrow::Cow::Borrowed(&self.raw)
        }
    }

    /// Bytes counted against a pane's budget.
    fn cost(&self) -> usize {
        self.raw.len() + self.tag.len() + LINE_OVERHEAD
    }
}

/// Where a line comes from: a service's stream. An unfinished line is
/// replaced by the next line of its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The service.
    pub service: Arc<str>,
    /// Its stream.
    pub stream: Stream,
}

/// Search direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Towards newer lines (`/`, `n`).
    Forward,
    /// Towards older lines (`?`).
    Backward,
}

impl Direction {
    /// The other way.
    pub fn reversed(self) -> Self {
        match self {
            Direction::Forward => Direction::Backward,
            Direction::Backward => Direction::Forward,
        }
    }
}

/// A search pattern: a plain substring, case-insensitive unless it holds an
/// upper-case letter ("smart case").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    ignore_case: bool,
}

impl Pattern {
    /// A pattern for `text`; `None` when empty.
    pub fn new(text: &str) -> Option<Self> {
        if text.is_empty() {
            return None;
        }
        Some(Self {
            text: text.to_owned(),
            ignore_case: !text.chars().any(char::is_uppercase),
        })
    }

    /// The pattern as typed.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Byte ranges of every (non-overlapping) match in `haystack`.
    pub fn find_all(&self, haystack: &str) -> Vec<std::ops::Range<usize>> {
        // ASCII case folding keeps byte offsets aligned with `haystack`.
        let (hay, needle) = if self.ignore_case {
            (
                haystack.to_ascii_lowercase(),
                self.text.to_ascii_lowercase(),
            )
        } else {
            (haystack.to_owned(), self.text.clone())
        };
        hay.match_indices(&needle)
            .map(|(start, m)| start..start + m.len())
            .collect()
    }

    /// Whether `haystack` contains a match.
    pub fn is_match(&self, haystack: &str) -> bool {
        if self.ignore_case {
            haystack
                .to_ascii_lowercase()
                .contains(&self.text.to_ascii_lowercase())
        } else {
            haystack.contains(&self.text)
        }
    }
}

/// A scrollable buffer of lines, bounded in lines and in bytes.
///
/// Lines are addressed by an absolute index that keeps growing as lines are
/// added, so positions stay valid when old lines fall off the front.
#[derive(Debug, Clone)]
pub struct Pane {
    /// Shared with the combined pane, so a line is held once.
    lines: VecDeque<Arc<PaneLine>>,
    /// Absolute index of `lines[0]`.
    first: usize,
    capacity: usize,
    /// Bytes of `lines` ([`PaneLine::cost`]).
    bytes: usize,
    max_bytes: usize,
    /// Whether the view sticks to the newest line.
    pub follow: bool,
    /// Absolute index of the top line while not following.
    top: usize,
    /// Absolute index of the current search match.
    pub current_match: Option<usize>,
    /// Height of the view at the last render, for paging.
    pub view_height: usize,
    /// Top line shown at the last render.
    pub view_top: usize,
    /// The unfinished lines shown, by source: the absolute index of each
    /// (at most one per source, so bounded by the services' streams).
    unfinished: Vec<(Source, usize)>,
}

impl Pane {
    /// An empty pane keeping at most `capacity` lines of at most
    /// `max_bytes` (the newest line is kept whatever its size).
    pub fn new(capacity: usize, max_bytes: usize) -> Self {
        Self {
            lines: VecDeque::new(),
            first: 0,
            capacity: capacity.max(1),
            bytes: 0,
            max_bytes,
            follow: true,
            top: 0,
            current_match: None,
            view_height: 1,
            view_top: 0,
            unfinished: Vec::new(),
        }
    }

    /// Appends a line, dropping the oldest ones beyond the bounds.
    pub fn push(&mut self, line: impl Into<Arc<PaneLine>>) {
        let line = line.into();
        self.bytes += line.cost();
        self.lines.push_back(line);
        self.trim();
    }

    /// Shows a line of `source`: in place of the source's unfinished line
    /// when one is still held, else appended. An `unfinished` line is
    /// remembered as the source's, to be replaced by its next line; a
    /// finished one ends that.
    pub fn push_from(&mut self, source: &Source, line: Arc<PaneLine>, unfinished: bool) {
        let known = self.unfinished.iter().position(|(s, _)| s == source);
        let held = known
            .and_then(|k| self.unfinished[k].1.checked_sub(self.first))
            .filter(|&i| i < self.lines.len());
        let at = if let Some(i) = held {
            self.bytes += line.cost();
            let old = std::mem::replace(&mut self.lines[i], line);
            self.bytes -= old.cost();
            let at = self.first + i;
            self.trim();
            at
        } else {
            self.push(line);
            self.end() - 1
        };
        match (known, unfinished) {
            (Some(k), true) => self.unfinished[k].1 = at,
            (Some(k), false) => {
                self.unfinished.swap_remove(k);
            }
            (None, true) => self.unfinished.push((source.clone(), at)),
            (None, false) => {}
        }
    }

    /// Drops the oldest lines beyond the bounds (the newest stays).
    fn trim(&mut self) {
        while self.lines.len() > self.capacity
            || (self.bytes > self.max_bytes && self.lines.len() > 1)
        {
            let Some(old) = self.lines.pop_front() else {
                break;
            };
            self.bytes -= old.cost();
            self.first += 1;
        }
    }

    /// Bytes of the lines held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Removes every line.
    pub fn clear(&mut self) {
        self.first += self.lines.len();
        self.lines.clear();
        self.unfinished.clear();
        self.bytes = 0;
        self.top = self.first;
        self.current_match = None;
        self.follow = true;
    }

    /// Number of lines held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Absolute index one past the newest line.
    pub fn end(&self) -> usize {
        self.first + self.lines.len()
    }

    /// Absolute index of the oldest line held.
    pub fn first(&self) -> usize {
        self.first
    }

    /// The line at absolute index `index`, if still held.
    pub fn get(&self, index: usize) -> Option<&PaneLine> {
        index
            .checked_sub(self.first)
            .and_then(|i| self.lines.get(i))
            .map(|line| &**line)
    }

    /// The top line to show when not following (clamped to what is held).
    pub fn top(&self) -> usize {
        self.top
            .clamp(self.first, self.end().saturating_sub(1).max(self.first))
    }

    /// Scrolls towards older lines; leaves follow mode.
    pub fn scroll_up(&mut self, n: usize) {
        if self.follow {
            self.top = self.view_top;
            self.follow = false;
        }
        self.top = self.top().saturating_sub(n).max(self.first);
    }

    /// Scrolls towards newer lines; reaching the bottom resumes following.
    pub fn scroll_down(&mut self, n: usize) {
        if self.follow {
            return;
        }
        let bottom_top = self.end().saturating_sub(self.view_height).max(self.first);
        self.top = (self.top() + n).min(bottom_top);
        if self.top >= bottom_top {
            self.follow = true;
        }
    }

    /// Jumps to the oldest line; leaves follow mode.
    pub fn scroll_to_top(&mut self) {
        self.follow = false;
        self.top = self.first;
    }

    /// Jumps to the newest line and follows.
    pub fn scroll_to_bottom(&mut self) {
        self.follow = true;
    }

    /// Toggles follow mode.
    pub fn toggle_follow(&mut self) {
        if self.follow {
            self.top = self.view_top;
            self.follow = false;
        } else {
            self.follow = true;
        }
    }

    /// Finds the next line matching `pattern` in `direction`, starting after
    /// the current match (or from the view's edge), wrapping around once.
    /// Moves the view to show it and returns whether the search wrapped;
    /// `None` when nothing matches.
    pub fn search(&mut self, pattern: &Pattern, direction: Direction) -> Option<bool> {
        if self.lines.is_empty() {
            return None;
        }
        let n = self.lines.len() as i64;
        let relative = |abs: usize| (abs.saturating_sub(self.first) as i64).min(n - 1);
        // `start` is the first position looked at; it may be -1 or n, which
        // the modulo below wraps around.
        let start = match (self.current_match.filter(|m| *m >= self.first), direction) {
            (Some(m), Direction::Forward) => relative(m) + 1,
            (Some(m), Direction::Backward) => relative(m) - 1,
            (None, Direction::Forward) => relative(self.view_top),
            (None, Direction::Backward) => {
                relative(self.view_top + self.view_height.saturating_sub(1))
            }
        };
        for step in 0..n {
            let position = match direction {
                Direction::Forward => start + step,
                Direction::Backward => start - step,
            };
            let i = position.rem_euclid(n) as usize;
            if pattern.is_match(&self.lines[i].plain()) {
                let abs = self.first + i;
                self.current_match = Some(abs);
                self.reveal(abs);
                return Some(!(0..n).contains(&position));
            }
        }
        None
    }

    /// Makes sure `abs` is on screen, leaving follow mode if it has to move.
    fn reveal(&mut self, abs: usize) {
        let height = self.view_height.max(1);
        if abs >= self.view_top && abs < self.view_top + height {
            return;
        }
        self.follow = false;
        self.top = abs.saturating_sub(height / 3).max(self.first);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pane_with(n: usize, capacity: usize) -> Pane {
        let mut pane = Pane::new(capacity, usize::MAX);
        for i in 0..n {
            pane.push(PaneLine::new(
                "s",
                &format!("line {i}"),
                false,
                SystemTime::UNIX_EPOCH,
            ));
        }
        pane.view_height = 10;
        pane.view_top = pane.end().saturating_sub(10);
        pane
    }

    #[test]
    fn ring_drops_oldest_lines() {
        let pane = pane_with(15, 10);
        assert_eq!(pane.len(), 10);
        assert_eq!(pane.first(), 5);
        assert_eq!(pane.get(5).map(|l| l.raw.as_str()), Some("line 5"));
        assert!(pane.get(4).is_none());
    }

    #[test]
    fn ring_is_bounded_in_bytes_and_keeps_the_newest_line() {
        let mut pane = Pane::new(5000, 1024 * 1024);
        let big = "x".repeat(64 * 1024);
        for _ in 0..100 {
            pane.push(PaneLine::new("s", &big, false, SystemTime::UNIX_EPOCH));
            assert!(pane.bytes() <= 1024 * 1024, "{}", pane.bytes());
        }
        assert_eq!(pane.len(), 15);
        assert_eq!(pane.first(), 85);
        pane.push(PaneLine::new(
            "s",
            &"y".repeat(2 * 1024 * 1024),
            false,
            SystemTime::UNIX_EPOCH,
        ));
        assert_eq!(pane.len(), 1, "the newest line stays, whatever its size");
        // Colour is not kept twice: the plain text is made when searched.
        let coloured = PaneLine::new("s", "\u{1b}[31mred\u{1b}[0m", false, SystemTime::UNIX_EPOCH);
        assert_eq!(coloured.plain(), "red");
    }

    #[test]
    fn scrolling_up_leaves_follow_and_bottom_resumes_it() {
        let mut pane = pane_with(100, 1000);
        pane.scroll_up(5);
        assert!(!pane.follow);
        assert_eq!(pane.top(), 85);
        pane.scroll_down(2);
        assert_eq!(pane.top(), 87);
        assert!(!pane.follow);
        pane.scroll_down(50);
        assert!(pane.follow);
        pane.scroll_to_top();
        assert_eq!(pane.top(), 0);
    }

    #[test]
    fn smart_case() {
        let p = Pattern::new("err").expect("pattern");
        assert!(p.is_match("ERROR here"));
        assert_eq!(p.find_all("Err err"), vec![0..3, 4..7]);
        let p = Pattern::new("Err").expect("pattern");
        assert!(!p.is_match("error"));
    }

    #[test]
    fn search_forward_backward_and_wrap() {
        let mut pane = Pane::new(100, usize::MAX);
        for t in ["a", "hit 1", "b", "hit 2", "c"] {
            pane.push(PaneLine::new("s", t, false, SystemTime::UNIX_EPOCH));
        }
        pane.view_height = 10;
        pane.view_top = 0;
        let p = Pattern::new("hit").expect("pattern");
        assert_eq!(pane.search(&p, Direction::Forward), Some(false));
        assert_eq!(pane.current_match, Some(1));
        assert_eq!(pane.search(&p, Direction::Forward), Some(false));
        assert_eq!(pane.current_match, Some(3));
        assert_eq!(pane.search(&p, Direction::Forward), Some(true));
        assert_eq!(pane.current_match, Some(1));
        assert_eq!(pane.search(&p, Direction::Backward), Some(true));
        assert_eq!(pane.current_match, Some(3));
        let missing = Pattern::new("nope").expect("pattern");
        assert_eq!(pane.search(&missing, Direction::Forward), None);
    }

    #[test]
    fn search_moves_the_view_off_follow() {
        let mut pane = pane_with(100, 1000);
        let p = Pattern::new("line 7").expect("pattern");
        pane.search(&p, Direction::Backward);
        // "line 79" is the nearest match above the bottom view (90..100).
        assert_eq!(pane.current_match, Some(79));
        assert!(!pane.follow);
        assert!(pane.top() <= 79);
    }

    fn texts(pane: &Pane) -> Vec<String> {
        (pane.first()..pane.end())
            .filter_map(|i| pane.get(i).map(|l| l.raw.clone()))
            .collect()
    }

    fn source(service: &str, stream: Stream) -> Source {
        Source {
            service: service.into(),
            stream,
        }
    }

    #[test]
    fn an_unfinished_line_is_replaced_in_place_by_its_next_state_and_its_end() {
        let mut pane = Pane::new(100, usize::MAX);
        let out = source("app", Stream::Stdout);
        let err = source("app", Stream::Stderr);
        let line = |t: &str| Arc::new(PaneLine::new("app", t, false, SystemTime::UNIX_EPOCH));
        pane.push_from(&out, line("ready"), false);
        pane.push_from(&out, line("10%"), true);
        pane.push_from(&err, line("warning: slow disk"), false);
        pane.push_from(&out, line("50%"), true);
        assert_eq!(texts(&pane), ["ready", "50%", "warning: slow disk"]);
        pane.push_from(&out, line("100%"), false);
        assert_eq!(texts(&pane), ["ready", "100%", "warning: slow disk"]);
        // Finished: the next line of the source is a new one.
        pane.push_from(&out, line("done"), false);
        assert_eq!(
            texts(&pane),
            ["ready", "100%", "warning: slow disk", "done"]
        );
        let cost: usize = (pane.first()..pane.end())
            .filter_map(|i| pane.get(i))
            .map(PaneLine::cost)
            .sum();
        assert_eq!(pane.bytes(), cost, "replacing keeps the byte count");
    }

    #[test]
    fn a_flood_of_redraws_is_one_line_within_the_budget() {
        let mut pane = Pane::new(10, 4096);
        let out = source("bar", Stream::Stdout);
        for i in 0..100_000 {
            let text = format!("{i:06} {}", "#".repeat(i % 2000));
            pane.push_from(
                &out,
                Arc::new(PaneLine::new("bar", &text, false, SystemTime::UNIX_EPOCH)),
                true,
            );
            assert!(pane.len() == 1 && pane.bytes() <= 4096, "{}", pane.bytes());
        }
        // An unfinished line that fell off the front is not looked for.
        let mut pane = Pane::new(2, usize::MAX);
        pane.push_from(
            &out,
            Arc::new(PaneLine::new("bar", "1%", false, SystemTime::UNIX_EPOCH)),
            true,
        );
        for t in ["a", "b"] {
            pane.push(PaneLine::new("other", t, false, SystemTime::UNIX_EPOCH));
        }
        pane.push_from(
            &out,
            Arc::new(PaneLine::new("bar", "100%", false, SystemTime::UNIX_EPOCH)),
            false,
        );
        assert_eq!(texts(&pane), ["b", "100%"]);
    }

    /// A real process prints a prompt and waits: the prompt is in its pane
    /// long before its newline (which the test holds back), then the
    /// answer finishes it in place, on screen too.
    #[tokio::test]
    async fn a_real_prompt_shows_in_its_pane_and_is_finished_in_place() {
        use omnidev_core::{EventKind, ServiceSpec, Supervisor, SupervisorConfig};
        let dir = tempfile::tempdir().expect("tempdir");
        let answer = dir.path().join("answer");
        let script = format!(
            "echo starting; printf 'Password: '; while [ ! -e '{}' ]; do sleep 0.05; done; \
             echo secret; exec sleep 300",
            answer.display()
        );
        let builder = Supervisor::builder(SupervisorConfig {
            services: vec![ServiceSpec::new("app", "sh", ["-c", &script], dir.path())],
            ..SupervisorConfig::default()
        })
        .expect("a valid graph");
        let mut events = builder.subscribe();
        let supervisor = builder.run().await.expect("start");
        let mut app = crate::tui::App::new(
            crate::tui::PodInfo::default(),
            vec!["app".into()],
            Vec::new(),
            100,
        );
        let mut until = async |app: &mut crate::tui::App, want: &[&str]| {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
            while texts(&app.panes[1]) != want {
                let event = tokio::time::timeout_at(deadline, events.recv())
                    .await
                    .unwrap_or_else(|_| panic!("{want:?}; the pane: {:?}", texts(&app.panes[1])))
                    .expect("events");
                if matches!(
                    event.kind,
                    EventKind::PartialLine { .. } | EventKind::Log { .. }
                ) {
                    app.apply(&event);
                }
            }
        };
        until(&mut app, &["starting", "Password: "]).await;
        std::fs::write(&answer, "").expect("answer");
        until(&mut app, &["starting", "Password: secret"]).await;
        assert_eq!(
            texts(&app.panes[0]),
            ["starting", "Password: secret"],
            "combined"
        );
        app.handle_key(crossterm::event::KeyEvent::new(
            crossterm::event::KeyCode::Char('1'),
            crossterm::event::KeyModifiers::NONE,
        ));
        let mut terminal =
            ratatui::Terminal::new(ratatui::backend::TestBackend::new(60, 8)).expect("terminal");
        terminal
            .draw(|frame| crate::tui::view::render(&mut app, frame))
            .expect("draw");
        let screen: Vec<String> = terminal
            .backend()
            .buffer()
            .content
            .chunks(60)
            .map(|row| row.iter().map(ratatui::buffer::Cell::symbol).collect())
            .collect();
        let prompts = screen
            .iter()
            .filter(|row| row.contains("Password:"))
            .count();
        assert_eq!(prompts, 1, "one line on screen: {screen:#?}");
        assert!(
            screen.iter().any(|row| row.contains("Password: secret")),
            "{screen:#?}"
        );
        supervisor.shutdown().await.expect("shutdown");
    }
}
