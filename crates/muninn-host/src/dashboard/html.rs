//! The pieces every page is made of: escaping, the layout (its style and its one small script),
//! and how money, tokens and times are written.

use std::fmt::Write;

/// `text` escaped for HTML and SVG text and attribute values.
pub(super) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Micro-dollars as dollars: `$1.2346` (four decimals; six below a cent).
pub(super) fn usd(micro: i64) -> String {
    let dollars = micro as f64 / 1e6;
    if micro != 0 && micro.abs() < 10_000 {
        format!("${dollars:.6}")
    } else {
        format!("${dollars:.4}")
    }
}

/// A token count with thousands separators: `1,234,567`.
pub(super) fn tokens(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A Unix-ms time in UTC: `2027-01-15 09:30:05`.
pub(super) fn time(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => ms.to_string(),
    }
}

/// A Unix-ms time in UTC, short: `09:30` (with the day when `long` is set: `01-15 09:30`).
pub(super) fn short_time(ms: i64, long: bool) -> String {
    let format = if long { "%m-%d %H:%M" } else { "%H:%M:%S" };
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime(format).to_string(),
        Err(_) => ms.to_string(),
    }
}

/// A duration in ms, roughly: `45 s`, `12 min`, `3.5 h`, `2.0 d`.
pub(super) fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=119 => format!("{s} s"),
        120..=7_199 => format!("{} min", s / 60),
        7_200..=172_799 => format!("{:.1} h", s as f64 / 3600.0),
        _ => format!("{:.1} d", s as f64 / 86_400.0),
    }
}

const STYLE: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 24px;display:flex;gap:18px;align-items:baseline}
header a{color:#cfe0ff;text-decoration:none}header h1{font-size:18px;margin:0}
main{padding:16px 24px;max-width:1180px}
section{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:12px 16px;margin:0 0 16px}
h2{font-size:16px;margin:0 0 8px}h3{font-size:14px;margin:10px 0 6px}
table{border-collapse:collapse;width:100%;font-size:12.5px}
th,td{border-bottom:1px solid #eceff3;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f1f3f6;font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;margin-right:4px}
.running{background:#d9f2e0;color:#16602c}.idle{background:#e4ebf7;color:#284a82}
.braked,.capped,.stopped{background:#fbe0dc;color:#8a2111}.retrying{background:#fff0c9;color:#7a5300}
.not_leader,.starting{background:#eceff3;color:#4b5363}
.figures{display:flex;flex-wrap:wrap;gap:10px}.figure{min-width:130px;padding:6px 10px;background:#f6f7f9;border-radius:5px}
.figure b{display:block;font-size:18px}.figure span{font-size:12px;color:#5b6475}
.charts{display:grid;grid-template-columns:1fr;gap:8px}
svg.chart{width:100%;height:auto;background:#fff}
.scroll{overflow-x:auto}#ledger td{white-space:nowrap}
.chart-title{font-weight:600;font-size:13px}.tick,.legend,.axis-label,.limit-label{font-size:11px;fill:#4b5363}
.grid{stroke:#eceff3}.axis{stroke:#9aa3b2}.line{fill:none;stroke-width:2}
.limit{stroke:#b3261e;stroke-dasharray:5 4}.limit-label{fill:#b3261e}.empty{fill:#8a93a3}
.span0{fill:#8fb3e8}.span1{fill:#b9d0f2}.span.open{stroke:#284a82;stroke-dasharray:4 3}.span-label{font-size:11px;fill:#1d2330}
form.inline{display:inline-flex;gap:6px;align-items:center;flex-wrap:wrap;margin:4px 12px 4px 0}
input,select,button{font:inherit;font-size:13px;padding:2px 6px}button{cursor:pointer}
.error{color:#b3261e;margin-left:8px}.note{color:#5b6475;font-size:12px}
"#;

/// The dashboard's one script: a form with `data-api` is sent to the `/v1` API as JSON (fields
/// with `data-json`, converted by `data-kind`), with the header that lets the API take the
/// dashboard's cookie, and the page reloads on success. Fields with `data-read` also send the
/// value the page was rendered with, under `expected` (the write's condition).
const SCRIPT: &str = r#"
document.querySelectorAll('form[data-api]').forEach(function (form) {
  form.addEventListener('submit', async function (event) {
    event.preventDefault();
    var body = {};
    form.querySelectorAll('[data-json]').forEach(function (el) {
      var v = el.value.trim(), k = el.dataset.json;
      if (el.dataset.kind === 'usd') body[k] = v === '' ? null : Math.round(parseFloat(v) * 1e6);
      else if (el.dataset.kind === 'hours') body[k] = v === '' ? null : Math.round(parseFloat(v) * 3600e3);
      else if (el.dataset.kind === 'int') body[k] = v === '' ? null : parseInt(v, 10);
      if (el.dataset.read !== undefined) {
        body.expected = body.expected || {};
        body.expected[k] = el.dataset.read === '' ? null : parseInt(el.dataset.read, 10);
      }
    });
    var method = form.dataset.method;
    var init = {method: method, credentials: 'same-origin',
                headers: {'content-type': 'application/json', 'x-muninn-dashboard': '1'}};
    if (method === 'PUT') init.body = JSON.stringify(body);
    var out = form.querySelector('.error');
    try {
      var response = await fetch(form.dataset.api, init);
      if (response.ok) { location.reload(); return; }
      var problem = await response.json().catch(function () { return {}; });
      out.textContent = (problem.error && problem.error.message) || ('HTTP ' + response.status);
    } catch (e) { out.textContent = String(e); }
  });
});
"#;

/// A whole page: `title`, the body, and a refresh every `refresh_s` seconds if set.
pub(super) fn layout(title: &str, body: &str, refresh_s: Option<u32>) -> String {
    let mut page = String::with_capacity(body.len() + STYLE.len() + SCRIPT.len() + 512);
    let _ = write!(
        page,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>{t} · muninn</title>"#,
        t = esc(title)
    );
    if let Some(s) = refresh_s {
        let _ = write!(page, r#"<meta http-equiv="refresh" content="{s}">"#);
    }
    let _ = write!(
        page,
        r#"<style>{STYLE}</style></head><body><header><h1>muninn</h1><a href="/dashboard">Minds</a><a href="/metrics">metrics</a><a href="/readyz">readiness</a><a href="/dashboard/logout">log out</a></header><main>{body}</main><script>{SCRIPT}</script></body></html>"#
    );
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_written_for_people() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(usd(1_234_567), "$1.2346");
        assert_eq!(usd(1_234), "$0.001234");
        assert_eq!(usd(0), "$0.0000");
        assert_eq!(tokens(1_234_567), "1,234,567");
        assert_eq!(tokens(999), "999");
        assert_eq!(time(1_800_000_000_000), "2027-01-15 08:00:00");
        assert_eq!(age(90_000), "90 s");
        assert_eq!(age(3_600_000), "60 min");
    }
}
