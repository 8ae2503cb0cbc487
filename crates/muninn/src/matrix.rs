//! `muninn serve`'s Matrix connector: built from `[matrix]` and the Minds' `[mind.matrix]`
//! accounts (secrets read here, at the edge, from their files or variables), run beside the
//! Minds until shutdown. It reaches the Minds only through the store's mailbox and outbox and
//! two signals: a committed batch wakes its Mind (`signals.wake`), and a turn that recorded
//! replies wakes the senders (`signals.outbox`, bridged to a counter the connector watches).
//! Each account's health goes to the host's telemetry (`muninn status`, `/readyz`, `/metrics`),
//! and so do the gaps it cut (`muninn status`, `/metrics`: a mark, not a failure).
//!
//! `MUNINN_FAULT` arms one of the connector's crash points (tests only: `muninn-matrix`'s
//! `FaultPoint`); unset, nothing is armed, and a host point's name is the host's
//! (`serve::crash_points`).

use muninn_api::wire::{TransportGapsCut, TransportRoomNotJoined, TransportState};
use muninn_host::Host;
use muninn_host::config::Config;
use muninn_matrix::{
    Account, AccountHealth, Connector, ConnectorConfig, Credential, FaultPoint, GapsCut, Reread,
    Secret,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The connector's configuration, or `None` without `[matrix]`. `env` reads the environment
/// (secrets in variables, `MUNINN_FAULT`).
pub fn connector_config(
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<ConnectorConfig>> {
    let Some(matrix) = &config.matrix else {
        return Ok(None);
    };
    let mut connector = ConnectorConfig::new(matrix.homeserver.clone());
    connector.sync_timeout = Duration::from_millis(matrix.sync_timeout_ms);
    connector.timeline_limit = matrix.timeline_limit;
    connector.max_pending = usize::try_from(matrix.max_pending)?;
    connector.context_lines = usize::try_from(matrix.context_lines)?;
    connector.context_bytes = usize::try_from(matrix.context_bytes)?;
    connector.max_gap_events = usize::try_from(matrix.max_gap_events)?;
    for mind in &config.minds {
        let Some(account) = &mind.matrix else {
            continue;
        };
        let secret = |source: &muninn_host::config::SecretSource, what: &str| {
            source
                .read(env)
                .map(|text| Secret::new(&text))
                .map_err(|e| anyhow::anyhow!("mind {}: matrix {what}: {e}", mind.id))
        };
        let credential = match (&account.access_token, &account.password) {
            (Some(token), _) => Credential::AccessToken(secret(token, "access_token")?),
            (None, Some(password)) => Credential::Password(secret(password, "password")?),
            (None, None) => anyhow::bail!("mind {}: matrix: no credential", mind.id),
        };
        let source = account.access_token.as_ref().or(account.password.as_ref());
        connector.accounts.push(Account {
            mind: mind.id.clone(),
            user_id: account.user_id.clone(),
            device_id: account.device_id.clone(),
            credential,
            rooms: mind.rooms.clone(),
            accept_dm_invites: account.accept_dm_invites,
            reread: source.and_then(reread),
        });
    }
    // A host point's name (`muninn_host::crash_points`) arms the host, not the connector; a
    // name that is neither is refused by the host's parse, naming every point.
    if let Some(name) = env("MUNINN_FAULT").filter(|n| !n.is_empty()) {
        match FaultPoint::parse(&name) {
            Some(point) => connector.fault = Some(point),
            None => {
                crate::serve::crash_points(env)?;
            }
        }
    }
    Ok(Some(connector))
}

/// Reads a credential's file again when the homeserver refuses the account's token, so that a
/// new token (or password) written there is taken without a restart. A variable is not read
/// again: the process's environment does not change while it runs.
fn reread(source: &muninn_host::config::SecretSource) -> Option<Reread> {
    source.file.as_ref()?;
    let source = source.clone();
    let no_env = |_: &str| None;
    Some(Reread::new(move || {
        source.read(&no_env).map(|text| Secret::new(&text))
    }))
}

/// Runs the connector for `host` until `stopped` turns true.
pub fn spawn(
    host: &Host,
    config: ConnectorConfig,
    stopped: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let (changed, outbox_changed) = watch::channel(0u64);
    let signals = host.signals.clone();
    let mut bridge_stopped = stopped.clone();
    tokio::spawn(async move {
        // `notify_waiters` wakes only futures already waiting: the next one is enabled before
        // the counter moves, so a turn recorded while the counter moves is not missed (the
        // senders read the outbox after they see the move).
        let mut next = Box::pin(signals.outbox.notified());
        next.as_mut().enable();
        loop {
            tokio::select! {
                _ = &mut next => {}
                _ = bridge_stopped.changed() => return,
            }
            next = Box::pin(signals.outbox.notified());
            next.as_mut().enable();
            changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    });
    let signals = host.signals.clone();
    let (telemetry, clock) = (host.telemetry.clone(), host.clock.clone());
    let (gaps_telemetry, gaps_clock) = (host.telemetry.clone(), host.clock.clone());
    let (rooms_telemetry, rooms_clock) = (host.telemetry.clone(), host.clock.clone());
    let connector = Connector::new(config, host.store.clone(), host.clock.clone())
        .on_delivered(Arc::new(move |mind| signals.wake(mind)))
        .on_health(Arc::new(move |mind, health| {
            telemetry.transport(mind, "matrix", transport_state(health), clock.now_ms())
        }))
        .on_gap_cut(Arc::new(move |mind, gaps| {
            let gaps = transport_gaps_cut(gaps);
            gaps_telemetry.transport_gaps_cut(mind, "matrix", gaps, gaps_clock.now_ms())
        }))
        .on_rooms_not_joined(Arc::new(move |mind, rooms| {
            let rooms = rooms
                .iter()
                .map(|r| TransportRoomNotJoined {
                    room: r.room.clone(),
                    error: r.error.clone(),
                    since_ms: r.since_ms,
                })
                .collect();
            rooms_telemetry.transport_rooms_not_joined(mind, "matrix", rooms, rooms_clock.now_ms())
        }))
        .outbox_changed(outbox_changed);
    tokio::spawn(connector.run(stopped))
}

/// The connector's account health in the host's words.
fn transport_state(health: AccountHealth) -> TransportState {
    match health {
        AccountHealth::Opening => TransportState::Opening,
        AccountHealth::Open => TransportState::Open,
        AccountHealth::Held { pending } => TransportState::Held {
            pending: pending as u64,
        },
        AccountHealth::Failing { stage, error } => TransportState::Failing {
            stage: stage.to_owned(),
            error,
            // Counted by the telemetry, which knows the previous report.
            failures: 1,
        },
    }
}

/// The connector's record of an account's cut gaps in the host's words.
fn transport_gaps_cut(gaps: &GapsCut) -> TransportGapsCut {
    TransportGapsCut {
        count: gaps.count,
        last_room: gaps.last.room_id.clone(),
        last_at_ms: gaps.last.at_ms,
        last_events_read: gaps.last.events_read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration whose Mind's token is `access_token`, relative to `dir`.
    fn config(dir: &std::path::Path, access_token: &str) -> Config {
        let text = format!(
            r#"data_dir = "data"
[backend]
kind = "sim"
[matrix]
homeserver = "http://127.0.0.1:1"
[[mind]]
id = "vala"
doctrine_text = "You are Vala."
spend_cap_micro_usd = 1
[mind.matrix]
user_id = "@vala:hs"
device_id = "MUNINN_VALA"
access_token = {access_token}
"#
        );
        Config::parse(&text, &dir.join("muninn.toml"), dir).unwrap()
    }

    /// A token in a file is read again at each refusal (`Reread`): a new one written there is
    /// the one read. A token in a variable is not: the process's environment does not change.
    #[test]
    fn a_token_file_is_read_again_and_a_variable_is_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "first\n").unwrap();
        let env = |name: &str| (name == "VALA_TOKEN").then(|| "from-env".to_owned());
        let from_file = config(dir.path(), r#"{ file = "token" }"#);
        let connector = connector_config(&from_file, &env).unwrap().unwrap();
        let account = &connector.accounts[0];
        let reread = account.reread.clone().expect("a file is read again");
        assert_eq!(reread.read().unwrap().expose(), "first");
        std::fs::write(dir.path().join("token"), "second\n").unwrap();
        assert_eq!(reread.read().unwrap().expose(), "second");
        std::fs::remove_file(dir.path().join("token")).unwrap();
        let gone = reread.read().unwrap_err();
        assert!(gone.starts_with("cannot read "), "{gone}");
        let from_env = config(dir.path(), r#"{ env = "VALA_TOKEN" }"#);
        let connector = connector_config(&from_env, &env).unwrap().unwrap();
        assert!(connector.accounts[0].reread.is_none());
    }
}
