//! Fuzzing the stream decoding (`muninn_testkit::fuzz`, seeds in `fuzz/corpus/anthropic-sse/`):
//! SSE framing, stream-event parsing and the assembly of a reply, from bytes a broken or hostile
//! server might send.
//!
//! Properties, for every input: nothing panics; the frames (or the error) are the same whatever
//! the chunking, down to one byte at a time; every event that parses survives encode → parse
//! unchanged; an assembled reply's usage converts to the ledger's numbers.

use muninn_anthropic::client::assemble;
use muninn_anthropic::sse::{SseDecoder, SseError, SseFrame, encode};
use muninn_anthropic::wire::StreamEvent;
use muninn_testkit::fuzz::{FuzzConfig, FuzzRng, Verdict, corpus_dir, fnv1a, fuzz, load_corpus};

/// Frames completed before the stream ended, and how it ended.
type Decoded = (Vec<SseFrame>, Result<(), SseError>);

fn decode_chunked(input: &[u8], cuts: &[usize]) -> Decoded {
    let mut decoder = SseDecoder::new();
    let mut frames = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        match decoder.push(&input[from..cut]) {
            Ok(more) => frames.extend(more),
            Err(e) => return (frames, Err(e)),
        }
        from = cut;
    }
    (frames, decoder.finish())
}

fn check_stream(input: &[u8]) -> Result<Verdict, String> {
    let (whole, ended) = decode_chunked(input, &[]);
    let cuts = FuzzRng::new(fnv1a(input)).cuts(input.len());
    let (chunked, chunked_end) = decode_chunked(input, &cuts);
    if chunked_end != ended {
        return Err(format!(
            "the stream ends {ended:?} whole but {chunked_end:?} cut at {cuts:?}"
        ));
    }
    // A push that fails returns no frames, so after an error only a prefix is comparable.
    let comparable = if ended.is_ok() {
        chunked == whole
    } else {
        whole.starts_with(&chunked) || chunked.starts_with(&whole)
    };
    if !comparable {
        return Err(format!(
            "frames differ when cut at {cuts:?}: {whole:?} vs {chunked:?}"
        ));
    }
    if let Err(e) = &ended {
        // A clear error, with a line number where there is one.
        return if e.to_string().contains("SSE") {
            Ok(Verdict::Refused)
        } else {
            Err(format!("an unclear error: {e}"))
        };
    }
    for frame in &whole {
        let Ok(event) = StreamEvent::parse(&frame.data) else {
            continue;
        };
        let encoded = encode(&event);
        let (again, end) = decode_chunked(encoded.as_bytes(), &[]);
        let reparsed = match (end, again.as_slice()) {
            (Ok(()), [one]) => StreamEvent::parse(&one.data).map_err(|e| e.to_string()),
            (end, frames) => Err(format!("{end:?} with {} frames", frames.len())),
        };
        if reparsed.as_ref() != Ok(&event) {
            return Err(format!(
                "{event:?} does not survive encode → parse: {reparsed:?}"
            ));
        }
    }
    let data: Vec<String> = whole.into_iter().map(|f| f.data).collect();
    match assemble(&data) {
        Ok((_, _, usage)) => {
            let core = usage.to_core();
            // The ledger's totals are sums of these: they must be computable too.
            let _ = core
                .input
                .checked_add(core.written())
                .map(|n| n.checked_add(core.cache_read));
            Ok(Verdict::Accepted)
        }
        Err(e) if !e.to_string().is_empty() => Ok(Verdict::Refused),
        Err(e) => Err(format!("an assembly error without a message: {e:?}")),
    }
}

#[test]
fn sse_stream_decoding_survives_mutated_streams() {
    let seeds = load_corpus(&corpus_dir("anthropic-sse"));
    let dictionary: &[&[u8]] = &[
        b"event: ",
        b"data: ",
        b"data:",
        b": comment",
        b"id: 7",
        b"retry: 10",
        b"\n\n",
        b"\r\n\r\n",
        b"\r\r",
        b"\"index\":1",
        b"\"type\":\"content_block_stop\"",
        b"\"type\":\"message_delta\"",
        b"\"type\":\"error\"",
        b"\"cache_creation\":{\"ephemeral_5m_input_tokens\":18446744073709551615,\"ephemeral_1h_input_tokens\":1}",
        b"\"cache_creation_input_tokens\":18446744073709551615",
    ];
    let report = fuzz(
        "anthropic-sse",
        &seeds,
        dictionary,
        &FuzzConfig::from_env(64 * 1024),
        check_stream,
    );
    assert!(
        report.accepted > 0,
        "no mutant assembled into a reply: {report}"
    );
}
