//! Text that services wrote, on its way to a terminal: the one place the
//! TUI, the headless printer and `omnidev logs` turn it into what is shown.

use std::borrow::Cow;

use ansi_to_tui::IntoText;

/// The text of `raw` without its ANSI escape sequences.
pub fn strip_ansi(raw: &str) -> String {
    if !raw.contains('\x1b') {
        return raw.to_owned();
    }
    match raw.as_bytes().into_text() {
        Ok(text) => text
            .lines
            .iter()
            .map(|line| {
                line.spans
                    .iter()
                    .map(|s| s.content.as_ref())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(_) => raw.to_owned(),
    }
}

/// `text` as printed to an output that is coloured (escape sequences kept)
/// or plain (escape sequences removed).
pub fn for_output(text: &str, colour: bool) -> Cow<'_, str> {
    // Most lines have no escape at all: no copy for them.
    if colour || !text.contains('\x1b') {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(strip_ansi(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_ansi_removes_colour_codes() {
        assert_eq!(strip_ansi("\x1b[31merror\x1b[0m: boom"), "error: boom");
        assert_eq!(strip_ansi("plain"), "plain");
    }

    #[test]
    fn for_output_keeps_codes_only_when_colouring() {
        let text = "\x1b[31mred\x1b[0m";
        assert_eq!(for_output(text, true), text);
        assert_eq!(for_output(text, false), "red");
    }
}
