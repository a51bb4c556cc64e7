//! One scrollable log pane: a view of the pod's history (core's
//! [`History::view`]), the lines and shown events of its service (the
//! whole pod's for the combined pane), with follow mode, the scroll
//! position and search over the text without its ANSI codes. A pane holds
//! no lines: what it shows is read from the history as it is drawn, so the
//! history's bounds are the TUI's.
//!
//! A line still waiting for its newline (a prompt, a progress bar redrawn
//! with `\r`; the supervisor publishes it as it stands after
//! `omnidev_core::logs::PARTIAL_LINE_AFTER`, then at most that often) is
//! shown last, as it stands, until its newline comes: one line on screen,
//! never a trail of redraws.

use std::collections::VecDeque;
use std::time::SystemTime;

use omnidev_core::{History, Kept, Stream};

use omnidev_core::text;

/// A line as a pane shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaneLine {
    /// Who wrote it (a service name, or `omnidev` for supervisor messages);
    /// shown as a prefix in the combined pane.
    pub tag: String,
    /// The text as shown: SGR colour kept, every other control made
    /// visible (see [`text`]).
    pub raw: String,
    /// Whether the supervisor wrote it (rendered dimmed).
    pub supervisor: bool,
    /// When it was read (shown with timestamps on).
    pub at: SystemTime,
}

impl PaneLine {
    /// A line from `tag` with raw (possibly coloured) text, read at `at`.
    pub fn new(tag: &str, raw: &str, supervisor: bool, at: SystemTime) -> Self {
        Self { tag: tag.to_owned(), raw: text::sanitise(raw, true).into_owned(), supervisor, at }
    }

    /// The line `kept` shows: a service's line as it stands, or an
    /// event's own line (`None` for an event that shows none).
    pub fn of(kept: &Kept) -> Option<Self> {
        match kept {
            Kept::Line(line) | Kept::Partial(line) => Some(Self::new(
                &line.service,
                &line.text,
                line.stream == Stream::Supervisor,
                line.at,
            )),
            Kept::Event(event) => {
                event.is_shown().then(|| Self::new("omnidev", &event.to_string(), true, event.at))
            }
        }
    }

    /// The text without colour; what search looks at.
    pub fn plain(&self) -> std::borrow::Cow<'_, str> {
        if self.raw.contains('\x1b') {
            std::borrow::Cow::Owned(text::plain(&self.raw))
        } else {
            std::borrow::Cow::Borrowed(&self.raw)
        }
    }
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
        Some(Self { text: text.to_owned(), ignore_case: !text.chars().any(char::is_uppercase) })
    }

    /// The pattern as typed.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Byte ranges of every (non-overlapping) match in `haystack`.
    pub fn find_all(&self, haystack: &str) -> Vec<std::ops::Range<usize>> {
        // ASCII case folding keeps byte offsets aligned with `haystack`.
        let (hay, needle) = if self.ignore_case {
            (haystack.to_ascii_lowercase(), self.text.to_ascii_lowercase())
        } else {
            (haystack.to_owned(), self.text.clone())
        };
        hay.match_indices(&needle).map(|(start, m)| start..start + m.len()).collect()
    }
}

/// A view of the lines of one service (or of the whole pod) in a history;
/// lines are known by their numbers there, which never change.
#[derive(Debug, Clone, Default)]
pub struct Pane {
    /// Its service; `None`: the combined pane.
    service: Option<String>,
    /// Lines numbered below this are not shown (`c`).
    cleared: u64,
    /// Whether the view sticks to the newest line.
    pub follow: bool,
    /// The top line while not following.
    top: u64,
    /// The current search match.
    pub current_match: Option<u64>,
    /// Height of the view at the last render, for paging.
    pub view_height: usize,
    /// The first and the last line shown at the last render.
    pub view_top: u64,
    /// See `view_top`.
    pub view_bottom: u64,
}

impl Pane {
    /// A pane of `service`'s lines (`None`: every line of the pod).
    pub fn new(service: Option<&str>) -> Self {
        Self {
            service: service.map(str::to_owned),
            follow: true,
            view_height: 1,
            ..Self::default()
        }
    }

    /// Visits the lines shown, oldest first, with their numbers, until
    /// `visit` says stop. The history is locked meanwhile: `visit` only
    /// looks (a line is made for the screen once the lock is let go).
    fn each(&self, history: &History, mut visit: impl FnMut(u64, &Kept) -> bool) {
        history.view(self.service.as_deref(), |n, kept| {
            let hidden = n < self.cleared || matches!(kept, Kept::Event(e) if !e.is_shown());
            hidden || visit(n, kept)
        });
    }

    /// The numbers of every line shown.
    fn numbers(&self, history: &History) -> Vec<u64> {
        let mut numbers = Vec::new();
        self.each(history, |n, _| {
            numbers.push(n);
            true
        });
        numbers
    }

    /// The lines of `kept`, as shown.
    fn lines(kept: impl IntoIterator<Item = (u64, Kept)>) -> Vec<(u64, PaneLine)> {
        kept.into_iter().filter_map(|(n, kept)| Some((n, PaneLine::of(&kept)?))).collect()
    }

    /// The newest `n` lines shown, oldest first.
    pub fn last(&self, history: &History, n: usize) -> Vec<(u64, PaneLine)> {
        let mut kept = VecDeque::new();
        self.each(history, |number, entry| {
            kept.push_back((number, entry.clone()));
            if kept.len() > n {
                kept.pop_front();
            }
            true
        });
        Self::lines(kept)
    }

    /// Up to `n` lines shown from number `from` on.
    pub fn from(&self, history: &History, from: u64, n: usize) -> Vec<(u64, PaneLine)> {
        let mut kept = Vec::new();
        self.each(history, |number, entry| {
            if number >= from {
                kept.push((number, entry.clone()));
            }
            kept.len() < n
        });
        Self::lines(kept)
    }

    /// The top line to show when not following (a line no longer shown
    /// stands for the oldest one that is).
    pub fn top(&self) -> u64 {
        self.top
    }

    /// Scrolls `n` lines towards older ones; leaves follow mode.
    pub fn scroll_up(&mut self, history: &History, n: usize) {
        if self.follow {
            self.top = self.view_top;
            self.follow = false;
        }
        let numbers = self.numbers(history);
        let at = numbers.partition_point(|&x| x < self.top);
        if let Some(&top) = numbers.get(at.saturating_sub(n)) {
            self.top = top;
        }
    }

    /// Scrolls `n` lines towards newer ones; reaching the bottom resumes
    /// following.
    pub fn scroll_down(&mut self, history: &History, n: usize) {
        if self.follow {
            return;
        }
        let numbers = self.numbers(history);
        let bottom = numbers.len().saturating_sub(self.view_height);
        let at = (numbers.partition_point(|&x| x < self.top) + n).min(bottom);
        if let Some(&top) = numbers.get(at) {
            self.top = top;
        }
        if at >= bottom {
            self.follow = true;
        }
    }

    /// Jumps to the oldest line; leaves follow mode.
    pub fn scroll_to_top(&mut self) {
        self.follow = false;
        self.top = self.cleared;
    }

    /// Jumps to the newest line and follows.
    pub fn scroll_to_bottom(&mut self) {
        self.follow = true;
    }

    /// Toggles follow mode.
    pub fn toggle_follow(&mut self) {
        if self.follow {
            self.top = self.view_top;
        }
        self.follow = !self.follow;
    }

    /// Shows only the lines that come after now (`c`).
    pub fn clear(&mut self, history: &History) {
        self.cleared = history.next_number();
        self.top = self.cleared;
        self.current_match = None;
        self.follow = true;
    }

    /// Finds the next line matching `pattern` in `direction`, starting after
    /// the current match (or from the view's edge), wrapping around once.
    /// Moves the view to show it and returns whether the search wrapped;
    /// `None` when nothing matches.
    pub fn search(
        &mut self,
        history: &History,
        pattern: &Pattern,
        direction: Direction,
    ) -> Option<bool> {
        let lines = self.from(history, 0, usize::MAX);
        let numbers: Vec<u64> = lines.iter().map(|(n, _)| *n).collect();
        let matches: Vec<u64> = lines
            .iter()
            .filter(|(_, line)| !pattern.find_all(&line.plain()).is_empty())
            .map(|(n, _)| *n)
            .collect();
        let found = match (self.current_match, direction) {
            (Some(m), Direction::Forward) => matches.iter().find(|&&x| x > m),
            (Some(m), Direction::Backward) => matches.iter().rev().find(|&&x| x < m),
            (None, Direction::Forward) => matches.iter().find(|&&x| x >= self.view_top),
            (None, Direction::Backward) => matches.iter().rev().find(|&&x| x <= self.view_bottom),
        };
        let wrapped = found.is_none();
        let found = found.or(match direction {
            Direction::Forward => matches.first(),
            Direction::Backward => matches.last(),
        });
        let abs = *found?;
        self.current_match = Some(abs);
        self.reveal(&numbers, abs);
        Some(wrapped)
    }

    /// Makes sure line `abs` is on screen, leaving follow mode if it has
    /// to move.
    fn reveal(&mut self, numbers: &[u64], abs: u64) {
        if (self.view_top..=self.view_bottom).contains(&abs) {
            return;
        }
        self.follow = false;
        let at = numbers.partition_point(|&x| x < abs);
        self.top = numbers[at.saturating_sub(self.view_height.max(1) / 3)];
    }
}

#[cfg(test)]
impl Pane {
    /// Every line shown, oldest first.
    pub fn all(&self, history: &History) -> Vec<PaneLine> {
        self.from(history, 0, usize::MAX).into_iter().map(|(_, line)| line).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use omnidev_core::LogLine;

    use super::*;

    /// A history holding `n` lines of service `s`, and a pane of them
    /// drawn 10 lines high at the bottom.
    fn pane_with(n: usize) -> (History, Pane) {
        let history = History::default();
        for i in 0..n {
            push(&history, "s", &format!("line {i}"));
        }
        let mut pane = Pane::new(Some("s"));
        pane.view_height = 10;
        pane.view_top = n.saturating_sub(10) as u64;
        pane.view_bottom = n.saturating_sub(1) as u64;
        (history, pane)
    }

    fn push(history: &History, service: &str, text: &str) {
        history.push_lines(&[Arc::new(LogLine::new(service, Stream::Stdout, text, 0))]);
    }

    fn texts(history: &History, pane: &Pane) -> Vec<String> {
        pane.all(history).into_iter().map(|l| l.raw).collect()
    }

    /// A pane shows its service's lines and no other's; the combined pane
    /// shows all; `c` hides what came before it.
    #[test]
    fn a_pane_is_a_view_of_its_service_and_c_clears_it() {
        let history = History::default();
        push(&history, "a", "one");
        push(&history, "b", "two");
        let mut a = Pane::new(Some("a"));
        assert_eq!(texts(&history, &a), ["one"]);
        assert_eq!(texts(&history, &Pane::new(None)), ["one", "two"]);
        a.clear(&history);
        assert!(texts(&history, &a).is_empty());
        push(&history, "a", "three");
        assert_eq!(texts(&history, &a), ["three"]);
        assert_eq!(a.last(&history, 1)[0].0, 2, "lines keep their numbers");
        // Colour is not kept twice: the plain text is made when searched.
        let coloured = PaneLine::new("s", "\u{1b}[31mred\u{1b}[0m", false, SystemTime::UNIX_EPOCH);
        assert_eq!(coloured.plain(), "red");
    }

    #[test]
    fn scrolling_up_leaves_follow_and_bottom_resumes_it() {
        let (history, mut pane) = pane_with(100);
        pane.scroll_up(&history, 5);
        assert!(!pane.follow);
        assert_eq!(pane.top(), 85);
        pane.scroll_down(&history, 2);
        assert_eq!(pane.top(), 87);
        assert!(!pane.follow);
        pane.scroll_down(&history, 50);
        assert!(pane.follow);
        pane.scroll_to_top();
        assert_eq!(pane.from(&history, pane.top(), 1)[0].1.raw, "line 0");
    }

    #[test]
    fn smart_case() {
        let p = Pattern::new("err").expect("pattern");
        assert_eq!(p.find_all("ERROR here"), vec![0..3]);
        assert_eq!(p.find_all("Err err"), vec![0..3, 4..7]);
        let p = Pattern::new("Err").expect("pattern");
        assert!(p.find_all("error").is_empty());
    }

    #[test]
    fn search_forward_backward_and_wrap() {
        let history = History::default();
        for t in ["a", "hit 1", "b", "hit 2", "c"] {
            push(&history, "s", t);
        }
        let mut pane = Pane::new(Some("s"));
        pane.view_height = 10;
        pane.view_bottom = 4;
        let p = Pattern::new("hit").expect("pattern");
        assert_eq!(pane.search(&history, &p, Direction::Forward), Some(false));
        assert_eq!(pane.current_match, Some(1));
        assert_eq!(pane.search(&history, &p, Direction::Forward), Some(false));
        assert_eq!(pane.current_match, Some(3));
        assert_eq!(pane.search(&history, &p, Direction::Forward), Some(true));
        assert_eq!(pane.current_match, Some(1));
        assert_eq!(pane.search(&history, &p, Direction::Backward), Some(true));
        assert_eq!(pane.current_match, Some(3));
        let missing = Pattern::new("nope").expect("pattern");
        assert_eq!(pane.search(&history, &missing, Direction::Forward), None);
    }

    #[test]
    fn search_moves_the_view_off_follow() {
        let (history, mut pane) = pane_with(100);
        let p = Pattern::new("line 7").expect("pattern");
        pane.search(&history, &p, Direction::Backward);
        // "line 79" is the nearest match above the bottom view (90..100).
        assert_eq!(pane.current_match, Some(79));
        assert!(!pane.follow);
        assert!(pane.top() <= 79);
    }

    /// A progress bar redrawn 100,000 times is one line in its pane, as
    /// it stands, last; its end is where its newline came.
    #[test]
    fn a_flood_of_redraws_is_one_line() {
        let history = History::default();
        let bar = |text: &str| Arc::new(LogLine::new("bar", Stream::Stdout, text, 0));
        push(&history, "bar", "ready");
        for i in 0..100_000 {
            history.push_partial(bar(&format!("{i:06} {}", "#".repeat(i % 2000))));
        }
        let pane = Pane::new(Some("bar"));
        let shown = texts(&history, &pane);
        assert_eq!(shown.len(), 2);
        assert!(shown[1].starts_with("099999 "), "{:.20}", shown[1]);
        push(&history, "other", "elsewhere");
        history.push_lines(&[bar("100%")]);
        assert_eq!(texts(&history, &pane), ["ready", "100%"]);
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
        let mut app =
            crate::tui::App::new(crate::tui::PodInfo::default(), vec!["app".into()], Vec::new());
        let mut until = async |app: &mut crate::tui::App, want: &[&str]| {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
            while app.shown(1) != want {
                let event = tokio::time::timeout_at(deadline, events.recv())
                    .await
                    .unwrap_or_else(|_| panic!("{want:?}; the pane: {:?}", app.shown(1)))
                    .expect("events");
                if matches!(event.kind, EventKind::PartialLine { .. } | EventKind::Log { .. }) {
                    app.apply(&event);
                }
            }
        };
        until(&mut app, &["starting", "Password: "]).await;
        std::fs::write(&answer, "").expect("answer");
        until(&mut app, &["starting", "Password: secret"]).await;
        assert_eq!(app.shown(0), ["starting", "Password: secret"], "combined");
        app.handle_key(crossterm::event::KeyEvent::new(
            crossterm::event::KeyCode::Char('1'),
            crossterm::event::KeyModifiers::NONE,
        ));
        let mut terminal =
            ratatui::Terminal::new(ratatui::backend::TestBackend::new(60, 8)).expect("terminal");
        terminal.draw(|frame| crate::tui::view::render(&mut app, frame)).expect("draw");
        let screen: Vec<String> = terminal
            .backend()
            .buffer()
            .content
            .chunks(60)
            .map(|row| row.iter().map(ratatui::buffer::Cell::symbol).collect())
            .collect();
        let prompts = screen.iter().filter(|row| row.contains("Password:")).count();
        assert_eq!(prompts, 1, "one line on screen: {screen:#?}");
        assert!(screen.iter().any(|row| row.contains("Password: secret")), "{screen:#?}");
        supervisor.shutdown().await.expect("shutdown");
    }
}
