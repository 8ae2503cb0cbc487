//! Render the replay plot from made-up data, to look at it: `cargo run -p muninn-report
//! --example sample_plot -- /tmp/plot.png` (or `.svg`).

use muninn_report::plot::{CostSeries, GapBucket, write_plot};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "sample-plot.png".into()),
    );
    let start_ms = 1_700_000_000_000_i64;
    // Two days of requests at a ragged pace; each policy pays a different rate, with jumps where
    // `recorded` re-wrote its cache after long idle gaps.
    let series = [
        ("recorded", 1.0, 0.9),
        ("ski-rental", 0.72, 0.25),
        ("keep-warm", 0.8, 0.05),
        ("optimum", 0.6, 0.1),
    ]
    .iter()
    .map(|&(label, rate, jump)| {
        let mut usd = 0.0;
        let points = (0..400)
            .map(|i| {
                usd += rate * 0.05 * (1.0 + (i % 7) as f64 / 7.0)
                    + if i % 50 == 49 { jump * 3.0 } else { 0.0 };
                (start_ms + i * 432_000, usd)
            })
            .collect();
        CostSeries {
            label: label.to_string(),
            points,
        }
    })
    .collect::<Vec<_>>();
    let bounds = [0, 1, 2, 5, 10, 30, 60, 300, 600, 1800, 3600, u64::MAX];
    let requests = [5200, 2100, 1400, 800, 520, 310, 220, 90, 60, 30, 25];
    let writes_k = [900, 700, 800, 650, 600, 900, 1400, 6200, 4800, 3900, 9800];
    let gaps = bounds
        .windows(2)
        .zip(requests.iter().zip(writes_k))
        .map(|(w, (&requests, writes_k))| GapBucket {
            from_s: w[0],
            to_s: w[1],
            requests,
            write_tokens: writes_k * 1000,
        })
        .collect::<Vec<_>>();
    write_plot(&path, "muninn replay — sample data", &series, &gaps)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
