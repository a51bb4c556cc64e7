//! What a hostile service writes, for property tests of the sanitiser and
//! of everything that quotes outside text.

use proptest::prelude::*;

/// Text a hostile service would write: escape sequences of every kind,
/// well- and ill-formed, between any characters at all.
pub fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        any::<char>().prop_map(String::from),
        "[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}\\u{202a}-\\u{202e}\\u{2066}-\\u{2069}]",
        "\\x1b\\[[0-9;:]{0,80}[m@-~]?",
        "\\x1b\\[(38|48|58)[;:][25][;:][0-9]{0,4}([;:][0-9]{0,4}){0,4}m",
        "\\x1b\\][0-9]{0,2};[^\\x07]{0,20}(\\x07|\\x1b\\\\)?",
        "\\x1b[P^_X][ -~]{0,10}(\\x1b\\\\)?",
        "[ -~]{0,10}",
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
}
