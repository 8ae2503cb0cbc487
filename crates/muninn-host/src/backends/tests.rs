//! The backend factory and `AnyBackend`: what `muninn serve` runs on.

use super::*;
use muninn_claude_cli::SessionBinding;

fn tag(key: &BindingKey) -> [u8; 32] {
    SessionBinding {
        session_id: "s",
        instructions: "i",
        model: "m",
        tools: &[],
    }
    .mint(key, ["item"])
    .tag
}

#[test]
fn the_binding_key_is_created_once_private_and_then_reused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data").join(BINDING_KEY_FILE);
    let first = load_or_create_binding_key(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), BindingKey::MIN_LEN);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // Loading again reads the same key: handles minted before a restart still verify.
    let again = load_or_create_binding_key(&path).unwrap();
    assert_eq!(tag(&first), tag(&again));
    // No temporary file is left behind.
    assert_eq!(
        std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
        1
    );
    // Another data directory gets another key.
    let other =
        load_or_create_binding_key(&dir.path().join("other").join(BINDING_KEY_FILE)).unwrap();
    assert_ne!(tag(&first), tag(&other));
}

/// An attempt the provider billed and cut reaches the runner through [`AnyBackend`], the
/// backend `muninn serve` runs on. Before, the trait's default (none) stood in for it, and
/// under `muninn serve` no cut attempt was ever a ledger row (`runtime/failed.rs`).
#[tokio::test]
async fn the_attempts_the_provider_billed_and_cut_are_handed_over() {
    use muninn_core::cache::Ttl;
    use muninn_sim::sim::{Fault, FaultKind};
    let config: Config = toml::from_str("").unwrap();
    let factory = BackendFactory::from_config(&config, |_| None).unwrap();
    let sim = factory.simulator().unwrap().clone();
    let clock: Arc<dyn Clock> = Arc::new(muninn_sim::SimClock(sim.clone()));
    let mut backend = factory.make(clock, &PriceTable::embedded(), "vala/persona");
    let spec = SessionSpec {
        model: "claude-opus-5-5".to_string(),
        system: vec!["Be brief.".to_string()],
        tools: Vec::new(),
        output_schema: None,
        system_ttl: Ttl::FiveMinutes,
        conversation_ttl: Ttl::FiveMinutes,
        max_tokens: 512,
    };
    backend.start(spec).await.unwrap();
    sim.push_faults([Fault {
        kind: FaultKind::Truncate { after_deltas: 1 },
        times: 1,
    }]);
    backend.turn(TurnInput::text("hello")).await.unwrap_err();
    let failed = backend.take_failed_attempts();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(Some(failed[0].usage), sim.requests()[0].usage);
}

/// The tools' tokens a lost answer's estimate adds to a new segment's head (`runtime/lost.rs`)
/// reach the runner through [`AnyBackend`]: left to the trait's default (0), a host under
/// `muninn serve` estimated every such head without its tools, as before the estimate
/// counted them.
#[test]
fn the_tools_tokens_are_handed_over() {
    let config: Config = toml::from_str("").unwrap();
    let factory = BackendFactory::from_config(&config, |_| None).unwrap();
    let sim = factory.simulator().unwrap().clone();
    let clock: Arc<dyn Clock> = Arc::new(muninn_sim::SimClock(sim.clone()));
    let backend = factory.make(clock.clone(), &PriceTable::embedded(), "vala/persona");
    let inner = SimBackend::new(InProcess::new(sim), clock, PriceTable::embedded());
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"reply": {"type": "string"}},
    });
    let expected = inner.tool_tokens(&[], Some(&schema));
    assert!(
        expected > 0,
        "the simulator's backend counts the schema's tool"
    );
    assert_eq!(backend.tool_tokens(&[], Some(&schema)), expected);
}

/// A named pipe where the binding key is kept was waited on for a writer, for ever: the
/// host hung at start. A 100 MB file there was read whole, and taken for the key. Both are
/// refused now, naming the file (and the limit).
#[test]
fn a_key_file_that_is_a_pipe_or_huge_is_refused_not_waited_on() {
    use muninn_testkit::hostile_files::{fifo, huge, within_10s};
    let dir = tempfile::tempdir().unwrap();
    let pipe = fifo(dir.path(), BINDING_KEY_FILE);
    let at = pipe.clone();
    let refused = within_10s(move || load_or_create_binding_key(&at).map(drop));
    assert_eq!(
        refused.unwrap_err().to_string(),
        format!(
            "session-binding key {}: not a file nor a folder (a pipe, socket or device)",
            pipe.display()
        )
    );
    std::fs::remove_file(&pipe).unwrap();
    let large = huge(dir.path(), BINDING_KEY_FILE);
    assert_eq!(
        load_or_create_binding_key(&large)
            .map(drop)
            .unwrap_err()
            .to_string(),
        format!(
            "session-binding key {}: larger than the limit of 4096 bytes for a key file",
            large.display()
        )
    );
}

#[test]
fn a_short_key_file_is_an_error_that_does_not_show_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(BINDING_KEY_FILE);
    std::fs::write(&path, b"secret-but-short").unwrap();
    let err = load_or_create_binding_key(&path).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("at least 32 bytes"), "{text}");
    assert!(!text.contains("secret-but-short"), "{text}");
}
