//! Reading a reply's body to a limit: a broken or hostile server cannot make the client hold
//! more than the limit in memory.

/// The most bytes of an error reply's body read: an error object is small, and only its first
/// 500 characters are kept when it is not one.
pub(super) const MAX_ERROR_BODY_BYTES: usize = 1024 * 1024;

/// How reading a body stopped short.
pub(super) enum BodyEnd {
    /// The whole body was read.
    Whole,
    /// The body passed the limit; what was read is its first `limit` bytes or more.
    TooLarge,
    /// A read failed.
    Failed(reqwest::Error),
    /// The attempt's deadline passed first (a body trickling in).
    TimedOut,
}

/// Reads `response`'s body chunk by chunk, stopping once it passes `limit` bytes or at
/// `deadline`.
pub(super) async fn read_body(
    response: &mut reqwest::Response,
    limit: usize,
    deadline: tokio::time::Instant,
) -> (Vec<u8>, BodyEnd) {
    let mut body = Vec::new();
    loop {
        // Checked as well as raced: a body whose chunks are always ready never loses a race.
        if tokio::time::Instant::now() >= deadline {
            return (body, BodyEnd::TimedOut);
        }
        let Ok(read) = tokio::time::timeout_at(deadline, response.chunk()).await else {
            return (body, BodyEnd::TimedOut);
        };
        match read {
            Ok(Some(chunk)) => {
                body.extend_from_slice(&chunk);
                if body.len() > limit {
                    return (body, BodyEnd::TooLarge);
                }
            }
            Ok(None) => return (body, BodyEnd::Whole),
            Err(e) => return (body, BodyEnd::Failed(e)),
        }
    }
}
