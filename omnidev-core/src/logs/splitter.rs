//! Splitting a child's output into lines.

use std::time::{Duration, Instant};

use crate::text::lossy;

/// How long an unfinished line (a prompt such as `Password: `, a progress
/// bar redrawn with `\r`) waits for its newline before it is published as
/// it stands ([`crate::EventKind::PartialLine`]); later changes to it are
/// published at most this often.
pub const PARTIAL_LINE_AFTER: Duration = Duration::from_millis(200);

/// Splits a byte stream into lines: at `\n`, and at `max` bytes for longer
/// lines (at a character boundary when possible). A carriage return ends
/// nothing but starts its line over, as on a terminal: the text after a
/// line's last `\r` is the line (`10%\r20%\r100%\n` is `100%`, `a\r\n` is
/// `a`), so a progress bar redrawn in place is one line and the unfinished
/// line never holds more than one redraw. Invalid UTF-8 is replaced with
/// U+FFFD. Which pieces it cut from a longer line is told apart
/// ([`LineSplitter::take_cuts`]), so a log probe can match the line whole.
///
/// The unfinished line is offered for display once it has waited
/// [`PARTIAL_LINE_AFTER`] ([`LineSplitter::partial_due`],
/// [`LineSplitter::take_partial`]); the caller passes the time, so the
/// timing is tested without waiting.
#[derive(Debug)]
pub struct LineSplitter {
    partial: Vec<u8>,
    /// A `\r` came after `partial`: the next text replaces it.
    returned: bool,
    max: usize,
    /// Indexes into `out` (as passed to `feed`) of the pieces that do not
    /// end their line.
    cuts: Vec<usize>,
    /// When the unfinished line, changed since it was last offered, is to
    /// be offered.
    due: Option<Instant>,
    /// `partial` changed since it was last offered (or since it began).
    changed: bool,
    /// Texts of lines dropped from the history, for the next lines (see
    /// [`LineSplitter::keep_spares`]).
    spares: Vec<String>,
}

/// The most spare texts a splitter keeps, and the longest one.
const SPARES: usize = 4096;
const SPARE_BYTES: usize = 256;

impl LineSplitter {
    /// A splitter cutting lines longer than `max` bytes (at least 4).
    pub fn new(max: usize) -> Self {
        Self {
            partial: Vec::new(),
            returned: false,
            max: max.max(4),
            cuts: Vec::new(),
            due: None,
            changed: false,
            spares: Vec::new(),
        }
    }

    /// The spare texts, for a caller that adds to them
    /// ([`LineSplitter::keep_spares`] gives them back).
    pub(crate) fn take_spares(&mut self) -> Vec<String> {
        std::mem::take(&mut self.spares)
    }

    /// Keeps `spares`, texts nobody holds any more, to make the next lines
    /// in, after a read that made `lines` lines: short ones only, and about
    /// as many as that read needed, so a flood's memory is reused while it
    /// lasts and goes with it.
    pub(crate) fn keep_spares(&mut self, mut spares: Vec<String>, lines: usize) {
        spares.retain(|s| s.capacity() <= SPARE_BYTES);
        spares.truncate(SPARES.min(2 * lines + 64));
        if spares.capacity() > 2 * spares.len() + 64 {
            spares.shrink_to_fit();
        }
        self.spares = spares;
    }

    /// The indexes, into the batch filled since the last call, of the
    /// pieces a longer line was cut into (all but its last).
    pub fn take_cuts(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.cuts)
    }

    /// Adds text to the unfinished line (starting it over after a `\r`).
    fn append(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if std::mem::take(&mut self.returned) {
            self.partial.clear();
        }
        self.partial.extend_from_slice(bytes);
        self.changed = true;
    }

    /// Ends the unfinished line with `rest`, its last text before `\n`.
    fn end_line(&mut self, rest: &[u8], out: &mut Vec<String>) {
        if self.returned && !rest.is_empty() {
            self.partial.clear();
        }
        self.returned = false;
        if self.partial.is_empty() {
            out.push(text(&mut self.spares, rest));
        } else {
            self.partial.extend_from_slice(rest);
            out.push(text(&mut self.spares, &self.partial));
            self.partial.clear();
        }
        self.changed = false;
        self.due = None;
    }

    /// Splits `data`, read at `now`, into `out`.
    pub fn feed(&mut self, mut data: &[u8], now: Instant, out: &mut Vec<String>) {
        while !data.is_empty() {
            // After a `\r` the next text replaces the unfinished line.
            let room = if self.returned { self.max } else { self.max - self.partial.len() };
            let window = &data[..data.len().min(room)];
            if let Some(pos) = memchr::memchr2(b'\n', b'\r', window) {
                if window[pos] == b'\n' {
                    self.end_line(&window[..pos], out);
                } else {
                    self.append(&window[..pos]);
                    self.returned = true;
                }
                data = &data[pos + 1..];
            } else {
                self.append(window);
                data = &data[window.len()..];
                if self.partial.len() >= self.max {
                    self.split_full(out);
                }
            }
        }
        if self.partial.is_empty() {
            self.changed = false;
            self.due = None;
        } else if self.changed && self.due.is_none() {
            self.due = Some(now + PARTIAL_LINE_AFTER);
        }
    }

    /// Emits a full buffer, keeping an incomplete trailing character.
    fn split_full(&mut self, out: &mut Vec<String>) {
        let cut = match std::str::from_utf8(&self.partial) {
            Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => e.valid_up_to(),
            _ => self.partial.len(),
        };
        self.cuts.push(out.len());
        out.push(text(&mut self.spares, &self.partial[..cut]));
        self.partial.drain(..cut);
        // What is left is a line of its own.
        self.due = None;
    }

    /// When the unfinished line is to be offered ([`LineSplitter::take_partial`]);
    /// `None` while there is none, or it has not changed since it was.
    pub fn partial_due(&self) -> Option<Instant> {
        self.due
    }

    /// The unfinished line as it stands, once it is due at `now` (a
    /// character still incomplete at its end left out); it is not offered
    /// again until it changes, and then not before [`PARTIAL_LINE_AFTER`]
    /// has passed.
    pub fn take_partial(&mut self, now: Instant) -> Option<String> {
        if self.due.is_none_or(|due| due > now) {
            return None;
        }
        self.due = None;
        self.changed = false;
        let whole = match std::str::from_utf8(&self.partial) {
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            _ => self.partial.len(),
        };
        (whole > 0).then(|| lossy(&self.partial[..whole]))
    }

    pub(crate) fn finish(&mut self, out: &mut Vec<String>) {
        if !self.partial.is_empty() {
            out.push(text(&mut self.spares, &self.partial));
            self.partial.clear();
        }
        self.returned = false;
        self.changed = false;
        self.due = None;
    }
}

/// `bytes` as the text of a line (invalid UTF-8 replaced), made in one of
/// `spares` when there is one.
fn text(spares: &mut Vec<String>, bytes: &[u8]) -> String {
    let Some(mut text) = spares.pop() else {
        return lossy(bytes);
    };
    text.clear();
    match std::str::from_utf8(bytes) {
        Ok(valid) => text.push_str(valid),
        Err(_) => text.push_str(&String::from_utf8_lossy(bytes)),
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(max: usize, chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::new(max);
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, Instant::now(), &mut out);
        }
        s.finish(&mut out);
        out
    }

    #[test]
    fn splits_lines_across_chunks() {
        assert_eq!(split(100, &[b"ab", b"c\nde\r\n", b"f"]), ["abc", "de", "f"]);
    }

    #[test]
    fn long_lines_are_split_at_max() {
        assert_eq!(split(4, &[b"abcdefghij\nxy\n"]), ["abcd", "efgh", "ij", "xy"]);
    }

    #[test]
    fn split_keeps_multibyte_characters_whole() {
        // "é" is two bytes; a cut after 5 bytes would split the third one.
        let text = "ééé".as_bytes();
        assert_eq!(split(5, &[text]), ["éé", "é"]);
    }

    #[test]
    fn a_carriage_return_starts_its_line_over() {
        assert_eq!(
            split(100, &[b"10%\r20%", b"\r", b"100%\n"]),
            ["100%"],
            "a progress bar is one line"
        );
        // A `\r` that nothing follows overwrites nothing.
        assert_eq!(split(100, &[b"done\r\r\n", b"a\r", b"\nb\r"]), ["done", "a", "b"]);
        assert_eq!(split(100, &[b"\r\n\rx\n"]), ["", "x"]);
        // A redraw flood never fills the line: no piece is cut from it.
        let mut s = LineSplitter::new(16);
        let mut out = Vec::new();
        for i in 0..10_000 {
            s.feed(format!("{i:05} of 10000\r").as_bytes(), Instant::now(), &mut out);
        }
        assert!(out.is_empty(), "{out:?}");
        assert!(s.partial.len() <= 16);
        s.feed(b"\n", Instant::now(), &mut out);
        assert_eq!(out, ["09999 of 10000"]);
    }

    /// What a terminal leaves of each line of `input`: the text after its
    /// last carriage return that something followed.
    fn as_a_terminal_shows(input: &[u8]) -> Vec<String> {
        let mut lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
        let last = lines.pop().unwrap_or_default();
        let shown = |line: &[u8]| {
            let kept = line
                .split(|&b| b == b'\r')
                .rfind(|segment| !segment.is_empty())
                .unwrap_or_default();
            String::from_utf8_lossy(kept).into_owned()
        };
        let mut out: Vec<String> = lines.into_iter().map(shown).collect();
        if !shown(last).is_empty() {
            out.push(shown(last));
        }
        out
    }

    proptest::proptest! {
        /// However the output is cut into reads, the lines are what a
        /// terminal shows, and the unfinished line (and what is offered
        /// of it) never holds more than the line cap.
        #[test]
        fn lines_are_what_a_terminal_shows_and_the_unfinished_one_stays_bounded(
            input in proptest::collection::vec(
                proptest::sample::select(vec![b'a', b'b', b'\r', b'\n', 0xc3, 0xa9, 0xff]),
                0..400,
            ),
            cuts in proptest::collection::vec(1usize..50, 1..20),
            max in 8usize..32,
        ) {
            let start = Instant::now();
            let mut whole = LineSplitter::new(1000);
            let mut small = LineSplitter::new(max);
            let (mut out, mut pieces) = (Vec::new(), Vec::new());
            let mut rest = &input[..];
            for (i, cut) in cuts.iter().cycle().enumerate() {
                if rest.is_empty() {
                    break;
                }
                let (read, after) = rest.split_at((*cut).min(rest.len()));
                let now = start + Duration::from_millis(100 * i as u64);
                whole.feed(read, now, &mut out);
                small.feed(read, now, &mut pieces);
                proptest::prop_assert!(small.partial.len() <= max);
                // An invalid byte is shown as U+FFFD, three bytes.
                if let Some(text) = small.take_partial(now + PARTIAL_LINE_AFTER) {
                    proptest::prop_assert!(!text.is_empty() && text.len() <= 3 * max);
                }
                rest = after;
            }
            whole.finish(&mut out);
            small.finish(&mut pieces);
            proptest::prop_assert_eq!(out, as_a_terminal_shows(&input));
            proptest::prop_assert!(pieces.iter().all(|p| p.len() <= 3 * max));
        }
    }

    #[test]
    fn an_unfinished_line_is_offered_after_its_wait_then_at_most_that_often() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut s = LineSplitter::new(100);
        let mut out = Vec::new();
        s.feed(b"ready\nPassword: ", at(0), &mut out);
        assert_eq!(out, ["ready"]);
        assert_eq!(s.partial_due(), Some(at(200)));
        assert_eq!(s.take_partial(at(199)), None, "not yet");
        assert_eq!(s.take_partial(at(200)).as_deref(), Some("Password: "));
        assert_eq!(s.partial_due(), None, "offered once while unchanged");
        assert_eq!(s.take_partial(at(10_000)), None);

        // A progress bar: its redraws are offered at most every 200 ms,
        // each time as the text after the last `\r`.
        s.feed(b"\n10%", at(1000), &mut out);
        assert_eq!(out, ["ready", "Password: "]);
        for (ms, text) in [(1050, "\r20%"), (1100, "\r30%"), (1150, "\r40%\r")] {
            s.feed(text.as_bytes(), at(ms), &mut out);
        }
        assert_eq!(s.take_partial(at(1200)).as_deref(), Some("40%"));
        s.feed(b"50%", at(1210), &mut out);
        assert_eq!(s.partial_due(), Some(at(1410)));
        // Finished before it was due: nothing more to offer.
        s.feed(b"\r100%\n", at(1300), &mut out);
        assert_eq!(s.partial_due(), None);
        assert_eq!(out.last().map(String::as_str), Some("100%"));

        // A character cut in two by the reads is offered once whole.
        s.feed("é".as_bytes().get(..1).expect("a byte"), at(2000), &mut out);
        assert_eq!(s.take_partial(at(2200)), None);
        s.feed(&"é".as_bytes()[1..], at(2300), &mut out);
        assert_eq!(s.take_partial(at(2500)).as_deref(), Some("é"));
        let mut out = Vec::new();
        s.finish(&mut out);
        assert_eq!(out, ["é"], "the end of the output finishes it");
    }

    /// Lines made in spare texts are the lines, whatever the spares held;
    /// the spares kept shrink to what a read needs once a flood ends, and
    /// long ones are not kept.
    #[test]
    fn spare_texts_make_the_same_lines_and_go_with_the_flood() {
        let mut s = LineSplitter::new(100);
        s.keep_spares(vec!["stale text".repeat(3); 10_000], 5_000);
        assert_eq!(s.spares.len(), SPARES);
        let mut out = Vec::new();
        s.feed(b"one\ntwo \xff\n\nthree\n", Instant::now(), &mut out);
        assert_eq!(out, ["one", "two \u{fffd}", "", "three"]);
        let spares = s.take_spares();
        s.keep_spares(spares, 1);
        assert_eq!(s.spares.len(), 66, "about what a one-line read needs");
        s.keep_spares(vec!["x".repeat(SPARE_BYTES + 1), String::with_capacity(8)], 1);
        assert_eq!(s.spares.len(), 1, "a long text is not kept");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(split(100, &[b"a\xffb\n"]), ["a\u{fffd}b"]);
    }
}
