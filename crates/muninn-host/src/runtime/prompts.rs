//! What the sessions are told.

/// The reason of a segment opened by a compaction.
pub const COMPACT_REASON: &str = "compact";

/// What the Persona's session is told to keep when it is compacted.
pub const PERSONA_COMPACT_INSTRUCTIONS: &str = "Summarise this conversation for your own later use: who said what that still matters, what you promised or asked for, open questions, and each person's preferences. Keep names and room names exactly.";

/// What a long Self run is told when its context nears the ceiling (the flush protocol).
pub const SELF_RUN_FLUSH_MESSAGE: &str = "Your context is nearly full. Stop the work now and flush your memory: answer with one JSON object with the keys goal, open_tasks, constraints, done and facts, covering everything the next session must know to continue. Answer with the JSON only.";

/// What the Self is asked at a refresh.
pub const SELF_FLUSH_PROMPT: &str = "Flush your memory now: answer with one JSON object with the keys goal, open_tasks, constraints, done and facts, covering everything the next session must know. Answer with the JSON only.";
