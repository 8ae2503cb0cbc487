//! The dashboard's charts as inline SVG, written here: lines, bars and a timeline, each with
//! axes, ticks, a legend and a `<title>` on every mark (the browser shows it on hover). No
//! script draws them, so a page is complete as served.

use super::html::esc;
use std::fmt::Write;

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 16.0;
/// Room for the title (first line) and the legend (second line).
const TOP: f64 = 46.0;
const BOTTOM: f64 = 36.0;

/// One line of a line chart.
#[derive(Debug, Clone)]
pub(super) struct Series<'a> {
    /// Its name in the legend.
    pub(super) name: &'a str,
    /// A CSS colour.
    pub(super) color: &'a str,
    /// (x, y), in x order.
    pub(super) points: Vec<(f64, f64)>,
}

/// A horizontal line across a chart (a limit), with its label.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limit<'a> {
    pub(super) y: f64,
    pub(super) label: &'a str,
}

/// One lane of a timeline.
#[derive(Debug, Clone)]
pub(super) struct Lane<'a> {
    pub(super) name: &'a str,
    pub(super) spans: Vec<Span>,
}

/// A span on a lane.
#[derive(Debug, Clone)]
pub(super) struct Span {
    pub(super) start: f64,
    pub(super) end: f64,
    /// Written inside the bar when it fits.
    pub(super) label: String,
    /// Shown on hover.
    pub(super) tip: String,
    /// Still open (drawn with a dashed edge).
    pub(super) open: bool,
}

/// A linear scale from data to pixels.
#[derive(Debug, Clone, Copy)]
struct Scale {
    from: (f64, f64),
    to: (f64, f64),
}

impl Scale {
    fn new(lo: f64, hi: f64, to: (f64, f64)) -> Scale {
        let hi = if hi > lo { hi } else { lo + 1.0 };
        Scale { from: (lo, hi), to }
    }
    fn at(&self, v: f64) -> f64 {
        let (lo, hi) = self.from;
        self.to.0 + (v - lo) / (hi - lo) * (self.to.1 - self.to.0)
    }
}

/// About five round tick values covering `lo..=hi`.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * magnitude);
    let mut out = Vec::new();
    let mut v = (lo / step).ceil() * step;
    while v <= hi + step * 1e-9 && out.len() < 12 {
        out.push(v);
        v += step;
    }
    out
}

fn open_svg(out: &mut String, id: &str, title: &str) {
    let _ = write!(
        out,
        r#"<svg id="{id}" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{t}" xmlns="http://www.w3.org/2000/svg"><text class="chart-title" x="{LEFT}" y="18">{t}</text>"#,
        id = esc(id),
        t = esc(title),
    );
}

fn y_axis(out: &mut String, y: &Scale, lo: f64, hi: f64, fmt: &dyn Fn(f64) -> String) {
    for t in ticks(lo, hi) {
        let py = y.at(t);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{LEFT}" x2="{x2}" y1="{py:.1}" y2="{py:.1}"/><text class="tick" x="{tx}" y="{ty:.1}" text-anchor="end">{label}</text>"#,
            x2 = WIDTH - RIGHT,
            tx = LEFT - 6.0,
            ty = py + 4.0,
            label = esc(&fmt(t)),
        );
    }
}

fn x_axis(out: &mut String, x: &Scale, lo: f64, hi: f64, label: &str, fmt: &dyn Fn(f64) -> String) {
    let base = HEIGHT - BOTTOM;
    let _ = write!(
        out,
        r#"<line class="axis" x1="{LEFT}" x2="{x2}" y1="{base}" y2="{base}"/>"#,
        x2 = WIDTH - RIGHT
    );
    for t in ticks(lo, hi) {
        let px = x.at(t);
        let _ = write!(
            out,
            r#"<text class="tick" x="{px:.1}" y="{ty}" text-anchor="middle">{l}</text>"#,
            ty = base + 14.0,
            l = esc(&fmt(t)),
        );
    }
    let _ = write!(
        out,
        r#"<text class="axis-label" x="{cx}" y="{ly}" text-anchor="middle">{l}</text>"#,
        cx = (LEFT + WIDTH - RIGHT) / 2.0,
        ly = HEIGHT - 4.0,
        l = esc(label),
    );
}

fn legend(out: &mut String, items: &[(&str, &str)]) {
    let mut x = LEFT;
    for (name, color) in items {
        let w = 22.0 + 6.5 * name.chars().count() as f64;
        let _ = write!(
            out,
            r#"<rect x="{x:.1}" y="25" width="10" height="10" fill="{c}"/><text class="legend" x="{tx:.1}" y="34">{n}</text>"#,
            c = esc(color),
            tx = x + 13.0,
            n = esc(name),
        );
        x += w;
    }
}

/// A line chart of `series` (and a limit line), x and y labelled by the formatters.
pub(super) fn lines(
    id: &str,
    title: &str,
    x_label: &str,
    series: &[Series<'_>],
    limit: Option<Limit<'_>>,
    fmt_x: &dyn Fn(f64) -> String,
    fmt_y: &dyn Fn(f64) -> String,
) -> String {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x_lo = all().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_hi = all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let data_hi = all().map(|p| p.1).fold(0.0, f64::max);
    // A limit far above the data would flatten it: it is then named, not drawn.
    let (limit, far_limit) = match limit {
        Some(l) if data_hi > 0.0 && l.y > 4.0 * data_hi => (None, Some(l)),
        other => (other, None),
    };
    let y_hi = limit.map_or(data_hi, |l| l.y.max(data_hi));
    let mut out = String::new();
    open_svg(&mut out, id, title);
    if !x_lo.is_finite() {
        out.push_str(
            r#"<text class="empty" x="500" y="130" text-anchor="middle">no data yet</text></svg>"#,
        );
        return out;
    }
    let y_hi = if y_hi > 0.0 { y_hi * 1.05 } else { 1.0 };
    let x = Scale::new(x_lo, x_hi, (LEFT, WIDTH - RIGHT));
    let y = Scale::new(0.0, y_hi, (HEIGHT - BOTTOM, TOP));
    y_axis(&mut out, &y, 0.0, y_hi, fmt_y);
    x_axis(&mut out, &x, x_lo, x_hi, x_label, fmt_x);
    if let Some(far) = far_limit {
        let _ = write!(
            out,
            r#"<text class="limit-label" x="{x}" y="34" text-anchor="end">{l}: above the chart ({r:.0}× the highest point)</text>"#,
            x = WIDTH - RIGHT,
            l = esc(far.label),
            r = far.y / data_hi,
        );
    }
    if let Some(limit) = limit {
        let py = y.at(limit.y);
        let _ = write!(
            out,
            r#"<line class="limit" x1="{LEFT}" x2="{x2}" y1="{py:.1}" y2="{py:.1}"><title>{l}</title></line><text class="limit-label" x="{lx}" y="{ly:.1}" text-anchor="end">{l}</text>"#,
            x2 = WIDTH - RIGHT,
            lx = WIDTH - RIGHT - 4.0,
            ly = py - 4.0,
            l = esc(limit.label),
        );
    }
    draw_series(&mut out, series, &x, &y, fmt_y);
    let items: Vec<(&str, &str)> = series.iter().map(|s| (s.name, s.color)).collect();
    legend(&mut out, &items);
    out.push_str("</svg>");
    out
}

/// Each series as a path (a dot when it has one point), titled with its last value.
fn draw_series(
    out: &mut String,
    series: &[Series<'_>],
    x: &Scale,
    y: &Scale,
    fmt_y: &dyn Fn(f64) -> String,
) {
    for s in series {
        let mut path = String::new();
        for (i, (px, py)) in s.points.iter().enumerate() {
            let _ = write!(
                path,
                "{}{:.1},{:.1}",
                if i == 0 { "M" } else { " L" },
                x.at(*px),
                y.at(*py)
            );
        }
        let last = s.points.last().map_or(0.0, |p| p.1);
        let _ = write!(
            out,
            r#"<path class="line" d="{path}" stroke="{c}"><title>{n}: {v}</title></path>"#,
            c = esc(s.color),
            n = esc(s.name),
            v = esc(&fmt_y(last)),
        );
        if s.points.len() == 1 {
            let (px, py) = s.points[0];
            let _ = write!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                x.at(px),
                y.at(py),
                c = esc(s.color)
            );
        }
    }
}

/// A bar chart: one bar per (x, y, tip), x a position (turn number).
pub(super) fn bars(
    id: &str,
    title: &str,
    x_label: &str,
    values: &[(f64, f64, String)],
    color: &str,
    fmt_y: &dyn Fn(f64) -> String,
) -> String {
    let mut out = String::new();
    open_svg(&mut out, id, title);
    if values.is_empty() {
        out.push_str(
            r#"<text class="empty" x="500" y="130" text-anchor="middle">no data yet</text></svg>"#,
        );
        return out;
    }
    let x_lo = values.iter().map(|v| v.0).fold(f64::INFINITY, f64::min) - 0.5;
    let x_hi = values.iter().map(|v| v.0).fold(f64::NEG_INFINITY, f64::max) + 0.5;
    let y_hi = values.iter().map(|v| v.1).fold(0.0, f64::max).max(1e-9) * 1.05;
    let x = Scale::new(x_lo, x_hi, (LEFT, WIDTH - RIGHT));
    let y = Scale::new(0.0, y_hi, (HEIGHT - BOTTOM, TOP));
    y_axis(&mut out, &y, 0.0, y_hi, fmt_y);
    x_axis(&mut out, &x, x_lo + 0.5, x_hi - 0.5, x_label, &|v| {
        format!("{v:.0}")
    });
    let width = ((WIDTH - LEFT - RIGHT) / (x_hi - x_lo) * 0.8).max(0.5);
    for (vx, vy, tip) in values {
        let top = y.at(*vy);
        let _ = write!(
            out,
            r#"<rect class="bar" x="{:.1}" y="{top:.1}" width="{width:.1}" height="{:.1}" fill="{c}"><title>{t}</title></rect>"#,
            x.at(*vx) - width / 2.0,
            (HEIGHT - BOTTOM - top).max(0.0),
            c = esc(color),
            t = esc(tip),
        );
    }
    out.push_str("</svg>");
    out
}

/// Lanes of spans over time (`fmt_x` labels the time axis).
pub(super) fn timeline(
    id: &str,
    title: &str,
    lanes: &[Lane<'_>],
    range: (f64, f64),
    fmt_x: &dyn Fn(f64) -> String,
) -> String {
    let mut out = String::new();
    open_svg(&mut out, id, title);
    let x = Scale::new(range.0, range.1, (LEFT, WIDTH - RIGHT));
    let lane_h = ((HEIGHT - TOP - BOTTOM) / lanes.len().max(1) as f64).min(60.0);
    for (i, lane) in lanes.iter().enumerate() {
        let top = TOP + 6.0 + i as f64 * lane_h;
        let _ = write!(
            out,
            r#"<text class="tick" x="{tx}" y="{ty:.1}" text-anchor="end">{n}</text>"#,
            tx = LEFT - 6.0,
            ty = top + lane_h / 2.0,
            n = esc(lane.name),
        );
        for (j, span) in lane.spans.iter().enumerate() {
            let x0 = x.at(span.start);
            let x1 = x.at(span.end).max(x0 + 2.0);
            let _ = write!(
                out,
                r#"<rect class="span span{k}{open}" x="{x0:.1}" y="{top:.1}" width="{w:.1}" height="{h:.1}"><title>{t}</title></rect>"#,
                k = j % 2,
                open = if span.open { " open" } else { "" },
                w = x1 - x0,
                h = lane_h - 12.0,
                t = esc(&span.tip),
            );
            if x1 - x0 > 8.0 * span.label.chars().count() as f64 + 6.0 {
                let _ = write!(
                    out,
                    r#"<text class="span-label" x="{cx:.1}" y="{cy:.1}" text-anchor="middle">{l}</text>"#,
                    cx = (x0 + x1) / 2.0,
                    cy = top + (lane_h - 12.0) / 2.0 + 4.0,
                    l = esc(&span.label),
                );
            }
        }
    }
    x_axis(&mut out, &x, range.0, range.1, "time (UTC)", fmt_x);
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let near = |got: Vec<f64>, want: &[f64]| {
            got.len() == want.len() && got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-9)
        };
        assert!(near(ticks(0.0, 1.0), &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]));
        assert!(near(ticks(0.0, 950.0), &[0.0, 200.0, 400.0, 600.0, 800.0]));
        assert!(ticks(5.0, 5.0).len() <= 12);
    }

    #[test]
    fn text_in_a_chart_is_escaped() {
        let svg = lines(
            "c",
            "<script>",
            "x",
            &[Series {
                name: "a&b",
                color: "red",
                points: vec![(1.0, 2.0)],
            }],
            None,
            &|v| v.to_string(),
            &|v| v.to_string(),
        );
        assert!(
            !svg.contains("<script>") && svg.contains("&lt;script&gt;") && svg.contains("a&amp;b")
        );
    }
}
