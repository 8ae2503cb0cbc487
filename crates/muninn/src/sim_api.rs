//! `muninn sim-api`: serve the simulated Anthropic Messages API (see `muninn_sim`) until Ctrl-C
//! or SIGTERM.

use anyhow::Context;
use std::net::SocketAddr;

/// Arguments of `muninn sim-api`.
#[derive(Debug, clap::Args)]
pub struct SimApiArgs {
    /// Address to listen on. Keep it on loopback: the admin routes have no authentication.
    #[arg(long, default_value = "127.0.0.1:8088", env = "MUNINN_SIM_ADDR")]
    addr: SocketAddr,
    /// Freeze the virtual clock at this Unix-ms time; it then moves only through
    /// `POST /admin/clock`. By default it follows real time.
    #[arg(long)]
    frozen_clock_ms: Option<i64>,
    /// Accept only this API key. By default any non-empty key is accepted.
    #[arg(long, env = "MUNINN_SIM_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Cache `ttl: "1h"` breakpoints for 5 minutes, like a provider that ignores the 1h TTL, so
    /// clients can test their honoured-TTL detection.
    #[arg(long)]
    ignore_1h: bool,
    /// A price table (TOML) for minimum cacheable sizes; default: the embedded one.
    #[arg(long)]
    prices: Option<std::path::PathBuf>,
}

/// Runs the server on a multi-threaded runtime.
pub fn run(args: SimApiArgs) -> anyhow::Result<()> {
    let prices = crate::replay::load_prices(args.prices.as_deref())?;
    let config = muninn_sim::sim::SimConfig {
        frozen_at_ms: args.frozen_clock_ms,
        api_key: args.api_key,
        prices,
        honour_1h: !args.ignore_1h,
        ..Default::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.addr)
            .await
            .with_context(|| format!("binding {}", args.addr))?;
        let local = listener.local_addr()?;
        // The one line a supervising script waits for; everything else goes to stderr.
        let _ = crate::output::outln!("muninn sim-api listening on http://{local}");
        muninn_sim::serve(listener, config, async {
            crate::serve::stop_signal().await;
        })
        .await
        .context("serving")
    })
}
