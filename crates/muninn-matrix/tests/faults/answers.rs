//! A homeserver whose answer is larger than the connector reads, or trickles: cut at the
//! limit or the call's deadline, an error retried, never read whole.

use crate::*;

/// A homeserver stand-in on loopback for one request: it answers `200` with `declared` as the
/// `Content-Length` and then sends nothing (holding the connection), or, with `None`, a chunked
/// `/sync` answer padded with `pad_mib` MiB inside a JSON string; it counts the padding bytes
/// it got written before the client hung up.
fn oversized_homeserver(declared: Option<u64>, pad_mib: usize) -> (String, Arc<AtomicU64>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let written = Arc::new(AtomicU64::new(0));
    let count = written.clone();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let mut request = [0u8; 16 * 1024];
        let _ = stream.read(&mut request);
        let head = match declared {
            Some(n) => format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {n}\r\n\r\n"),
            None => "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_owned(),
        };
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        if declared.is_some() {
            std::thread::sleep(Duration::from_secs(120));
            return;
        }
        let chunk = |data: &[u8]| {
            let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
            framed.extend_from_slice(data);
            framed.extend_from_slice(b"\r\n");
            framed
        };
        let pad = chunk(&vec![b'a'; 1 << 20]);
        let mut pieces = vec![chunk(br#"{"next_batch":"s1","padding":""#)];
        pieces.extend(std::iter::repeat_n(pad, pad_mib));
        pieces.push(chunk(br#""}"#));
        pieces.push(b"0\r\n\r\n".to_vec());
        for piece in pieces {
            if stream.write_all(&piece).is_err() {
                return;
            }
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
    (url, written)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_its_limit_is_refused_at_the_limit_not_read_whole() {
    use muninn_matrix::client::{MatrixClient, SYNC_ANSWER_MAX_BYTES};
    let limit_mib = SYNC_ANSWER_MAX_BYTES >> 20;
    let is_too_large = |answer: &Result<_, muninn_matrix::MatrixError>| {
        matches!(answer, Err(muninn_matrix::MatrixError::TooLarge { what, limit })
            if what == "sync" && *limit == SYNC_ANSWER_MAX_BYTES)
    };
    // Chunked, no length declared: twice the limit on offer, the client stops at the limit.
    let (url, written) = oversized_homeserver(None, 2 * limit_mib);
    let client = MatrixClient::new(&url).unwrap();
    let answer = client.sync(None, "{}", Duration::ZERO).await;
    assert!(is_too_large(&answer), "{answer:?}");
    let pieces = written.load(Ordering::Relaxed) as usize;
    assert!(
        pieces < 2 * limit_mib + 3,
        "the client hung up before the whole answer ({pieces} pieces written)"
    );
    assert!(
        answer.unwrap_err().retry_after().is_some(),
        "retried with backoff"
    );

    // A declared length over the limit is refused before waiting for a byte of it.
    let (url, _) = oversized_homeserver(Some(1 << 40), 0);
    let client = MatrixClient::new(&url).unwrap();
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        client.sync(None, "{}", Duration::ZERO),
    )
    .await
    .expect("refused at once, not after the call's deadline");
    assert!(is_too_large(&answer), "{answer:?}");
}

/// A homeserver stand-in on loopback for one request: `200`, a declared length of 10,000 bytes,
/// then one byte every 100 ms — never silent, never done within a test.
fn trickling_homeserver() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let mut request = [0u8; 16 * 1024];
        let _ = stream.read(&mut request);
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10000\r\n\r\n{\"next_batch\":\"s1\",\"padding\":\"";
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        for _ in 0..10_000 {
            std::thread::sleep(Duration::from_millis(100));
            if stream.write_all(b"a").is_err() {
                return;
            }
        }
    });
    url
}

/// A homeserver (or a proxy before it) that trickles its answer cannot hold the connector: a
/// `/sync` long poll ends at its own wait plus the call timeout however lively the answer, an
/// ordinary call at the call timeout, each as a retryable failure that says it timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_trickles_is_cut_at_the_calls_deadline() {
    use muninn_matrix::client::MatrixClient;
    let call_timeout = Duration::from_millis(800);
    let sync_wait = Duration::from_millis(700);
    for (what, bound) in [("sync", sync_wait + call_timeout), ("whoami", call_timeout)] {
        let client = MatrixClient::new(&trickling_homeserver())
            .unwrap()
            .with_call_timeout(call_timeout);
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(20), async {
            match what {
                "sync" => client.sync(None, "{}", sync_wait).await.map(drop),
                _ => client.whoami().await.map(drop),
            }
        })
        .await
        .expect("the call was not cut at its deadline");
        let elapsed = started.elapsed();
        let error = answer.unwrap_err();
        assert!(
            matches!(&error, muninn_matrix::MatrixError::Unreachable(m)
                if m.starts_with(what) && m.contains("timed out")),
            "{what}: {error:?}"
        );
        assert!(
            error.retry_after().is_some(),
            "{what}: retried with backoff"
        );
        assert!(
            elapsed >= bound && elapsed < bound + Duration::from_secs(2),
            "{what}: {elapsed:?}"
        );
    }
}
