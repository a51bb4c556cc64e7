//! Text from outside on its way to a terminal: the one sanitiser. The TUI,
//! the headless printer, `omnidev logs`/`events`, every message omnidev
//! prints (`note!`, `write_stdout`) and every rendered error go through it.
//!
//! Three kinds of text, one set of rules:
//! - [`sanitise`]: a service's output line. Only harmless SGR attributes
//!   pass (colours, 256-colour and truecolor with values in range, bold,
//!   dim, italic, underline, reverse, and their resets), and only when
//!   colour is on; a line that leaves an attribute on ends with a reset. An
//!   OSC 8 hyperlink keeps its text and loses its wrapper.
//! - [`message`]: omnidev's own text, which quotes names, paths and
//!   arguments: no escape sequence is obeyed; its line breaks and tabs
//!   stay.
//! - [`quote`]: one quoted name or path: nothing is obeyed, not even a line
//!   break.
//!
//! Whatever is not kept is shown visibly and inertly (`ESC` as `^[`, `CR`
//! as `^M`, U+009B as `<U+009B>`), so no service, checkout name or argument
//! can move the cursor, clear the screen, retitle the terminal, write the
//! clipboard, query the terminal, blink, conceal text or overwrite another
//! service's prefix. The rest of the text is never dropped. Log files keep
//! the raw bytes.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Longest SGR parameter string read (longer ones are shown, not obeyed).
const MAX_SGR: usize = 64;
/// Longest OSC 8 sequence recognised.
const MAX_OSC8: usize = 4096;
/// What ends a line that left an attribute on.
const RESET: &str = "\x1b[0m";

/// What the text is, and so what of it may reach the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A service's output line, colour kept or not.
    Output { colour: bool },
    /// omnidev's own text quoting outside text: line breaks and tabs kept.
    Message,
    /// One quoted name: every control shown.
    Quote,
}

/// `raw`, a service's output line, made safe for a terminal: harmless SGR
/// kept when `colour` (dropped otherwise) and reset at the end, OSC 8 link
/// wrappers dropped, every other control rendered visibly.
pub fn sanitise(raw: &str, colour: bool) -> Cow<'_, str> {
    render(raw, Origin::Output { colour })
}

/// `bytes` as text, invalid UTF-8 replaced with U+FFFD: valid text (nearly
/// every line of output) is checked by `from_utf8`, which takes ASCII a word
/// at a time, and copied once; only invalid text goes the byte-by-byte way
/// of `from_utf8_lossy`.
pub(crate) fn lossy(bytes: &[u8]) -> String {
    std::str::from_utf8(bytes)
        .map_or_else(|_| String::from_utf8_lossy(bytes).into_owned(), str::to_owned)
}

/// At most `max` characters of `value`, and `…` when it was longer: how
/// a value from outside (a file, a server's answer) is shortened for a
/// message.
pub fn clip(value: &str, max: usize) -> Cow<'_, str> {
    match value.char_indices().nth(max) {
        None => Cow::Borrowed(value),
        Some((end, _)) => Cow::Owned(format!("{}…", &value[..end])),
    }
}

/// `error` with its causes, each after a `: ` (one its text already says is
/// left out): `error sending request …: connection refused`. The one way
/// an error chain becomes a line, for a message or a record.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

/// The text of `raw` as plain characters: [`sanitise`] without colour
/// (what search looks at).
pub fn plain(raw: &str) -> String {
    sanitise(raw, false).into_owned()
}

/// omnidev's own message `text` (which may quote outside text) made safe
/// for a terminal: every control but line break and tab shown visibly.
pub fn message(text: &str) -> Cow<'_, str> {
    render(text, Origin::Message)
}

/// One quoted piece of outside text (a name, a path, an argument): every
/// control shown visibly, line breaks and tabs included.
pub fn quote(text: &str) -> Cow<'_, str> {
    render(text, Origin::Quote)
}

/// A path as [`quote`] shows it.
pub fn quote_path(path: &std::path::Path) -> String {
    quote(&path.to_string_lossy()).into_owned()
}

/// `word` as one word of a POSIX shell command line: as it is when it
/// holds only characters the shell takes literally, else single-quoted.
///
/// ```
/// use omnidev_core::text::shell_word;
/// assert_eq!(shell_word("/src/app-1"), "/src/app-1");
/// assert_eq!(shell_word("it's ~"), r"'it'\''s ~'");
/// assert_eq!(shell_word(""), "''");
/// ```
pub fn shell_word(word: &str) -> Cow<'_, str> {
    let literal = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    if !word.is_empty() && word.chars().all(literal) {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
    }
}

/// The one JSON line encoder (newline included) of every record, error
/// record and socket answer: `value` as serde_json writes it, then [`json`]
/// (DEL, C1 and bidi controls as `\u` escapes).
pub fn json_line(value: &impl serde::Serialize) -> String {
    // Plain data (strings, numbers, maps): encoding cannot fail.
    let line = serde_json::to_string(value).unwrap_or_default();
    let mut line = json(&line).into_owned();
    line.push('\n');
    line
}

/// `json`, text serde_json wrote, with every character a terminal could
/// obey that serde_json leaves as it is (DEL, C1 controls, bidirectional
/// controls: only ever inside strings) written as a `\u` escape: the same
/// JSON value, no control byte.
pub fn json(json: &str) -> Cow<'_, str> {
    // serde_json escapes every C0 control: ASCII needs nothing more.
    if json.bytes().all(|b| b < 0x7f) || !json.chars().any(|c| needs_care(c, Origin::Message)) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if needs_care(c, Origin::Message) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether a terminal would obey `c` (a control character or a
/// bidirectional control): what none of the above lets through raw.
pub fn obeyed(c: char) -> bool {
    needs_care(c, Origin::Quote)
}

fn render(raw: &str, kind: Origin) -> Cow<'_, str> {
    // Most text is printable ASCII: a scan a word at a time settles it (a
    // tab, allowed but for quotes, takes the byte scan).
    let plain_ascii = printable_ascii(raw.as_bytes())
        || raw.bytes().all(|b| (0x20..0x7f).contains(&b) || (b == b'\t' && kind != Origin::Quote));
    if plain_ascii || !raw.chars().any(|c| needs_care(c, kind)) {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len() + 16);
    // Whether an SGR kept so far leaves an attribute on.
    let mut styled = false;
    let mut rest = raw;
    while let Some(c) = rest.chars().next() {
        if c == '\x1b'
            && let Origin::Output { colour } = kind
        {
            if let Some(len) = sgr_len(rest) {
                if colour && let Some(kept) = harmless_sgr(&rest[2..len - 1]) {
                    out.push_str("\x1b[");
                    out.push_str(&kept);
                    out.push('m');
                    styled = !ends_reset(&kept);
                }
                rest = &rest[len..];
                continue;
            }
            if let Some(len) = osc8_len(rest) {
                rest = &rest[len..];
                continue;
            }
        }
        push_visible(&mut out, c, kind);
        rest = &rest[c.len_utf8()..];
    }
    if styled {
        out.push_str(RESET);
    }
    Cow::Owned(out)
}

/// Whether every byte of `bytes` is printable ASCII (`0x20..=0x7e`),
/// eight bytes at a time: a word has a byte below `0x20` when subtracting
/// `0x20` from each byte borrows into a high bit that was clear, and one
/// above `0x7e` when adding 1 sets a high bit (or it was set).
fn printable_ascii(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let printable = |word: u64| {
        let below = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
        let above = (word.wrapping_add(ONES) | word) & HIGH;
        below | above == 0
    };
    let mut words = bytes.chunks_exact(8);
    let whole = words.all(|w| printable(u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))));
    whole && words.remainder().iter().all(|b| (0x20..0x7f).contains(b))
}

fn needs_care(c: char, kind: Origin) -> bool {
    let kept = match kind {
        Origin::Output { .. } => c == '\t',
        Origin::Message => c == '\t' || c == '\n',
        Origin::Quote => false,
    };
    !kept && (c.is_control() || is_bidi_control(c))
}

/// Directional overrides and isolates reorder what follows them on screen.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_visible(out: &mut String, c: char, kind: Origin) {
    let code = u32::from(c);
    if !needs_care(c, kind) {
        out.push(c);
    } else if code < 0x20 {
        out.push('^');
        out.push(char::from_u32(code + 0x40).unwrap_or('?'));
    } else if code == 0x7f {
        out.push_str("^?");
    } else {
        let _ = write!(out, "<U+{code:04X}>");
    }
}

/// Length of an SGR sequence (`ESC [` digits `;` `:` … `m`) at the start
/// of `text`.
fn sgr_len(text: &str) -> Option<usize> {
    let params = text.strip_prefix("\x1b[")?;
    let end = params
        .bytes()
        .take(MAX_SGR + 1)
        .position(|b| !(b.is_ascii_digit() || b == b';' || b == b':'))?;
    (params.as_bytes()[end] == b'm').then_some(2 + end + 1)
}

/// The harmless attributes of an SGR parameter string, rebuilt: `Some("")`
/// for a bare reset, `None` when nothing harmless is left (the sequence is
/// then dropped whole: an empty one would be a reset). Kept: reset (0),
/// bold (1), dim (2), italic (3), underline (4, and its styles `4:0`–`4:5`),
/// reverse (7), their resets (22–24, 27), the 8 and 16 colours (30–37,
/// 40–47, 90–97, 100–107), the defaults (39, 49, 59), and 256-colour or
/// truecolor foreground, background and underline colours (38/48/58 with
/// `5;N` or `2;R;G;B`, `;` or `:` separated) whose values are 0–255.
/// Dropped: blink (5, 6), conceal (8), everything else, and any value that
/// is out of range or longer than three digits.
fn harmless_sgr(params: &str) -> Option<String> {
    if params.is_empty() {
        return Some(String::new());
    }
    let parts: Vec<&str> = params.split(';').collect();
    let mut kept: Vec<String> = Vec::new();
    let mut i = 0;
    while i < parts.len() {
        let part = parts[i];
        i += 1;
        if part.contains(':') {
            if colon_form_is_harmless(part) {
                // Rebuilt with its numbers written plainly (`04:3` is `4:3`).
                let subs: Vec<String> = part
                    .split(':')
                    .map(|sub| match sub {
                        "" => String::new(),
                        sub => number(sub).unwrap_or(0).to_string(),
                    })
                    .collect();
                kept.push(subs.join(":"));
            }
            continue;
        }
        let Some(code) = number(part) else { continue };
        match code {
            0..=4 | 7 | 22..=24 | 27 | 30..=37 | 39..=47 | 49 | 59 | 90..=97 | 100..=107 => {
                kept.push(code.to_string());
            }
            38 | 48 | 58 => {
                let (taken, valid) = match parts.get(i).copied().and_then(number) {
                    Some(5) => (2, parts.len() > i + 1 && byte(parts[i + 1])),
                    Some(2) => {
                        (4, parts.len() > i + 3 && parts[i + 1..i + 4].iter().all(|p| byte(p)))
                    }
                    _ => (1, false),
                };
                let end = (i + taken).min(parts.len());
                if valid {
                    let mut colour = code.to_string();
                    for p in &parts[i..end] {
                        colour.push(';');
                        colour.push_str(&number(p).unwrap_or(0).to_string());
                    }
                    kept.push(colour);
                }
                i = end;
            }
            _ => {}
        }
    }
    (!kept.is_empty()).then(|| kept.join(";"))
}

/// `38:5:N`, `38:2:R:G:B`, `38:2:ID:R:G:B` (and 48, 58) with values 0–255,
/// or an underline style `4:0`–`4:5`.
fn colon_form_is_harmless(part: &str) -> bool {
    let subs: Vec<&str> = part.split(':').collect();
    let written = |part: Option<&&str>| part.filter(|p| !p.is_empty()).and_then(|p| number(p));
    match (written(subs.first()), written(subs.get(1))) {
        (Some(4), Some(style)) => subs.len() == 2 && style <= 5,
        (Some(38 | 48 | 58), Some(5)) => subs.len() == 3 && byte(subs[2]),
        (Some(38 | 48 | 58), Some(2)) => match subs.len() {
            5 => subs[2..].iter().all(|s| byte(s)),
            6 => (subs[2].is_empty() || byte(subs[2])) && subs[3..].iter().all(|s| byte(s)),
            _ => false,
        },
        _ => false,
    }
}

/// A parameter of at most three digits (empty is 0).
fn number(part: &str) -> Option<u16> {
    match part.len() {
        0 => Some(0),
        1..=3 => part.parse().ok(),
        _ => None,
    }
}

/// A parameter that is a colour component, 0–255 written out (not empty).
fn byte(part: &str) -> bool {
    !part.is_empty() && number(part).is_some_and(|n| n <= 255)
}

/// Whether kept parameters end with a reset (nothing left on).
fn ends_reset(kept: &str) -> bool {
    matches!(kept.rsplit(';').next(), None | Some("" | "0"))
}

/// Length of an OSC 8 hyperlink sequence (`ESC ] 8 ; params ; URI` ended
/// by `BEL` or `ESC \`) at the start of `text`. Its URI may hold no
/// control character.
fn osc8_len(text: &str) -> Option<usize> {
    let body = text.strip_prefix("\x1b]8;")?;
    for (i, b) in body.bytes().enumerate().take(MAX_OSC8) {
        match b {
            0x07 => return Some(4 + i + 1),
            0x1b => return body[i..].starts_with("\x1b\\").then_some(4 + i + 2),
            b if b < 0x20 || b == 0x7f => return None,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The word-at-a-time scan agrees with the byte scan on every byte
    /// value at every place in a word, and on every length.
    #[test]
    fn the_word_scan_agrees_with_the_byte_scan() {
        let bytes_scan = |bytes: &[u8]| bytes.iter().all(|b| (0x20..0x7f).contains(b));
        for len in 0..=24 {
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut text = vec![b'a'; len];
                    text[at] = byte;
                    assert_eq!(
                        printable_ascii(&text),
                        bytes_scan(&text),
                        "{byte:#x} at {at} of {len}"
                    );
                }
            }
            assert!(printable_ascii(&vec![b'~'; len]));
            assert!(printable_ascii(&vec![b' '; len]));
        }
    }

    #[test]
    fn an_error_reads_with_its_causes_each_said_once() {
        #[derive(Debug)]
        struct Layer(&'static str, Option<Box<Layer>>);
        impl std::fmt::Display for Layer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Layer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|l| l as &(dyn std::error::Error + 'static))
            }
        }
        let refused = Layer("connection refused", None);
        let connect = Layer("connect failed: connection refused", Some(Box::new(refused)));
        let top = Layer("could not reach the pod", Some(Box::new(connect)));
        assert_eq!(
            with_causes(&top),
            "could not reach the pod: connect failed: connection refused"
        );
    }

    #[test]
    fn colour_passes_only_when_colouring_and_is_reset_at_the_end() {
        let text = "\x1b[1;38;5;196mred\x1b[0m \x1b[38:2::1:2:3mtrue\x1b[m";
        assert_eq!(sanitise(text, true), text);
        assert_eq!(sanitise(text, false), "red true");
        assert_eq!(sanitise("plain\ttab", true), "plain\ttab");
        // A line that leaves its colour on is reset at its end.
        assert_eq!(sanitise("\x1b[31mred", true), "\x1b[31mred\x1b[0m");
        assert_eq!(sanitise("\x1b[0;4mu", true), "\x1b[0;4mu\x1b[0m");
        assert_eq!(sanitise("\x1b[31mred\x1b[0m", true), "\x1b[31mred\x1b[0m");
        assert_eq!(sanitise("\x1b[31mred", false), "red");
    }

    #[test]
    fn only_harmless_attributes_pass() {
        let cases = [
            // Blink and conceal go; what is harmless beside them stays.
            ("\x1b[5mx", "x"),
            ("\x1b[6mx", "x"),
            ("\x1b[8mhidden", "hidden"),
            ("\x1b[1;5;31mx", "\x1b[1;31mx\x1b[0m"),
            ("\x1b[9;2;3;7mx", "\x1b[2;3;7mx\x1b[0m"),
            // Out of range and absurd parameters.
            ("\x1b[38;5;256mx", "x"),
            ("\x1b[38;2;1;2;999mx", "x"),
            ("\x1b[38;2;1;2mx", "x"),
            ("\x1b[38;5mx", "x"),
            ("\x1b[99999999999mx", "x"),
            ("\x1b[0001mx", "x"),
            ("\x1b[38:5:300mx", "x"),
            ("\x1b[38:2:1:2:3:4:5mx", "x"),
            ("\x1b[4:9mx", "x"),
            ("\x1b[::::mx", "x"),
            // Kept, in every form.
            ("\x1b[4:3mx", "\x1b[4:3mx\x1b[0m"),
            ("\x1b[48;2;0;128;255mx", "\x1b[48;2;0;128;255mx\x1b[0m"),
            ("\x1b[58:5:1mx", "\x1b[58:5:1mx\x1b[0m"),
            ("\x1b[38;5;9;5mx", "\x1b[38;5;9mx\x1b[0m"),
            ("\x1b[01;031mx", "\x1b[1;31mx\x1b[0m"),
            ("\x1b[mx", "\x1b[mx"),
            ("\x1b[22;23;24;27;39;49mx", "\x1b[22;23;24;27;39;49mx\x1b[0m"),
        ];
        for (raw, shown) in cases {
            assert_eq!(sanitise(raw, true), shown, "{raw:?}");
        }
    }

    #[test]
    fn every_other_control_is_visible_and_inert() {
        let cases = [
            ("\x1b]0;pwned\x07tail", "^[]0;pwned^Gtail"),
            ("\x1b]52;c;aGk=\x1b\\tail", "^[]52;c;aGk=^[\\tail"),
            ("\x1b[2J\x1b[H", "^[[2J^[[H"),
            ("\x1b[6n", "^[[6n"),
            ("\x1bP+q544e\x1b\\", "^[P+q544e^[\\"),
            ("fake\rserver | x", "fake^Mserver | x"),
            ("ab\x08\x08XY", "ab^H^HXY"),
            ("\x00\x7f", "^@^?"),
            ("\u{9b}2J \u{9d}0;t\u{9c}", "<U+009B>2J <U+009D>0;t<U+009C>"),
            ("\u{202e}txt.exe", "<U+202E>txt.exe"),
            ("\x1b[31;1H", "^[[31;1H"),
            ("\x1b[", "^[["),
            ("\x1b", "^["),
        ];
        for (raw, shown) in cases {
            assert_eq!(sanitise(raw, true), shown, "{raw:?}");
            assert_eq!(sanitise(raw, false), shown, "{raw:?}");
        }
    }

    #[test]
    fn messages_and_quotes_obey_nothing() {
        let name = "repo\x1b[31m\x1b]0;t\x07\u{9b}\n\tx";
        assert_eq!(message(name), "repo^[[31m^[]0;t^G<U+009B>\n\tx");
        assert_eq!(quote(name), "repo^[[31m^[]0;t^G<U+009B>^J^Ix");
        assert_eq!(quote_path(std::path::Path::new("/a/\x1b[2Jb")), "/a/^[[2Jb");
        assert!(matches!(message("plain\nlines"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_keeps_its_value_and_loses_its_controls() {
        let value = serde_json::json!({ "name": "a\u{9b}b\u{7f}\u{202e}\x1b[2J" });
        let text = serde_json::to_string(&value).expect("encode");
        let safe = json(&text);
        assert!(!safe.chars().any(|c| needs_care(c, Origin::Quote)), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).expect("decode");
        assert_eq!(back, value);
    }

    #[test]
    fn hyperlinks_keep_their_text_and_the_line_goes_on() {
        let link = "see \x1b]8;;https://example.com/\x1b\\the docs\x1b]8;;\x1b\\ and more";
        assert_eq!(sanitise(link, true), "see the docs and more");
        let bel = "\x1b]8;id=1;http://x\x07text\x1b]8;;\x07!";
        assert_eq!(sanitise(bel, false), "text!");
        // An unterminated link is shown, with everything after it.
        assert_eq!(sanitise("\x1b]8;;http://x no end", true), "^[]8;;http://x no end");
    }

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(sanitise("héllo wörld", true), Cow::Borrowed(_)));
    }

    /// Every escape sequence in `text`: its parameters when it is an SGR
    /// (`ESC [ params m`), `Err` with what follows otherwise.
    fn escapes(text: &str) -> Vec<Result<&str, &str>> {
        text.match_indices('\x1b')
            .map(|(i, _)| {
                let rest = &text[i..];
                match sgr_len(rest) {
                    Some(len) => Ok(&rest[2..len - 1]),
                    None => Err(rest),
                }
            })
            .collect()
    }

    /// Whether a terminal reading the SGR parameters `params` would do
    /// nothing but what is allowed: written apart from [`harmless_sgr`], as
    /// a terminal reads them.
    fn allowed(params: &str) -> bool {
        const ATTRIBUTES: &[u16] = &[0, 1, 2, 3, 4, 7, 22, 23, 24, 27, 39, 49, 59];
        let value = |p: &str| p.len() <= 3 && p.parse::<u16>().is_ok_and(|n| n <= 255);
        let mut parts = params.split(';');
        while let Some(part) = parts.next() {
            let subs: Vec<&str> = part.split(':').collect();
            if subs.len() > 1 {
                let ok = match (subs[0], subs[1]) {
                    ("4", style) => {
                        subs.len() == 2 && value(style) && style.parse::<u8>().is_ok_and(|s| s <= 5)
                    }
                    ("38" | "48" | "58", "5") => subs.len() == 3 && value(subs[2]),
                    ("38" | "48" | "58", "2") => {
                        (subs.len() == 5
                            || subs.len() == 6 && (subs[2].is_empty() || value(subs[2])))
                            && subs[subs.len() - 3..].iter().all(|s| value(s))
                    }
                    _ => false,
                };
                if !ok {
                    return false;
                }
                continue;
            }
            let code = if part.is_empty() {
                Some(0)
            } else {
                part.parse::<u16>().ok().filter(|_| part.len() <= 3)
            };
            let Some(code) = code else { return false };
            match code {
                38 | 48 | 58 => {
                    let ok = match parts.next() {
                        Some("5") => parts.next().is_some_and(value),
                        Some("2") => (0..3).all(|_| parts.next().is_some_and(value)),
                        _ => false,
                    };
                    if !ok {
                        return false;
                    }
                }
                30..=37 | 40..=47 | 90..=97 | 100..=107 => {}
                code if ATTRIBUTES.contains(&code) => {}
                _ => return false,
            }
        }
        true
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Whatever goes in, nothing but an allowed SGR comes out: no other
        /// escape sequence, no control character but TAB; with colour off
        /// no escape at all; a line ends with its attributes reset.
        #[test]
        fn no_control_but_an_allowed_sgr_ever_comes_out(raw in omnidev_test_support::hostile::text()) {
            for colour in [true, false] {
                let out = sanitise(&raw, colour);
                for escape in escapes(&out) {
                    let params = escape.map_err(|rest| format!("{rest:?}"));
                    prop_assert!(colour, "an escape with colour off: {out:?}");
                    let params = params.map_err(TestCaseError::fail)?;
                    prop_assert!(allowed(params), "SGR {params:?} passed in {out:?}");
                }
                prop_assert!(
                    !out.chars().any(|c| c != '\x1b' && needs_care(c, Origin::Output { colour })),
                    "a control passed: {out:?}"
                );
                let last = escapes(&out).into_iter().next_back();
                if let Some(Ok(params)) = last {
                    prop_assert!(ends_reset(params), "not reset at the end: {out:?}");
                }
            }
        }

        /// Messages and quotes let no escape through at all.
        #[test]
        fn messages_and_quotes_let_no_escape_through(raw in omnidev_test_support::hostile::text()) {
            let message = message(&raw);
            prop_assert!(!message.chars().any(|c| needs_care(c, Origin::Message)), "{message:?}");
            prop_assert!(!message.contains('\x1b'));
            let quoted = quote(&raw);
            prop_assert!(!quoted.chars().any(|c| c.is_control() || is_bidi_control(c)), "{quoted:?}");
        }

        /// JSON made safe is the same JSON value, without a control byte.
        #[test]
        fn json_is_the_same_value_without_controls(raw in omnidev_test_support::hostile::text()) {
            let text = serde_json::to_string(&raw).expect("encode");
            let safe = json(&text);
            prop_assert!(!safe.chars().any(|c| c.is_control() || is_bidi_control(c)), "{safe:?}");
            let back: String = serde_json::from_str(&safe).expect("decode");
            prop_assert_eq!(back, raw);
        }
    }
}
