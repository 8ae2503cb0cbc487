//! `muninn serve`: the host. Loads the configuration (or the built-in demo Mind), opens the store,
//! creates the API token on first start, runs every Mind, the Matrix connector when `[matrix]` is
//! configured, and serves the HTTP API until Ctrl-C.

use anyhow::Context;
use muninn_api::ApiToken;
use muninn_backend::clock::{Clock, SystemClock};
use muninn_core::price::PriceTable;
use muninn_host::backends::BackendFactory;
use muninn_host::config::Config;
use muninn_host::http::serve;
use muninn_host::runtime::run_minds;
use muninn_host::{Host, Signals};
use muninn_sim::SimClock;
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `muninn serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The configuration file (`muninn.toml`). Without one, a built-in demo Mind runs on the
    /// simulator.
    #[arg(long, env = "MUNINN_CONFIG")]
    config: Option<PathBuf>,
    /// Override the listen address (`listen` in the configuration).
    #[arg(long)]
    listen: Option<String>,
    /// Override the data directory (`data_dir` in the configuration).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Override the database (`database`: a `postgres://` URL or a SQLite file).
    #[arg(long)]
    database: Option<String>,
    /// Stop after this many seconds (for smoke tests and benchmarks); by default run until Ctrl-C.
    #[arg(long)]
    for_s: Option<u64>,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = Config::load(args.config.as_deref())?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(dir) = args.data_dir {
        config.data_dir = dir;
    }
    if let Some(db) = args.database {
        config.database = Some(db);
    }
    let prices = prices(&config)?;
    let matrix = crate::matrix::connector_config(&config, &|k| std::env::var(k).ok())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        // The token first: creating it also creates the data directory.
        let token = ApiToken::load_or_create(&config.api_token_path())
            .with_context(|| format!("API token {}", config.api_token_path().display()))?;
        let store = muninn_store::open(&config.database_url())
            .await
            .context("opening the store")?;
        let factory = BackendFactory::from_config(&config, |k| std::env::var(k).ok())?;
        let clock: Arc<dyn Clock> = match factory.simulator() {
            Some(sim) => Arc::new(SimClock(sim.clone())),
            None => Arc::new(SystemClock),
        };
        let backend = if factory.simulator().is_some() {
            "the built-in simulator"
        } else {
            "the Anthropic API"
        };
        let host = Host {
            store,
            config: Arc::new(config.clone()),
            clock,
            signals: Arc::new(Signals::default()),
        };
        let listener = tokio::net::TcpListener::bind(&config.listen)
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        let addr = listener.local_addr()?;
        let holder = format!("{}-{}", hostname(), std::process::id());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let minds = tokio::spawn(run_minds(
            host.clone(),
            factory,
            prices,
            holder,
            stopped.clone(),
        ));
        let matrix_line = matrix.as_ref().map_or_else(String::new, |m| {
            format!("; Matrix: {} account(s) on {}", m.accounts.len(), m.homeserver)
        });
        let connector = matrix.map(|m| crate::matrix::spawn(&host, m, stopped.clone()));
        // The one line a supervising script waits for; logs go to stderr.
        println!(
            "muninn serve: {} Mind(s) on {backend}, API on http://{addr} (token in {}){matrix_line}",
            config.minds.len(),
            config.api_token_path().display()
        );
        let for_s = args.for_s;
        let mut api_stopped = stopped.clone();
        let api = tokio::spawn(serve(host, token, listener, async move {
            let _ = api_stopped.changed().await;
        }));
        match for_s {
            Some(s) => tokio::time::sleep(std::time::Duration::from_secs(s)).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        let _ = stop.send(true);
        api.await
            .context("the API task")?
            .context("serving the API")?;
        minds.await.context("the Minds' task")??;
        if let Some(connector) = connector {
            connector.await.context("the Matrix connector")?;
        }
        Ok(())
    })
}

/// The price table (`prices`, else the embedded one), checked to price every Mind's model.
fn prices(config: &Config) -> anyhow::Result<PriceTable> {
    let prices = match &config.prices {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            PriceTable::parse(&text, &path.display().to_string())?
        }
        None => PriceTable::embedded(),
    };
    for mind in &config.minds {
        prices
            .model(&mind.model)
            .with_context(|| format!("mind {}", mind.id))?;
    }
    Ok(prices)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".to_string())
}
