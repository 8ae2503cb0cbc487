//! The checks behind [`Config::validate`]: every value that can be checked before the first
//! turn, each problem reported with its field so one pass finds them all. The order of the
//! checks is the order problems are listed in: the host's fields, the backend's, then each Mind's
//! (its names, its files, its numbers), then Matrix.

use super::{Config, ConfigError, MindConfig, Problem, backend::PoolSettings, bounds, matrix};
use muninn_core::decide::Policy;
use std::collections::HashSet;
use std::path::Path;
use std::str::FromStr;

/// The longest Mind id or campaign slug.
const MAX_ID_LEN: usize = 64;

impl Config {
    /// Checks every value; `file` names the source in the error. See the [module docs](super).
    pub fn validate(&self, file: &Path) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let mut bad = |field: String, message: String| problems.push(Problem { field, message });
        self.check_host(&mut bad);
        self.check_backend(&mut bad);
        if self.minds.is_empty() {
            bad(
                "mind".into(),
                "at least one [[mind]] is needed: a host without Minds runs nothing".into(),
            );
        }
        let mut seen = HashSet::new();
        for (i, mind) in self.minds.iter().enumerate() {
            let at = |field: &str| format!("mind[{i}].{field}");
            if let Err(message) = check_id(&mind.id) {
                bad(at("id"), message);
            } else if !seen.insert(mind.id.as_str()) {
                bad(
                    at("id"),
                    format!("{:?} is used by an earlier Mind", mind.id),
                );
            }
            check_mind_texts(mind, &at, &mut bad);
            check_mind_rooms(mind, &at, &mut bad);
            self.check_mind_numbers(mind, &at, &mut bad);
        }
        matrix::check(self.matrix.as_ref(), &self.minds, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                file: file.to_owned(),
                problems,
            })
        }
    }

    /// The host's own fields: data directory, database, listen address, API bounds, lease, prices.
    fn check_host(&self, bad: &mut impl FnMut(String, String)) {
        if self.data_dir.as_os_str().is_empty() {
            bad("data_dir".into(), "must not be empty".into());
        }
        if let Some(database) = &self.database
            && database.trim().is_empty()
        {
            bad(
                "database".into(),
                "must not be empty (leave it out for <data_dir>/muninn.db)".into(),
            );
        }
        match self.listen.parse::<std::net::SocketAddr>() {
            Ok(_) => {}
            Err(_) => bad(
                "listen".into(),
                format!("{:?} is not an IP:port address", self.listen),
            ),
        }
        self.api.check(&mut *bad);
        bounds::check(self, &mut *bad);
        if self.lease_ttl_ms < 1_000 {
            bad(
                "lease_ttl_ms".into(),
                format!("{} is below the minimum of 1000", self.lease_ttl_ms),
            );
        }
        if let Some(prices) = &self.prices
            && let Err(e) = super::read_config_file(prices)
        {
            bad(
                "prices".into(),
                format!("cannot read {}: {e}", prices.display()),
            );
        }
    }

    /// `[backend]`: the base URL, the key's variable name, the Self session and the pool.
    fn check_backend(&self, bad: &mut impl FnMut(String, String)) {
        if let Some(url) = &self.backend.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bad(
                "backend.base_url".into(),
                format!("{url:?} must start with http:// or https://"),
            );
        }
        let env = &self.backend.api_key_env;
        if !is_env_name(env) {
            bad(
                "backend.api_key_env".into(),
                format!(
                    "{env:?} must be an environment variable name (A-Z, 0-9, _), not a key itself"
                ),
            );
        }
        self.backend
            .self_session
            .check("backend.self_session", &mut *bad);
        check_pool(&self.backend.pool, bad);
    }

    /// A Mind's policy, TTL order, numbers and Self session (whose flush headroom must fit below
    /// the Mind's ceiling once the backend-wide value is folded in).
    fn check_mind_numbers(
        &self,
        mind: &MindConfig,
        at: &impl Fn(&str) -> String,
        bad: &mut impl FnMut(String, String),
    ) {
        if let Err(e) = Policy::from_str(&mind.policy) {
            bad(at("policy"), e);
        }
        // A 1h breakpoint after a 5m one is refused by the provider (design §3.3): the head,
        // which comes first, must live at least as long as the tail.
        if mind.head_ttl < mind.tail_ttl {
            bad(
                at("head_ttl"),
                format!(
                    "{} is shorter than tail_ttl {}: a 1h breakpoint may not follow a 5m one",
                    mind.head_ttl.label(),
                    mind.tail_ttl.label()
                ),
            );
        }
        if mind.ceiling_tokens == Some(0) {
            bad(at("ceiling_tokens"), "must be positive".into());
        }
        if let Some(cap) = mind.spend_cap_micro_usd
            && cap <= 0
        {
            bad(
                at("spend_cap_micro_usd"),
                format!("{cap} must be positive (leave it out for no cap)"),
            );
        }
        if mind.spend_window_s == 0 {
            bad(at("spend_window_s"), "must be positive".into());
        }
        if mind.turns_per_wake == 0 {
            bad(at("turns_per_wake"), "must be at least 1".into());
        }
        if mind.max_output_tokens == 0 {
            bad(at("max_output_tokens"), "must be at least 1".into());
        }
        mind.self_session.check(&at("self_session"), &mut *bad);
        let headroom = mind
            .self_session
            .resolve(&self.backend.self_session)
            .flush_headroom_tokens;
        if let Some(ceiling) = mind.ceiling_tokens
            && ceiling > 0
            && headroom >= ceiling
        {
            bad(
                at("self_session.flush_headroom_tokens"),
                format!(
                    "{headroom} leaves no room below ceiling_tokens {ceiling}: the flush would be asked for at once"
                ),
            );
        }
    }
}

/// `[backend.pool]`: at least one child, and a memory budget that holds one.
fn check_pool(pool: &PoolSettings, bad: &mut impl FnMut(String, String)) {
    if pool.max_processes == 0 {
        bad(
            "backend.pool.max_processes".into(),
            "must be at least 1".into(),
        );
    }
    if pool.per_process_mib == 0 {
        bad(
            "backend.pool.per_process_mib".into(),
            "must be positive".into(),
        );
    } else if pool.memory_budget_mib < pool.per_process_mib {
        bad(
            "backend.pool.memory_budget_mib".into(),
            format!(
                "{} MiB cannot hold one child of per_process_mib {} MiB",
                pool.memory_budget_mib, pool.per_process_mib
            ),
        );
    }
    if pool.park_horizon_s == 0 {
        bad(
            "backend.pool.park_horizon_s".into(),
            "must be positive".into(),
        );
    }
}

/// A Mind's name and model, and that its doctrine and persona state files read (and parse).
fn check_mind_texts(
    mind: &MindConfig,
    at: &impl Fn(&str) -> String,
    bad: &mut impl FnMut(String, String),
) {
    if mind.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
        bad(
            at("name"),
            "must not be empty (leave it out to use the id)".into(),
        );
    }
    if mind.model.trim().is_empty() {
        bad(at("model"), "must not be empty".into());
    }
    for (j, path) in mind.doctrine.iter().enumerate() {
        if let Err(e) = super::read_config_file(path) {
            bad(
                at(&format!("doctrine[{j}]")),
                format!("cannot read {}: {e}", path.display()),
            );
        }
    }
    if mind.doctrine.is_empty()
        && mind
            .doctrine_text
            .as_deref()
            .is_none_or(|t| t.trim().is_empty())
    {
        bad(
            at("doctrine"),
            "a Mind needs a doctrine: give doctrine files or doctrine_text".into(),
        );
    }
    match (&mind.persona_state, &mind.persona_state_inline) {
        (Some(_), Some(_)) => bad(
            at("persona_state_inline"),
            "give persona_state (a file) or persona_state_inline, not both".into(),
        ),
        (Some(path), None) => match super::read_config_file(path) {
            Err(e) => bad(
                at("persona_state"),
                format!("cannot read {}: {e}", path.display()),
            ),
            Ok(text) => {
                if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
                    bad(
                        at("persona_state"),
                        format!("{} is not JSON: {e}", path.display()),
                    );
                }
            }
        },
        (None, Some(value)) if !value.is_object() => {
            bad(at("persona_state_inline"), "must be a table".into())
        }
        _ => {}
    }
}

/// A Mind's rooms and campaigns: each well-formed and listed once.
fn check_mind_rooms(
    mind: &MindConfig,
    at: &impl Fn(&str) -> String,
    bad: &mut impl FnMut(String, String),
) {
    let mut rooms = HashSet::new();
    for (j, room) in mind.rooms.iter().enumerate() {
        if let Err(message) = check_room(room) {
            bad(at(&format!("rooms[{j}]")), message);
        } else if !rooms.insert(room.as_str()) {
            bad(
                at(&format!("rooms[{j}]")),
                format!("{room:?} is listed twice"),
            );
        }
    }
    let mut slugs = HashSet::new();
    for (j, campaign) in mind.campaigns.iter().enumerate() {
        if let Err(message) = check_id(&campaign.slug) {
            bad(at(&format!("campaigns[{j}].slug")), message);
        } else if !slugs.insert(campaign.slug.as_str()) {
            bad(
                at(&format!("campaigns[{j}].slug")),
                format!("{:?} is listed twice", campaign.slug),
            );
        }
        if campaign.title.trim().is_empty() {
            bad(
                at(&format!("campaigns[{j}].title")),
                "must not be empty".into(),
            );
        }
    }
}

/// Whether `id` is a URL-safe identifier: 1–64 of `A-Z a-z 0-9 - _`, starting with a letter or
/// digit. Mind ids appear in URL paths and file names, so nothing there needs escaping.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(format!("{id:?} must be 1 to {MAX_ID_LEN} characters"));
    }
    let ok = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok || !id.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(format!(
            "{id:?} must be URL-safe: letters, digits, '-' and '_', starting with a letter or digit"
        ));
    }
    Ok(())
}

/// Whether `name` can be an environment variable's name: `A-Z`, `0-9` and `_`, not empty.
pub(super) fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Whether `room` names a room: `#alias`, `!room-id` or `@user` (a DM), without whitespace.
pub fn check_room(room: &str) -> Result<(), String> {
    let Some(first) = room.chars().next() else {
        return Err("a room must not be empty".into());
    };
    if !matches!(first, '#' | '!' | '@') || room.len() < 2 {
        return Err(format!(
            "{room:?} must start with '#' (an alias), '!' (a room id) or '@' (a DM) and name something"
        ));
    }
    if room.chars().any(char::is_whitespace) {
        return Err(format!("{room:?} must not contain whitespace"));
    }
    Ok(())
}
