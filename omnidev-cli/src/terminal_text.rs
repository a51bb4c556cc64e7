//! Text that services wrote, on its way to a terminal: the one place the
//! TUI, the headless printer and `omnidev logs` turn it into what is shown.
//!
//! A service's output is untrusted. Only SGR colour sequences (`ESC [ … m`)
//! pass, and only when colour is on; an OSC 8 hyperlink keeps its text and
//! loses its wrapper. Every other escape sequence, C0 control but TAB, DEL,
//! C1 control and bidirectional override is shown visibly and inertly
//! (`ESC` as `^[`, `CR` as `^M`, U+009B as `<U+009B>`), so no service can
//! move the cursor, clear the screen, retitle the terminal, write the
//! clipboard, query the terminal or overwrite another service's prefix. The
//! rest of the line is never dropped. Log files keep the raw bytes.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Longest SGR parameter string kept (longer ones are shown, not obeyed).
const MAX_SGR: usize = 64;
/// Longest OSC 8 sequence recognised.
const MAX_OSC8: usize = 4096;

/// `raw` made safe for a terminal: SGR colour kept when `colour` (dropped
/// otherwise), OSC 8 link wrappers dropped, every other control rendered
/// visibly.
pub fn sanitise(raw: &str, colour: bool) -> Cow<'_, str> {
    // Most lines are printable ASCII: a byte scan settles them.
    let plain_ascii = raw.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b));
    if plain_ascii || !raw.chars().any(needs_care) {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len() + 16);
    let mut rest = raw;
    while let Some(c) = rest.chars().next() {
        if c == '\x1b' {
            if let Some(len) = sgr_len(rest) {
                if colour {
                    out.push_str(&rest[..len]);
                }
                rest = &rest[len..];
                continue;
            }
            if let Some(len) = osc8_len(rest) {
                rest = &rest[len..];
                continue;
            }
        }
        push_visible(&mut out, c);
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(out)
}

/// The text of `raw` as plain characters: [`sanitise`] without colour
/// (what search looks at).
pub fn plain(raw: &str) -> String {
    sanitise(raw, false).into_owned()
}

fn needs_care(c: char) -> bool {
    (c.is_control() && c != '\t') || is_bidi_control(c)
}

/// Directional overrides and isolates reorder what follows them on screen.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_visible(out: &mut String, c: char) {
    let code = u32::from(c);
    if c == '\t' || !needs_care(c) {
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
mod tests {
    use super::*;

    #[test]
    fn colour_passes_only_when_colouring() {
        let text = "\x1b[1;38;5;196mred\x1b[0m \x1b[38:2::1:2:3mtrue\x1b[m";
        assert_eq!(sanitise(text, true), text);
        assert_eq!(sanitise(text, false), "red true");
        assert_eq!(sanitise("plain\ttab", true), "plain\ttab");
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
    fn hyperlinks_keep_their_text_and_the_line_goes_on() {
        let link = "see \x1b]8;;https://example.com/\x1b\\the docs\x1b]8;;\x1b\\ and more";
        assert_eq!(sanitise(link, true), "see the docs and more");
        let bel = "\x1b]8;id=1;http://x\x07text\x1b]8;;\x07!";
        assert_eq!(sanitise(bel, false), "text!");
        // An unterminated link is shown, with everything after it.
        assert_eq!(
            sanitise("\x1b]8;;http://x no end", true),
            "^[]8;;http://x no end"
        );
    }

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(sanitise("héllo wörld", true), Cow::Borrowed(_)));
    }
}
