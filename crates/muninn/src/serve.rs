//! `muninn serve`: the host. Loads the configuration (or the built-in demo Mind), opens the store,
//! creates the API token on first start, runs every Mind, the Matrix connector when `[matrix]` is
//! configured, and serves the HTTP API until Ctrl-C or SIGTERM — either stops it the same way:
//! the API stops taking requests, each Mind finishes the step it is in, stops its backend's
//! children cleanly and releases its lease. While it runs, a host file in the user's state
//! directory (`muninn_api::discovery`) tells client commands where it is, from any directory.

use anyhow::Context;
use muninn_api::ApiToken;
use muninn_api::discovery::{HostFile, host_file_path};
use muninn_backend::clock::{Clock, SystemClock};
use muninn_core::price::PriceTable;
use muninn_host::Host;
use muninn_host::backends::BackendFactory;
use muninn_host::config::Config;
use muninn_host::crash_points::{CrashPoint, CrashPoints};
use muninn_host::http::serve;
use muninn_host::instance::Instance;
use muninn_host::runtime::run_minds;
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
    /// Start an empty store even though the data directory held one whose database is now
    /// missing, empty, truncated or corrupt: the old files are moved aside (never deleted) and
    /// ids continue above every one the old store issued. SQLite only.
    #[arg(long)]
    fresh_store: bool,
    /// Continue on a SQLite database that lost committed writes since its last clean stop (e.g.
    /// a deleted WAL): its counters are raised past every id issued, so none repeats.
    #[arg(long)]
    accept_rollback: bool,
    /// Stop after this many seconds (for smoke tests and benchmarks); by default run until Ctrl-C
    /// or SIGTERM.
    #[arg(long)]
    for_s: Option<u64>,
}

/// The configuration with the command line's overrides, every path absolute.
fn configuration(args: &ServeArgs) -> anyhow::Result<Config> {
    let cwd = std::env::current_dir().context("reading the working directory")?;
    let mut config = Config::load_in(&cwd, args.config.as_deref())?;
    if let Some(listen) = &args.listen {
        config.listen = listen.clone();
    }
    if let Some(dir) = &args.data_dir {
        config.data_dir = cwd.join(dir);
    }
    if let Some(db) = &args.database {
        config.database = Some(db.clone());
        // A SQLite path given here is relative to where the command runs.
        config.resolve_paths(&cwd);
    }
    Ok(config)
}

/// Completes on Ctrl-C or SIGTERM (what a service manager sends), naming which.
pub async fn stop_signal() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            eprintln!("muninn serve: cannot watch SIGTERM ({e}); stop with Ctrl-C");
            let _ = tokio::signal::ctrl_c().await;
            return "Ctrl-C";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        _ = term.recv() => "SIGTERM",
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = configuration(&args)?;
    let prices = prices(&config)?;
    let matrix = crate::matrix::connector_config(&config, &|k| std::env::var(k).ok())?;
    let crash_points = crash_points(&|k| std::env::var(k).ok())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let config_path = args
        .config
        .as_ref()
        .and_then(|p| std::env::current_dir().ok().map(|cwd| cwd.join(p)));
    let start = muninn_store::StartOptions {
        fresh_store: args.fresh_store,
        accept_rollback: args.accept_rollback,
    };
    runtime.block_on(async {
        crate::file_limit::survive_file_size_limit();
        let armed = Armed {
            matrix,
            crash_points,
        };
        serve_until_stopped(config, prices, armed, config_path, args.for_s, start).await
    })
}

/// The connector's configuration and the host's crash points, as the environment armed them.
struct Armed {
    matrix: Option<muninn_matrix::ConnectorConfig>,
    crash_points: CrashPoints,
}

/// The host crash point `MUNINN_FAULT` arms (tests only: `muninn_host::crash_points`); unset,
/// or naming one of the Matrix connector's points, none. Any other name is refused, naming the
/// known ones.
pub fn crash_points(env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<CrashPoints> {
    let Some(spec) = env("MUNINN_FAULT").filter(|n| !n.is_empty()) else {
        return Ok(CrashPoints::default());
    };
    if muninn_matrix::FaultPoint::parse(&spec).is_some() {
        return Ok(CrashPoints::default());
    }
    CrashPoints::parse(&spec).map_err(|e| {
        let known: Vec<&str> = CrashPoint::ALL
            .iter()
            .map(|p| p.name())
            .chain(muninn_matrix::FaultPoint::ALL.iter().map(|p| p.name()))
            .collect();
        anyhow::anyhow!(
            "MUNINN_FAULT={spec}: {e} (known: {}; `<name>:<n>` aborts at a host point's nth pass)",
            known.join(", ")
        )
    })
}

async fn serve_until_stopped(
    config: Config,
    prices: PriceTable,
    armed: Armed,
    config_path: Option<PathBuf>,
    for_s: Option<u64>,
    start: muninn_store::StartOptions,
) -> anyhow::Result<()> {
    let (token, store) = open_data(&config, start).await?;
    let store_kind = store.backend();
    let factory = BackendFactory::from_config(&config, |k| std::env::var(k).ok())?;
    let clock: Arc<dyn Clock> = match factory.simulator() {
        Some(sim) => Arc::new(SimClock(sim.clone())),
        None => Arc::new(SystemClock),
    };
    let backend = factory.describe();
    // The holder name carries the data directory's instance id, and the instance's lock is held
    // until this process ends: a restart proves its crashed predecessor gone (`instance`).
    let instance = Instance::claim(&config.data_dir, &hostname(), std::process::id())
        .context("claiming the data directory's host instance")?;
    let holder = instance.holder.clone();
    let host = Host::new(store.clone(), config.clone(), clock)
        .with_prices(prices.clone())
        .with_instance(instance)
        .with_crash_points(armed.crash_points);
    let matrix = armed.matrix;
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // Wake-ups across hosts and this host's presence, before any lease is taken.
    muninn_host::cluster::spawn(&host, &holder, stopped.clone()).await;
    let minds = tokio::spawn(run_minds(
        host.clone(),
        factory,
        prices,
        holder,
        stopped.clone(),
    ));
    let matrix_line = matrix.as_ref().map_or_else(String::new, |m| {
        format!(
            "; Matrix: {} account(s) on {}",
            m.accounts.len(),
            m.homeserver
        )
    });
    let connector = matrix.map(|m| crate::matrix::spawn(&host, m, stopped.clone()));
    let notes = format!("{matrix_line}{}", exposure_warning(addr));
    let host_file = write_host_file(&config, addr, config_path);
    announce(&config, &backend, addr, store_kind, &notes);
    let mut api_stopped = stopped.clone();
    let api = tokio::spawn(serve(host, token, listener, async move {
        let _ = api_stopped.changed().await;
    }));
    wait_for_stop(for_s).await;
    tracing::info!("stopping: releasing leases, ending streams");
    let _ = stop.send(true);
    let api_result = api.await;
    let minds_result = minds.await;
    if let Some(path) = &host_file {
        HostFile::remove_own(path);
    }
    api_result
        .context("the API task")?
        .context("serving the API")?;
    minds_result.context("the Minds' task")??;
    if let Some(connector) = connector {
        connector.await.context("the Matrix connector")?;
    }
    // A clean close records it (SQLite's identity file), so the next start can tell lost
    // commits from a crash.
    store.close().await;
    Ok(())
}

/// The API token, then the store: the token first, because creating it also creates the data
/// directory the store goes in and whose permissions are then tightened.
async fn open_data(
    config: &Config,
    start: muninn_store::StartOptions,
) -> anyhow::Result<(ApiToken, Arc<dyn muninn_store::Store>)> {
    let token = ApiToken::load_or_create(&config.api_token_path())
        .with_context(|| format!("API token {}", config.api_token_path().display()))?;
    let store = muninn_store::open_with(&config.database_url(), start)
        .await
        .context("opening the store")?;
    crate::private::tighten_data_dir(&config.data_dir, &config.database_url());
    Ok((token, store))
}

/// The start line's warning when the API is reachable from the network: then only the bearer
/// token, over plain HTTP, stands in the way. Empty on loopback.
fn exposure_warning(addr: std::net::SocketAddr) -> String {
    if addr.ip().is_loopback() {
        return String::new();
    }
    tracing::warn!(listen = %addr, "the API listens on a non-loopback address");
    format!(
        "; WARNING: listening on {} (not loopback): the API is reachable from the network over plain HTTP",
        addr.ip()
    )
}

/// Logs the start and prints the one line a supervising script waits for (logs go to stderr;
/// a closed stdout does not stop the host); `notes` end that line.
fn announce(
    config: &Config,
    backend: &str,
    addr: std::net::SocketAddr,
    store_kind: &str,
    notes: &str,
) {
    tracing::info!(
        minds = config.minds.len(),
        backend,
        listen = %addr,
        store = store_kind,
        data_dir = %config.data_dir.display(),
        "muninn serve started"
    );
    let _ = crate::output::outln!(
        "muninn serve: {} Mind(s) on {backend}, API on http://{addr} (token in {}){notes}",
        config.minds.len(),
        config.api_token_path().display()
    );
}

/// Returns after `for_s` seconds when given, else at the first stop signal.
async fn wait_for_stop(for_s: Option<u64>) {
    match for_s {
        Some(s) => tokio::time::sleep(std::time::Duration::from_secs(s)).await,
        None => {
            let signal = stop_signal().await;
            eprintln!(
                "muninn serve: {signal}: stopping (finishing turns in flight, releasing leases)"
            );
        }
    }
}

/// Leaves the host file clients find this host by (see `muninn_api::discovery`); returns its
/// path, to remove it on the way out. A failure is reported, not fatal.
fn write_host_file(
    config: &Config,
    addr: std::net::SocketAddr,
    config_path: Option<PathBuf>,
) -> Option<PathBuf> {
    let path = host_file_path(|k| std::env::var(k).ok())?;
    let written = HostFile {
        api: format!("http://{addr}"),
        token_file: config.api_token_path(),
        pid: std::process::id(),
        config: config_path,
    }
    .write(&path);
    if let Err(e) = written {
        eprintln!(
            "muninn serve: cannot write {} ({e}): clients need --addr or --config",
            path.display()
        );
    }
    Some(path)
}

/// The price table (`prices`, else the embedded one), checked to price every Mind's model.
fn prices(config: &Config) -> anyhow::Result<PriceTable> {
    let prices = crate::replay::load_prices(config.prices.as_deref())?;
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
