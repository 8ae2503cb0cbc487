//! The price table's validation at load: what `--prices` may hold.

use muninn_core::price::{PriceError, PriceTable};

/// A price past any real one was accepted and resolved with unchecked arithmetic: at $15e12 per
/// million tokens the 1.25× write rate wrapped past `u64::MAX` to a rate below the input's, and
/// every cost at such prices saturated at `i64::MAX` micro-dollars, printed as a figure.
#[test]
fn prices_past_the_limit_are_refused_with_the_model_named() {
    for (entry, field) in [
        ("input = 15000000000000.0\noutput = 1.0", "input"),
        ("input = 3.0\noutput = 1e300", "output"),
        ("input = 3.0\noutput = 15.0\nwrite_5m = 1e15", "write_5m"),
        ("input = 3.0\noutput = 15.0\nread = 1e300", "read"),
    ] {
        let text = format!("[[model]]\nname = \"x\"\n{entry}\n");
        match PriceTable::parse(&text, "t") {
            Err(PriceError::Invalid { model, message, .. }) => {
                assert_eq!(model, "x", "{entry}");
                assert!(message.starts_with(field), "{entry}: {message}");
            }
            other => panic!("{entry}: accepted or refused otherwise: {other:?}"),
        }
    }
    // The largest accepted prices resolve without wrapping.
    let text =
        "[[model]]\nname = \"x\"\ninput = 1000000.0\noutput = 1000000.0\nwrite_1h = 1000.0\n";
    let table = PriceTable::parse(text, "t").unwrap();
    let price = table.model("x").unwrap();
    assert_eq!(price.write_1h.0, 1_000_000_000_000_000);
}

/// A retention past `i64::MAX` seconds was cast to a negative one (`u64 as i64`), and the
/// optimum's expiry arithmetic then panicked on overflow (`muninn replay --prices`, debug build).
#[test]
fn a_retention_past_the_limit_is_refused_with_the_model_named() {
    for retention_s in [9_223_372_036_854_775_808_u64, u64::MAX, 1 << 40] {
        let text = format!(
            "[[model]]\nname = \"x\"\ninput = 1.0\noutput = 1.0\nprovider = \"openai\"\nretention_s = {retention_s}\n"
        );
        match PriceTable::parse(&text, "t") {
            Err(PriceError::Invalid { model, message, .. }) => {
                assert_eq!(model, "x");
                assert!(message.starts_with("retention_s"), "{message}");
            }
            other => panic!("{retention_s}: accepted or refused otherwise: {other:?}"),
        }
    }
}
