//! A backend wrapper the benches share: every method of [`Backend`] forwarded, and a hook
//! around each call that reaches the model.
//!
//! A wrapper that forwards only some methods leaves the rest to the trait's defaults, and the
//! runner then takes another path than `muninn serve` (whose `AnyBackend` forwards every
//! method): no tool-result clears (`can_clear_tool_results` is false by default), no failed
//! attempts or tools seen. The wake bench's wrapper did exactly that, so it measured a host that
//! never masked. One wrapper, written once, keeps every bench on the path the host takes.

use muninn_backend::{
    Backend, BackendError, FailedAttempt, FlushProtocol, InputPart, RunOutcome, SessionEvent,
    SessionSpec, ToolSpec, TurnInput, TurnOutcome,
};
use serde_json::Value;
use std::future::Future;
use std::time::Instant;

/// A call of the backend that reaches the model (or the simulator behind it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Start,
    Turn,
    TurnCleared,
    Ping,
    PingHead,
    Compact,
    Run,
}

/// What a bench does around the calls that reach the model.
pub trait Watch: Send + Sync {
    fn before(&self, _call: Call) {}
    /// `started` is when the inner call began.
    fn after(&self, _call: Call, _started: Instant) {}
}

/// `inner` with `watch` around each call that reaches the model; everything else forwarded.
pub struct Watched<B, W> {
    pub inner: B,
    pub watch: W,
}

async fn around<W: Watch, T>(watch: &W, call: Call, f: impl Future<Output = T>) -> T {
    watch.before(call);
    let started = Instant::now();
    let out = f.await;
    watch.after(call, started);
    out
}

impl<B: Backend, W: Watch> Backend for Watched<B, W> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn start(&mut self, spec: SessionSpec) -> Result<(), BackendError> {
        around(&self.watch, Call::Start, self.inner.start(spec)).await
    }

    async fn turn(&mut self, input: TurnInput) -> Result<TurnOutcome, BackendError> {
        around(&self.watch, Call::Turn, self.inner.turn(input)).await
    }

    async fn turn_cleared(
        &mut self,
        input: TurnInput,
        keep_tool_uses: u32,
    ) -> Result<TurnOutcome, BackendError> {
        let call = self.inner.turn_cleared(input, keep_tool_uses);
        around(&self.watch, Call::TurnCleared, call).await
    }

    async fn ping(&mut self) -> Result<TurnOutcome, BackendError> {
        around(&self.watch, Call::Ping, self.inner.ping()).await
    }

    async fn ping_head(&mut self) -> Result<TurnOutcome, BackendError> {
        around(&self.watch, Call::PingHead, self.inner.ping_head()).await
    }

    async fn compact(&mut self, instructions: &str) -> Result<TurnOutcome, BackendError> {
        around(&self.watch, Call::Compact, self.inner.compact(instructions)).await
    }

    async fn run(
        &mut self,
        input: TurnInput,
        protocol: &FlushProtocol,
    ) -> Result<RunOutcome, BackendError> {
        around(&self.watch, Call::Run, self.inner.run(input, protocol)).await
    }

    async fn close(&mut self) {
        self.inner.close().await
    }

    fn can_offer_tools(&self) -> bool {
        self.inner.can_offer_tools()
    }

    fn pending_input(&self) -> Vec<InputPart> {
        self.inner.pending_input()
    }

    fn tool_tokens(&self, tools: &[ToolSpec], output_schema: Option<&Value>) -> u64 {
        self.inner.tool_tokens(tools, output_schema)
    }

    fn can_clear_tool_results(&self) -> bool {
        self.inner.can_clear_tool_results()
    }

    fn ping_output_tokens(&self) -> u64 {
        self.inner.ping_output_tokens()
    }

    fn can_ping(&self) -> bool {
        self.inner.can_ping()
    }

    fn binds_sessions(&self) -> bool {
        self.inner.binds_sessions()
    }

    fn failure_left_session(&self) -> bool {
        self.inner.failure_left_session()
    }

    fn failure_kept_turn(&self) -> bool {
        self.inner.failure_kept_turn()
    }

    fn session_handle(&self, items: &[Vec<u8>]) -> Option<String> {
        self.inner.session_handle(items)
    }

    fn resume_session(&mut self, handle: &str, items: &[Vec<u8>], fork: bool) -> bool {
        self.inner.resume_session(handle, items, fork)
    }

    fn set_seed(&mut self, seed: Option<String>) {
        self.inner.set_seed(seed)
    }

    fn take_failed_attempts(&mut self) -> Vec<FailedAttempt> {
        self.inner.take_failed_attempts()
    }

    fn take_session_events(&mut self) -> Vec<SessionEvent> {
        self.inner.take_session_events()
    }
}
