//! Plots of a replay: one image, two panels.
//!
//! - **Top:** what each policy would have cost, one horizontal bar per policy, cheapest at the
//!   bottom, each labelled with its dollars and its saving (or extra cost) in percent against
//!   the `recorded` series when there is one — green cheaper, red dearer, grey the recorded
//!   cost itself, with a line at the recorded total. (It used to be one cumulative line per
//!   policy over time: nine lines within a few percent of each other, which no reader could
//!   tell apart.) A series' total is its last finite point.
//! - **Bottom:** the idle-gap histogram. One category per [`GapBucket`] (labels such as `<1s`,
//!   `1–2s`, `5m–1h`, `1h+`), two bars per category: the requests that followed a gap of that
//!   length (left axis) and the cache-write tokens of those requests in millions (right axis).
//!   Each bar is labelled with its share of the total, because the point of the panel is the
//!   contrast: a few long gaps carry a large share of the writes.
//!
//! [`write_plot`] picks the format from the extension: `.svg` or `.png` (case-insensitive).
//!
//! ## Fonts
//!
//! plotters is built with `ab_glyph` rather than `ttf` so that we do not pull in font-kit and a
//! fontconfig binding. The price is that plotters knows no fonts of its own, and it needs one
//! for **both** formats: it measures every caption, axis label and legend entry to lay them out
//! (an SVG included, even though the viewer draws the glyphs), and rasterises the text of a PNG.
//! So we load a TrueType file at run time and register it as `sans-serif`. The search order is
//! the `MUNINN_FONT` environment variable if set (then it is the *only* candidate, so a typo is
//! reported rather than silently replaced), otherwise [`FONT_CANDIDATES`]. No usable font is
//! [`PlotError::NoFont`], whatever the format.
//!
//! ## Empty data
//!
//! Empty inputs are not errors: a panel without data (no series, only empty series, or no gap
//! buckets) is drawn with its title and a centred note saying there is nothing to show, so a
//! replay of an empty trace still produces an image. A series with a single point is drawn as a
//! dot. Non-finite dollar amounts are skipped.

use plotters::chart::DualCoordChartContext;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One policy's cumulative cost over time.
#[derive(Debug, Clone, PartialEq)]
pub struct CostSeries {
    /// The policy.
    pub label: String,
    /// `(Unix ms, cumulative dollars)`, in time order.
    pub points: Vec<(i64, f64)>,
}

/// One bucket of the idle-gap histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct GapBucket {
    /// Lower bound of the gap, seconds (inclusive).
    pub from_s: u64,
    /// Upper bound of the gap, seconds (exclusive; `u64::MAX` for the last).
    pub to_s: u64,
    /// Requests that followed a gap in this bucket.
    pub requests: u64,
    /// Cache-write tokens of those requests.
    pub write_tokens: u64,
}

/// Why a plot was not written. Returned by [`write_plot`]; none of these is worth retrying
/// unchanged.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The path does not end in `.svg` or `.png`.
    #[error("cannot plot to {0}: the file name must end in .svg or .png")]
    UnsupportedExtension(PathBuf),
    /// No usable TrueType font was found. plotters needs one to lay out text in either format
    /// (and to draw it in a PNG); see the module documentation.
    #[error(
        "plotting needs a TrueType font to lay out (and, for PNG, draw) its text, and none was \
         found (searched: {}); install fonts-dejavu-core or set MUNINN_FONT to a .ttf file",
        display_paths(searched)
    )]
    NoFont {
        /// The paths tried, in order.
        searched: Vec<PathBuf>,
    },
    /// plotters failed while drawing (a bug or an impossible layout, not the data's fault).
    #[error("drawing the plot failed: {0}")]
    Draw(String),
    /// The file could not be written.
    #[error("cannot write the plot to {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

fn display_paths(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

/// The largest font file read, bytes (the largest CJK collections are some 30 MB): a path
/// naming something larger is passed over as no font rather than read whole.
pub const FONT_MAX_BYTES: u64 = 64 << 20;

/// Where [`write_plot`] looks for a font when `MUNINN_FONT` is not set, in order: DejaVu Sans on
/// Debian/Ubuntu, Arch and Fedora, then Liberation and FreeFont, then macOS and Windows.
pub const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// Image size in pixels.
const SIZE: (u32, u32) = (1200, 900);

/// Colours for the series, cycled: the Tableau 10 palette, distinguishable on white and by most
/// colour-blind readers.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const REQUESTS_COLOUR: RGBColor = RGBColor(31, 119, 180);
const WRITES_COLOUR: RGBColor = RGBColor(255, 127, 14);

/// More buckets than this and the per-bar percentages would collide, so they are left out, and
/// only every k-th bucket gets its name under the axis.
const MAX_LABELLED_BUCKETS: usize = 16;

/// Draw the cost and idle-gap panels into `path` (`.svg` or `.png`, chosen by the extension,
/// case-insensitive), about 1200×900 pixels, with `title` across the top.
///
/// Empty inputs draw empty panels with a note (see the module documentation). Either format
/// needs a TrueType font ([`PlotError::NoFont`] otherwise). The file is created only once the
/// extension is known and a font has been found.
pub fn write_plot(
    path: &Path,
    title: &str,
    series: &[CostSeries],
    gaps: &[GapBucket],
) -> Result<(), PlotError> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let format = match extension.as_deref() {
        Some("svg") => Format::Svg,
        Some("png") => Format::Png,
        _ => return Err(PlotError::UnsupportedExtension(path.to_path_buf())),
    };
    ensure_font(&font_candidates(std::env::var_os("MUNINN_FONT")))?;
    let io_error = |source| PlotError::Io {
        path: path.to_path_buf(),
        source,
    };
    match format {
        Format::Svg => {
            // Render into memory first so that a drawing failure leaves no half-written file
            // and an I/O failure is reported as such.
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
                draw(&root, title, series, gaps).map_err(|e| PlotError::Draw(e.to_string()))?;
                root.present().map_err(|e| PlotError::Draw(e.to_string()))?;
            }
            std::fs::write(path, svg).map_err(io_error)
        }
        Format::Png => {
            // plotters' PNG encoder reports I/O failures as an opaque image error, so we check
            // that the file can be created ourselves and let the encoder overwrite it.
            std::fs::File::create(path).map_err(io_error)?;
            let drawn = {
                let root = BitMapBackend::new(path, SIZE).into_drawing_area();
                draw(&root, title, series, gaps)
                    .map_err(|e| e.to_string())
                    .and_then(|()| root.present().map_err(|e| e.to_string()))
            };
            drawn.map_err(|e| {
                // Best effort: do not leave the empty probe file behind.
                let _ = std::fs::remove_file(path);
                PlotError::Draw(e)
            })
        }
    }
}

enum Format {
    Svg,
    Png,
}

/// `MUNINN_FONT` replaces the built-in list rather than preceding it: someone who sets it wants
/// that font, and a wrong path should say so.
fn font_candidates(env_override: Option<std::ffi::OsString>) -> Vec<PathBuf> {
    match env_override {
        Some(path) if !path.is_empty() => vec![PathBuf::from(path)],
        _ => FONT_CANDIDATES.iter().map(PathBuf::from).collect(),
    }
}

/// The font registered with plotters, once per process. plotters keeps fonts in its own global
/// table and wants `&'static` bytes, so the file is read once and leaked (a few hundred KB); this
/// cell only stops us from doing it again on every plot. Failures are not cached, so installing a
/// font fixes the next call.
static REGISTERED_FONT: OnceLock<PathBuf> = OnceLock::new();

fn ensure_font(candidates: &[PathBuf]) -> Result<&'static Path, PlotError> {
    match REGISTERED_FONT.get() {
        Some(path) => Ok(path),
        None => register_first_font(candidates)
            .map(|path| REGISTERED_FONT.get_or_init(|| path).as_path()),
    }
}

/// Register the first candidate that exists and parses as a font, and return its path. Two
/// threads racing here register the same font twice; harmless.
fn register_first_font(candidates: &[PathBuf]) -> Result<PathBuf, PlotError> {
    for path in candidates {
        // Only a regular file, opened without blocking: `MUNINN_FONT` naming a named pipe was
        // waited on for a writer, for ever.
        let Ok(bytes) = muninn_fs::read_limited(path, FONT_MAX_BYTES, "a font") else {
            continue;
        };
        // Cheap signature check so that a stray non-font file is not leaked; ab_glyph parses the
        // tables when the font is registered, and a failure there leaves plotters' table as it was.
        if !matches!(
            bytes.get(..4),
            Some([0, 1, 0, 0] | b"OTTO" | b"true" | b"ttcf")
        ) {
            continue;
        }
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
            return Ok(path.clone());
        }
    }
    Err(PlotError::NoFont {
        searched: candidates.to_vec(),
    })
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    series: &[CostSeries],
    gaps: &[GapBucket],
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let body = if title.is_empty() {
        root.margin(8, 0, 0, 0)
    } else {
        root.margin(8, 0, 0, 0).titled(title, ("sans-serif", 28))?
    };
    let (top, bottom) = body.split_vertically(SIZE.1 * 47 / 100);
    draw_costs(&top, series)?;
    draw_gaps(&bottom, gaps)
}

fn draw_note<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    note: &str,
) -> DrawResult<DB> {
    let (w, h) = area.dim_in_pixel();
    let centred = Pos::new(HPos::Center, VPos::Center);
    let caption_style = TextStyle::from(("sans-serif", 20).into_font()).pos(centred);
    area.draw(&Text::new(
        caption.to_string(),
        (w as i32 / 2, 24),
        caption_style,
    ))?;
    let style = ("sans-serif", 18)
        .into_font()
        .color(&RGBColor(110, 110, 110))
        .pos(centred);
    area.draw(&Text::new(
        note.to_string(),
        (w as i32 / 2, h as i32 / 2),
        style,
    ))
}

fn draw_costs<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[CostSeries],
) -> DrawResult<DB> {
    const CAPTION: &str = "What each policy would have cost, against what was recorded";
    let totals = cost_totals(series);
    if totals.is_empty() {
        return draw_note(area, CAPTION, "no cost data to plot");
    }
    let recorded = totals
        .iter()
        .find(|(label, _)| *label == "recorded")
        .map(|t| t.1)
        .filter(|r| *r > 0.0);
    let max_usd = totals.iter().map(|t| t.1).fold(0.0_f64, f64::max);
    // Room to the right of the longest bar for its label.
    let x_max = if max_usd > 0.0 { max_usd * 1.45 } else { 1.0 };
    let n = totals.len();
    let names: Vec<String> = totals.iter().map(|t| t.0.to_string()).collect();
    let name_of = |y: &f64| {
        let i = y.round();
        if i < 0.0 || (y - i).abs() > 1e-6 {
            String::new()
        } else {
            names.get(i as usize).cloned().unwrap_or_default()
        }
    };
    let mut chart = ChartBuilder::on(area)
        .caption(CAPTION, ("sans-serif", 20))
        .margin(12)
        .margin_right(30)
        .x_label_area_size(45)
        .y_label_area_size(130)
        .build_cartesian_2d(0.0..x_max, -0.5..n as f64 - 0.5)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&name_of)
        .x_desc("dollars over the whole replay")
        .x_label_formatter(&|x| format!("${x:.2}"))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(220, 220, 220))
        .draw()?;
    // Green: cheaper than recorded; red: dearer; grey: recorded itself (or nothing to compare).
    let colour = |label: &str, usd: f64| match recorded {
        Some(_) if label == "recorded" => RGBColor(127, 127, 127),
        Some(r) if usd < r => RGBColor(44, 160, 44),
        Some(_) => RGBColor(214, 39, 40),
        None => PALETTE[0],
    };
    chart.draw_series(totals.iter().enumerate().map(|(i, &(label, usd))| {
        let y = i as f64;
        Rectangle::new(
            [(0.0, y - 0.35), (usd, y + 0.35)],
            colour(label, usd).filled(),
        )
    }))?;
    let style =
        TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    chart.draw_series(totals.iter().enumerate().map(|(i, &(label, usd))| {
        Text::new(
            cost_label(label, usd, recorded),
            (usd, i as f64),
            style.clone(),
        )
    }))?;
    if let Some(r) = recorded {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(r, -0.5), (r, n as f64 - 0.5)],
            RGBColor(60, 60, 60).stroke_width(1),
        )))?;
    }
    Ok(())
}

/// Each series' total (its last finite point), cheapest first.
fn cost_totals(series: &[CostSeries]) -> Vec<(&str, f64)> {
    let mut totals: Vec<(&str, f64)> = series
        .iter()
        .filter_map(|s| {
            let last = s.points.iter().rev().find(|p| p.1.is_finite())?;
            Some((s.label.as_str(), last.1))
        })
        .collect();
    totals.sort_by(|a, b| a.1.total_cmp(&b.1));
    totals
}

/// A bar's label: its dollars and, beside a recorded total, how much it saves or costs.
fn cost_label(label: &str, usd: f64, recorded: Option<f64>) -> String {
    match recorded {
        Some(r) if label != "recorded" => {
            let change = (usd / r - 1.0) * 100.0;
            let word = if change <= 0.0 { "saves" } else { "costs" };
            format!("  ${usd:.2} — {word} {:.1}% vs recorded", change.abs())
        }
        _ => format!("  ${usd:.2}"),
    }
}

fn draw_gaps<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    gaps: &[GapBucket],
) -> DrawResult<DB> {
    const CAPTION: &str = "Idle gap before each request: requests vs the cache writes that follow";
    if gaps.is_empty() {
        return draw_note(area, CAPTION, "no idle gaps to plot");
    }
    let labels: Vec<String> = gaps.iter().map(bucket_label).collect();
    let max_requests = gaps.iter().map(|g| g.requests).max().unwrap_or(0) as f64;
    let max_writes_m = gaps.iter().map(|g| g.write_tokens).max().unwrap_or(0) as f64 / 1e6;
    let y_max = head_room(max_requests);
    let y2_max = head_room(max_writes_m);
    let n = gaps.len();
    let label_every = n.div_ceil(MAX_LABELLED_BUCKETS);
    let label_of = |x: &f64| {
        let i = x.round();
        // Only whole positions are categories; anything else plotters might ask about is blank.
        if i < 0.0 || (x - i).abs() > 1e-6 || !(i as usize).is_multiple_of(label_every) {
            String::new()
        } else {
            labels.get(i as usize).cloned().unwrap_or_default()
        }
    };
    let mut chart = gap_chart(area, CAPTION, n, (y_max, y2_max), &label_of)?;
    draw_gap_bars(&mut chart, gaps)?;
    if n <= MAX_LABELLED_BUCKETS {
        draw_gap_shares(&mut chart, gaps, (y_max, y2_max))?;
    }
    // Typically the short gaps have the most requests (tall bars on the left) and the long gaps
    // the most writes (tall bars on the right); the middle is the likeliest free space.
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperMiddle)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(180, 180, 180))
        .margin(12)
        .draw()?;
    Ok(())
}

/// The gap panel's chart: requests on the left axis, cache-write tokens (millions) on the right.
type GapChart<'a, DB> = DualCoordChartContext<
    'a,
    DB,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
>;

/// Head-room above the tallest bar for its percentage label.
fn head_room(max: f64) -> f64 {
    if max > 0.0 { max * 1.15 } else { 1.0 }
}

/// The gap panel's axes and mesh for `n` buckets, `y_max` high on the left and right axes.
fn gap_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    n: usize,
    (y_max, y2_max): (f64, f64),
    label_of: &dyn Fn(&f64) -> String,
) -> Result<GapChart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    // Categories sit at 0, 1, …, n-1 on a continuous axis, so the two bars of a bucket can be
    // placed side by side (a segmented axis cannot offset them) and share it with the secondary
    // axis. Asking for n labels over a range n wide makes plotters pick a step of exactly 1, so
    // there is one tick, and one label, under each category.
    let x_range = -0.5..n as f64 - 0.5;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .right_y_label_area_size(80)
        .build_cartesian_2d(x_range.clone(), 0.0..y_max)?
        .set_secondary_coord(x_range, 0.0..y2_max);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_desc("idle gap before the request")
        .y_desc("requests")
        .x_label_formatter(label_of)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(220, 220, 220))
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_desc("cache-write tokens (millions)")
        .y_label_formatter(&|y| format!("{y:.1}"))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw()?;
    Ok(chart)
}

/// Two bars per bucket, side by side: its requests (left axis) and its cache writes (right).
fn draw_gap_bars<DB: DrawingBackend>(
    chart: &mut GapChart<'_, DB>,
    gaps: &[GapBucket],
) -> DrawResult<DB> {
    let bar = |centre: f64, left: bool, height: f64, colour: RGBColor| {
        let (x0, x1) = if left {
            (centre - 0.4, centre - 0.02)
        } else {
            (centre + 0.02, centre + 0.4)
        };
        Rectangle::new([(x0, 0.0), (x1, height)], colour.filled())
    };
    chart
        .draw_series(
            gaps.iter()
                .enumerate()
                .map(|(i, g)| bar(i as f64, true, g.requests as f64, REQUESTS_COLOUR)),
        )?
        .label("requests (left axis)")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], REQUESTS_COLOUR.filled()));
    chart
        .draw_secondary_series(
            gaps.iter()
                .enumerate()
                .map(|(i, g)| bar(i as f64, false, g.write_tokens as f64 / 1e6, WRITES_COLOUR)),
        )?
        .label("cache-write tokens (right axis)")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], WRITES_COLOUR.filled()));
    Ok(())
}

/// Each bar's share of its total, just above the bar: the percentages are what make "few
/// requests, many writes" readable at a glance.
fn draw_gap_shares<DB: DrawingBackend>(
    chart: &mut GapChart<'_, DB>,
    gaps: &[GapBucket],
    (y_max, y2_max): (f64, f64),
) -> DrawResult<DB> {
    let total_requests: u64 = gaps.iter().map(|g| g.requests).sum();
    let total_writes: u64 = gaps.iter().map(|g| g.write_tokens).sum();
    // "<1%" rather than "0%" for a bar that is there but small: 0% would read as "none".
    let percent = |part: u64, total: u64| match part as f64 / total.max(1) as f64 * 100.0 {
        p if p > 0.0 && p < 0.5 => "<1%".to_string(),
        p => format!("{p:.0}%"),
    };
    // A share's label, centred just above its bar.
    let label = |part: u64, total: u64, at: (f64, f64), colour: &RGBColor| {
        let style = ("sans-serif", 13).into_font().color(colour);
        Text::new(
            percent(part, total),
            at,
            style.pos(Pos::new(HPos::Center, VPos::Bottom)),
        )
    };
    chart.draw_series(
        gaps.iter()
            .enumerate()
            .filter(|(_, g)| g.requests > 0)
            .map(|(i, g)| {
                let at = (i as f64 - 0.21, g.requests as f64 + y_max * 0.01);
                label(g.requests, total_requests, at, &REQUESTS_COLOUR)
            }),
    )?;
    chart.draw_secondary_series(
        gaps.iter()
            .enumerate()
            .filter(|(_, g)| g.write_tokens > 0)
            .map(|(i, g)| {
                let at = (i as f64 + 0.21, g.write_tokens as f64 / 1e6 + y2_max * 0.01);
                label(g.write_tokens, total_writes, at, &WRITES_COLOUR)
            }),
    )?;
    Ok(())
}

/// `<1s`, `1–2s`, `30s–1m`, `5m–1h`, `1h+`: the bucket as a reader would say it.
fn bucket_label(bucket: &GapBucket) -> String {
    let duration = |s: u64| {
        let (size, name) = unit_of(s);
        format!("{}{name}", s / size)
    };
    match (bucket.from_s, bucket.to_s) {
        (0, u64::MAX) => "any".to_string(),
        (0, to) => format!("<{}", duration(to)),
        (from, u64::MAX) => format!("{}+", duration(from)),
        (from, to) => {
            let ((from_size, _), (to_size, to_name)) = (unit_of(from), unit_of(to));
            if from_size < to_size {
                // Each end in its own unit: "30s–1m", "5m–1h".
                format!("{}–{}", duration(from), duration(to))
            } else {
                // One unit, named once: "1–2s", "1–5m"; and "60–70s" rather than "1m–70s",
                // which reads as if the range ran backwards.
                format!("{}–{}{to_name}", from / to_size, to / to_size)
            }
        }
    }
}

/// The largest unit that divides `s` seconds exactly, as `(seconds, name)`.
fn unit_of(s: u64) -> (u64, &'static str) {
    [(86_400, "d"), (3_600, "h"), (60, "m")]
        .into_iter()
        .find(|&(size, _)| s.is_multiple_of(size))
        .unwrap_or((1, "s"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// `MUNINN_FONT` naming a named pipe: the font was read from it, waiting for a writer for
    /// ever, and the replay's plot never came. It is passed over as no font now.
    #[test]
    fn a_font_path_that_is_a_named_pipe_is_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let pipe = dir.path().join("font.ttf");
        let made = std::process::Command::new("mkfifo").arg(&pipe).status();
        assert!(made.unwrap().success());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(register_first_font(&[pipe]).map(|_| ()));
        });
        let found = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("still reading the pipe after 10 s");
        assert!(matches!(found, Err(PlotError::NoFont { .. })), "{found:?}");
    }

    fn bucket(from_s: u64, to_s: u64) -> GapBucket {
        GapBucket {
            from_s,
            to_s,
            requests: 0,
            write_tokens: 0,
        }
    }

    #[test]
    fn bucket_labels_read_like_durations() {
        let labels: Vec<String> = [
            (0, 1),
            (1, 2),
            (2, 5),
            (30, 60),
            (60, 300),
            (300, 3600),
            (3600, u64::MAX),
            (90, 150),
            (0, u64::MAX),
            (60, 70),
            (3600, 5400),
            (86_400, u64::MAX),
        ]
        .iter()
        .map(|&(a, b)| bucket_label(&bucket(a, b)))
        .collect();
        assert_eq!(
            labels,
            [
                "<1s",
                "1–2s",
                "2–5s",
                "30s–1m",
                "1–5m",
                "5m–1h",
                "1h+",
                "90–150s",
                "any",
                "60–70s",
                "60–90m",
                "1d+",
            ]
        );
    }

    #[test]
    fn missing_fonts_are_listed_in_the_error() {
        let searched = vec![
            PathBuf::from("/nonexistent/a.ttf"),
            PathBuf::from("/nonexistent/b.ttf"),
        ];
        let Err(err) = register_first_font(&searched) else {
            panic!("found a font that does not exist")
        };
        let message = err.to_string();
        assert!(
            matches!(&err, PlotError::NoFont { searched: s } if *s == searched),
            "{err:?}"
        );
        assert!(
            message.contains("/nonexistent/a.ttf, /nonexistent/b.ttf"),
            "{message}"
        );
        assert!(message.contains("fonts-dejavu-core"), "{message}");
    }

    #[test]
    fn a_file_that_is_not_a_font_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let bogus = dir.path().join("bogus.ttf");
        std::fs::write(&bogus, b"not a font").unwrap();
        assert!(matches!(
            register_first_font(&[bogus]),
            Err(PlotError::NoFont { .. })
        ));
    }

    #[test]
    fn the_environment_override_replaces_the_list() {
        assert_eq!(
            font_candidates(Some("/x/y.ttf".into())),
            vec![PathBuf::from("/x/y.ttf")]
        );
        assert_eq!(
            font_candidates(Some("".into())).len(),
            FONT_CANDIDATES.len()
        );
        assert_eq!(font_candidates(None)[0], PathBuf::from(FONT_CANDIDATES[0]));
    }
}
