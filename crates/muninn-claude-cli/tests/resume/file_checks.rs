//! What of the session file the checks of a failed turn read: a turn's part under a bound,
//! a forked session's end.

use super::*;
use pretty_assertions::assert_eq;

/// The part of the session file a refused turn added is read under a bound before the turn is
/// taken back out (the driver checks it holds nothing of the model's). A CLI stand-in stores
/// the turn's line and then 65 MiB more (a sparse run of NUL bytes, read fast and stored in
/// nothing) before the API refusal: the turn is refused loudly, not cut — the file is left
/// as the CLI wrote it, byte for byte, and the backend says the session is out of step, so the
/// caller rebuilds it. Before, the driver read the whole part into memory, however large, and
/// cut the file back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_part_of_the_session_file_past_the_bound_is_not_read_nor_cut() {
    let dir = tempfile::tempdir().unwrap();
    let session = "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a61";
    let file = dir
        .path()
        .join("data/home/.claude/projects/stand-in")
        .join(format!("{session}.jsonl"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let earlier = "{\"type\":\"user\",\"message\":{\"content\":\"earlier\"}}\n";
    std::fs::write(&file, earlier).unwrap();
    let refused = json!({"type": "result", "subtype": "success", "is_error": true,
        "terminal_reason": "api_error", "api_error_status": 401,
        "result": "API Error: 401", "usage": {"input_tokens": 0, "output_tokens": 0}});
    let bin = stand_in(
        dir.path(),
        &format!(
            "read line\n\
             printf '%s\\n' '{{\"type\":\"user\",\"message\":{{\"content\":\"the turn\"}}}}' >> '{f}'\n\
             truncate -s +65M '{f}'\n\
             {}while read line; do :; done\n",
            script::printed(&[script::init(), script::echo("p1"), refused]),
            f = file.display(),
        ),
    )
    .await;
    let sim = sim().await;
    let config = CliConfig::new(
        bin,
        dir.path().join("data"),
        sim.base_url(),
        Secret::new("sk-test-cli"),
        session,
    );
    assert_eq!(transcript_path(&config, session), Some(file.clone()));
    let mut b = ClaudeCliBackend::new(config);
    b.start(spec("oversize")).await.unwrap();
    let err = b.turn(TurnInput::text("p1")).await.unwrap_err();
    assert!(
        matches!(err, BackendError::Api { status: 401, .. }),
        "{err:?}"
    );
    let report = b.last_report().unwrap().clone();
    assert!(
        report.out_of_step && !b.failure_left_session() && !b.failure_kept_turn(),
        "{report:?}"
    );
    let len = std::fs::metadata(&file).unwrap().len();
    let added = "{\"type\":\"user\",\"message\":{\"content\":\"the turn\"}}\n".len() as u64;
    assert_eq!(len, earlier.len() as u64 + added + 65 * 1024 * 1024);
    b.shutdown().await;
}

/// A session forked from `session` to `copy` on a CLI stand-in, with the backends that started
/// the original (its child waits for its stdin to end) and the fork: the fork's launch reads
/// its turn's line and then runs the script `on_fork` makes of the copy's file's path (it
/// writes that file itself).
struct Forked {
    _sim: SimHandle,
    first: ClaudeCliBackend,
    fork: ClaudeCliBackend,
    /// The copy's session file.
    copied: std::path::PathBuf,
}

async fn forked(
    dir: &std::path::Path,
    (session, copy): (&str, &str),
    tag: &str,
    on_fork: impl FnOnce(&std::path::Path) -> String,
) -> Forked {
    let projects = dir.join("data/home/.claude/projects/stand-in");
    let copied = projects.join(format!("{copy}.jsonl"));
    let on_fork = on_fork(&copied);
    // Only the forked launch answers.
    let bin = stand_in(
        dir,
        &format!(
            "case \"$*\" in *--fork-session*)\n\
             read line\n\
             {on_fork}\
             ;;\n\
             esac\n\
             while read line; do :; done\n",
        ),
    )
    .await;
    let sim = sim().await;
    let mut config = CliConfig::new(
        bin,
        dir.join("data"),
        sim.base_url(),
        Secret::new("sk-test-cli"),
        session,
    );
    config.binding_key = Some(BindingKey::new(&[3u8; 32]).unwrap());
    let mut first = ClaudeCliBackend::new(config.clone());
    first.start(spec(tag)).await.unwrap();
    let handle = first.mint_handle(Vec::<Vec<u8>>::new()).unwrap();
    assert_eq!(handle.session_id, session);
    std::fs::create_dir_all(&projects).unwrap();
    let earlier = "{\"type\":\"user\",\"message\":{\"content\":\"earlier\"}}\n";
    std::fs::write(projects.join(format!("{session}.jsonl")), earlier).unwrap();
    let mut fork = ClaudeCliBackend::new(config);
    fork.fork_with(handle, Vec::<Vec<u8>>::new());
    fork.start(spec(tag)).await.unwrap();
    Forked {
        _sim: sim,
        first,
        fork,
        copied,
    }
}

/// A forked session's file begins with the whole history the CLI copied into it, so the turn's
/// part of it cannot be told from its start: a kept turn's check that the file holds what was
/// read of the model looks at the file's end, still under the bound. A CLI stand-in forks a
/// session whose copied history is 65 MiB (a sparse run of NUL bytes), stores a tool call and
/// its result, and dies before its `result`: the file holds both, so the session carries on
/// with the turn in it. Before, the whole file was read under the bound meant for a turn's
/// part, refused, and the session called out of step — a long session rebuilt from scratch
/// where a resume would do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_turn_of_a_forked_long_session_is_checked_at_the_files_end() {
    let dir = tempfile::tempdir().unwrap();
    let copy = "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a63";
    let call = json!({"type": "assistant", "message": {"id": "msg_f1", "model": "m",
        "content": [{"type": "tool_use", "id": "toolu_f1", "name": "Read", "input": {}}],
        "usage": {"input_tokens": 5, "output_tokens": 1}},
        "parent_tool_use_id": null, "request_id": "req_f1"});
    let result = json!({"type": "user", "message": {"role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_f1", "content": "ok"}]}});
    let init = json!({"type": "system", "subtype": "init", "session_id": copy});
    let Forked {
        mut first,
        mut fork,
        copied,
        ..
    } = forked(
        dir.path(),
        ("b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a62", copy),
        "fork-long",
        |f| {
            format!(
                "truncate -s 65M '{f}'\n\
                 printf '\\n%s\\n%s\\n' '{call}' '{result}' >> '{f}'\n\
                 {}exit 1\n",
                script::printed(&[init, script::echo("f1"), call.clone()]),
                f = f.display(),
            )
        },
    )
    .await;
    let err = fork.turn(TurnInput::text("f1")).await.unwrap_err();
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    let report = fork.last_report().unwrap().clone();
    assert_eq!(report.session_id, copy);
    assert!(
        std::fs::metadata(&copied).unwrap().len() > 65 * 1024 * 1024,
        "the copy is past the bound"
    );
    assert!(
        report.held && !report.out_of_step && fork.failure_kept_turn(),
        "{report:?}"
    );
    for b in [&mut first, &mut fork] {
        b.shutdown().await;
    }
}

/// The check that a forked session's file holds the model's message read of a failed turn
/// asks for that message, by its id. A CLI stand-in forks a session whose copied history
/// holds an earlier answer of the model's, begins the turn, shows its answer on stdout and
/// dies before storing it: the file lacks what was read, so the session is out of step and
/// the caller rebuilds it. Before, any model message in the file passed, and a fork's file
/// always holds the copied history's: the turn was said to be held, and the resumed session
/// would have held its line unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forked_turn_whose_answer_the_file_lost_is_out_of_step() {
    let dir = tempfile::tempdir().unwrap();
    let copy = "b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a65";
    // The history as the CLI copies it: an earlier answer, under its own message id.
    let history = json!({"type": "assistant", "requestId": "req_old", "message": {
        "id": "msg_old", "model": "claude-x", "role": "assistant",
        "content": [{"type": "text", "text": "an earlier answer"}]}});
    let init = json!({"type": "system", "subtype": "init", "session_id": copy});
    let Forked {
        mut first,
        mut fork,
        ..
    } = forked(
        dir.path(),
        ("b1f0c2a5-5b4d-4e6f-8a9b-0c1d2e3f4a64", copy),
        "fork-lost",
        |f| {
            format!(
                "printf '%s\\n' '{history}' > '{f}'\n{}exit 1\n",
                script::printed(&[
                    init,
                    script::echo("f2"),
                    script::said("the new answer", "msg_new", 5)
                ]),
                f = f.display(),
            )
        },
    )
    .await;
    let err = fork.turn(TurnInput::text("f2")).await.unwrap_err();
    assert!(matches!(err, BackendError::Transport(_)), "{err:?}");
    let report = fork.last_report().unwrap().clone();
    assert_eq!(report.session_id, copy);
    assert!(
        report.out_of_step && !report.held && !fork.failure_kept_turn(),
        "{report:?}"
    );
    for b in [&mut first, &mut fork] {
        b.shutdown().await;
    }
}
