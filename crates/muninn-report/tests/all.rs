//! The crate's one integration-test binary: [`muninn_report::plot::write_plot`] writing real files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use muninn_report::plot::{CostSeries, GapBucket, PlotError, write_plot};
use std::path::PathBuf;

const HOUR_MS: i64 = 3_600_000;

fn series() -> Vec<CostSeries> {
    let start = 1_700_000_000_000;
    vec![
        CostSeries {
            label: "recorded".into(),
            points: (0..50)
                .map(|i| (start + i * HOUR_MS / 10, i as f64 * 0.4))
                .collect(),
        },
        CostSeries {
            label: "ski-rental".into(),
            points: (0..50)
                .map(|i| (start + i * HOUR_MS / 10, i as f64 * 0.25))
                .collect(),
        },
        // One point: no line segment to draw, must still not panic.
        CostSeries {
            label: "optimum".into(),
            points: vec![(start + HOUR_MS, 3.0)],
        },
    ]
}

fn gaps() -> Vec<GapBucket> {
    let bucket = |from_s, to_s, requests, write_tokens| GapBucket {
        from_s,
        to_s,
        requests,
        write_tokens,
    };
    vec![
        bucket(0, 1, 900, 200_000),
        bucket(1, 2, 300, 100_000),
        bucket(30, 60, 40, 150_000),
        bucket(300, 3600, 6, 2_500_000),
        bucket(3600, u64::MAX, 2, 4_000_000),
    ]
}

/// A PNG needs a font; so does an SVG (plotters measures text). Where none is installed the
/// drawing tests cannot run: that fails them (`scripts/test.sh` installs the font), unless
/// skipping is asked for with `MUNINN_SKIP_PEERS=1`, as for the other peers.
fn font_missing(result: &Result<(), PlotError>) -> bool {
    if let Err(err @ PlotError::NoFont { .. }) = result {
        no_font(err);
        return true;
    }
    false
}

/// Fails on a missing font unless `MUNINN_SKIP_PEERS=1`, then says it skipped.
fn no_font(err: &PlotError) {
    assert!(
        std::env::var("MUNINN_SKIP_PEERS").as_deref() == Ok("1"),
        "{err} (scripts/test.sh installs it; MUNINN_SKIP_PEERS=1 skips)"
    );
    eprintln!("SKIP: {err}");
}

/// `(width, height)` from a PNG's IHDR chunk, after checking the signature.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    // Signature (8), then the first chunk: length (4), type (4) = "IHDR", width (4), height (4).
    assert_eq!(&bytes[12..16], b"IHDR", "first chunk");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// The contents of an SVG's `<text>` elements, trimmed (plotters puts them on their own line).
fn svg_texts(svg: &str) -> Vec<&str> {
    svg.split("<text")
        .skip(1)
        .map(|element| {
            let body = &element[element.find('>').unwrap() + 1..];
            body[..body.find("</text>").unwrap()].trim()
        })
        .collect()
}

#[test]
fn svg_holds_the_series_and_bucket_labels() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plot.svg");
    let result = write_plot(&path, "replay of test data", &series(), &gaps());
    if font_missing(&result) {
        return;
    }
    result.unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(
        svg.trim_start().starts_with("<svg"),
        "{}",
        &svg[..100.min(svg.len())]
    );
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg.matches("<text").count(),
        svg.matches("</text>").count(),
        "balanced <text> elements"
    );
    assert!(svg.contains("width=\"1200\"") && svg.contains("height=\"900\""));
    // Text is XML-escaped: "<1s" appears as "&lt;1s".
    let texts = svg_texts(&svg);
    for label in [
        "replay of test data",
        "recorded",
        "ski-rental",
        "optimum",
        "&lt;1s",
        "1–2s",
        "30s–1m",
        "5m–1h",
        "1h+",
        "requests (left axis)",
        "cache-write tokens (right axis)",
    ] {
        assert!(texts.contains(&label), "no text {label:?} in {texts:?}");
    }
    // Writes after the two long gaps are 6.5M of 6.95M tokens: the bars say 36% and 58%.
    assert!(
        texts.contains(&"36%") && texts.contains(&"58%"),
        "{texts:?}"
    );
}

#[test]
fn png_has_the_signature_and_the_size() {
    let dir = tempfile::tempdir().unwrap();
    // The extension is case-insensitive.
    let path = dir.path().join("plot.PNG");
    let result = write_plot(&path, "replay of test data", &series(), &gaps());
    if font_missing(&result) {
        return;
    }
    result.unwrap();
    assert_eq!(png_size(&std::fs::read(&path).unwrap()), (1200, 900));
}

#[test]
fn other_extensions_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["plot.jpg", "plot", "plot.svg.gz", "svg"] {
        let path = dir.path().join(name);
        match write_plot(&path, "t", &series(), &gaps()) {
            Err(PlotError::UnsupportedExtension(p)) => assert_eq!(p, path),
            other => panic!("{name}: {other:?}"),
        }
        assert!(!path.exists(), "{name} was created");
    }
}

#[test]
fn empty_inputs_draw_empty_panels_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let svg_path = dir.path().join("empty.svg");
    let result = write_plot(&svg_path, "nothing", &[], &[]);
    if font_missing(&result) {
        return;
    }
    result.unwrap();
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let texts = svg_texts(&svg);
    assert!(
        texts.contains(&"no cost data to plot") && texts.contains(&"no idle gaps to plot"),
        "{texts:?}"
    );

    // Series without points, and buckets without requests or writes, as PNG too.
    let hollow = [CostSeries {
        label: "recorded".into(),
        points: vec![],
    }];
    let zero = [GapBucket {
        from_s: 0,
        to_s: 1,
        requests: 0,
        write_tokens: 0,
    }];
    write_plot(&svg_path, "nothing", &hollow, &zero).unwrap();
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg_texts(&svg).contains(&"no cost data to plot"));
    let png_path = dir.path().join("empty.png");
    write_plot(&png_path, "nothing", &hollow, &zero).unwrap();
    assert_eq!(png_size(&std::fs::read(&png_path).unwrap()), (1200, 900));

    // Every point at one instant and zero dollars: degenerate axes, still drawn.
    let flat = [CostSeries {
        label: "recorded".into(),
        points: vec![(5, 0.0), (5, 0.0), (5, f64::NAN)],
    }];
    write_plot(&png_path, "flat", &flat, &gaps()).unwrap();
}

#[test]
fn a_missing_directory_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["plot.svg", "plot.png"] {
        let path = dir.path().join("missing").join(name);
        match write_plot(&path, "t", &series(), &gaps()) {
            Err(PlotError::Io { path: p, .. }) => assert_eq!(p, path),
            Err(err @ PlotError::NoFont { .. }) => no_font(&err),
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// Runs this binary again, filtered to [`no_font_child`], with `MUNINN_FONT` pointing nowhere:
/// the font is registered once per process, so only a fresh process shows the no-font path.
#[test]
fn without_a_font_both_formats_are_refused() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "no_font_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("MUNINN_FONT", "/nonexistent/muninn-test-font.ttf")
        .env("MUNINN_TEST_NO_FONT_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "child did not run:\n{stdout}");
    assert!(
        stderr.contains("no-font child checked"),
        "child skipped its checks:\n{stderr}"
    );
}

/// The child half of [`without_a_font_both_formats_are_refused`]; a no-op when run directly.
#[test]
fn no_font_child() {
    if std::env::var_os("MUNINN_TEST_NO_FONT_CHILD").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for name in ["plot.svg", "plot.png"] {
        let path = dir.path().join(name);
        match write_plot(&path, "t", &series(), &gaps()) {
            Err(err) => {
                let only = [PathBuf::from("/nonexistent/muninn-test-font.ttf")];
                assert!(
                    matches!(&err, PlotError::NoFont { searched } if *searched == only),
                    "{name}: {err:?}"
                );
                assert!(err.to_string().contains("fonts-dejavu-core"), "{err}");
            }
            Ok(()) => panic!("{name}: drawn without a font"),
        }
        assert!(!path.exists(), "{name} was created without a font");
    }
    eprintln!("no-font child checked");
}
