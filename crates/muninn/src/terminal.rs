//! What reaches a terminal: text from elsewhere (senders, messages, room names, a server's error)
//! printed with its control characters made visible, so it cannot drive the terminal.
//!
//! A chat message is written by anyone in the room. Printed raw, `\e]0;…\a` retitles the
//! window, `\e[2J` clears the screen, OSC 52 (`\e]52;c;…\a`) writes the clipboard, a lone `\r`
//! overwrites the start of the line with something else, and the C1 controls (U+0080–U+009F)
//! are the same sequences in one code point on terminals that honour them. [`sanitize`] is the
//! one function every human-facing line goes through (`output::write` applies it to all of
//! stdout; `main` to the errors and warnings on stderr): each such character becomes its
//! `\uXXXX` escape — visible, unambiguous, and inside a JSON string the same character, so a
//! JSON line stays valid and means what it meant. Newlines and tabs are layout and pass.
//! Unicode's bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069), which reorder
//! what is displayed ("Trojan Source"), are escaped too.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal as it is.
fn is_unsafe(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        // C0 (ESC, BEL, CR, backspace…), DEL and C1 (CSI, OSC, ST…).
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

/// `text` with every control character (but newline and tab), C1 control and bidirectional
/// override replaced by its `\uXXXX` escape; borrowed when there is none.
pub fn sanitize(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn escape_sequences_become_visible_text() {
        let cases = [
            // Window title (OSC 0, ended by BEL).
            ("\u{1b}]0;pwned\u{7}hi", "\\u001b]0;pwned\\u0007hi"),
            // Clear screen (CSI 2 J).
            ("a\u{1b}[2Jb", "a\\u001b[2Jb"),
            // Clipboard write (OSC 52, ended by ST).
            (
                "\u{1b}]52;c;ZWNobyBwd25lZA==\u{1b}\\",
                "\\u001b]52;c;ZWNobyBwd25lZA==\\u001b\\",
            ),
            // C1 CSI and OSC in one code point each; DEL; a carriage return.
            ("\u{9b}2J\u{9d}0;x\u{9c}", "\\u009b2J\\u009d0;x\\u009c"),
            ("ok\u{7f}\rfake", "ok\\u007f\\u000dfake"),
            // Bidirectional override.
            ("abc\u{202e}fed", "abc\\u202efed"),
        ];
        for (raw, shown) in cases {
            assert_eq!(sanitize(raw), shown, "{raw:?}");
            assert!(
                !sanitize(raw).chars().any(|c| c.is_control() && c != '\n'),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn ordinary_text_layout_and_json_pass_unchanged() {
        for text in ["plain", "two\nlines\tand a tab", "ünïcödé → ok 🙂", ""] {
            assert!(matches!(sanitize(text), std::borrow::Cow::Borrowed(_)));
        }
        // A C1 control inside a JSON string (serde_json leaves it raw) becomes an escape that
        // decodes to the same string.
        let json = serde_json::json!({ "text": "a\u{9b}b" }).to_string();
        let shown = sanitize(&json);
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["text"], "a\u{9b}b");
    }
}
