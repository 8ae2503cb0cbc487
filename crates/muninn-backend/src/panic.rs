//! A caught panic's payload as text, for the supervisors that restart what panicked (the
//! host's Minds and chores, the Matrix connector's accounts) and for the test kit's reports.
//!
//! It lives here, in the crate each of them already depends on, so the wording is one.

use std::any::Any;

/// A panic's payload as text: its message when `panic!` was given one (a `&str` or a
/// `String`), "a panic without a message" otherwise.
///
/// Pass the payload itself, `&*payload`, not `&payload`: a `&Box<dyn Any + Send>` coerces to
/// `&dyn Any` as the box, which is no string, and the message would be lost.
pub fn payload_text(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::payload_text;

    #[test]
    fn a_payload_says_its_message_when_it_has_one() {
        let caught = |f: fn()| std::panic::catch_unwind(f).err();
        let [literal, formatted, other] = [
            caught(|| panic!("a literal")),
            caught(|| panic!("formatted {}", 7)),
            caught(|| std::panic::panic_any(7_u8)),
        ]
        .map(|payload| payload.map(|p| payload_text(&*p)));
        assert_eq!(literal.as_deref(), Some("a literal"));
        assert_eq!(formatted.as_deref(), Some("formatted 7"));
        assert_eq!(other.as_deref(), Some("a panic without a message"));
    }
}
