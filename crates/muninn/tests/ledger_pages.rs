//! `muninn ledger` against a host that answers the ledger's pages one by one: what it prints of
//! a page is out before it asks for the next, whatever the format, so a ledger of any length is
//! held a page at a time.

use muninn_api::wire::LEDGER_PAGE_LIMIT;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A ledger entry whose decision is `decision` (the one field every format prints).
fn entry(id: i64, decision: &str) -> String {
    format!(
        r#"{{"id":{id},"row":{{"mind":"vala","role":"persona","segment":1,"turn":{id},"at_ms":1000,"idle_gap_ms":0,"model":"claude-sonnet-4-5","prefix_tokens":10,"rehydration_tokens":0,"usage":{{"input":1,"cache_write_5m":0,"cache_write_1h":0,"cache_read":0,"output":1}},"cost":3,"predicted_read":0,"predicted_write":0,"cache_state":"cold","decision":"{decision}","boundary":false,"events":[]}}}}"#
    )
}

/// The request line of the HTTP request on `stream` (its headers read and dropped).
fn request_line(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    head.lines().next().unwrap_or_default().to_owned()
}

fn answer(stream: &mut TcpStream, body: &str) {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    // The client may have gone (a failed run): nothing to say then.
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()));
}

/// Serves a two-page ledger: a full first page whose first row's decision is `first-row`, then
/// (asked after its last id) an empty one — held until `printed` says the first row is out, or
/// 20 s. Returns whether the second page had to be answered with the first row still unprinted.
fn serve_two_pages(listener: TcpListener, printed: mpsc::Receiver<()>) -> bool {
    let mut unprinted = false;
    for stream in listener.incoming() {
        let mut stream = stream.unwrap();
        let line = request_line(&mut stream);
        assert!(line.contains("/v1/minds/vala/ledger"), "{line}");
        if !line.contains("after_id") {
            let rows: Vec<String> = (1..=LEDGER_PAGE_LIMIT)
                .map(|id| entry(id, if id == 1 { "first-row" } else { "append" }))
                .collect();
            answer(&mut stream, &format!(r#"{{"rows":[{}]}}"#, rows.join(",")));
            continue;
        }
        unprinted = printed.recv_timeout(Duration::from_secs(20)).is_err();
        answer(&mut stream, r#"{"rows":[]}"#);
        return unprinted;
    }
    unprinted
}

/// `muninn ledger` read every page into memory before printing its first line (a ledger of
/// millions of rows held whole); now each page is printed before the next is asked for. The
/// second page is held back until the first row is on stdout: before, no row came and the
/// server gave up waiting after 20 s.
#[test]
fn ledger_prints_each_page_before_asking_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("api-token");
    std::fs::write(&token, "t0ken\n").unwrap();
    for format in ["table", "csv", "jsonl", "json"] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::channel();
        let server = std::thread::spawn(move || serve_two_pages(listener, rx));
        let mut child = Command::new(env!("CARGO_BIN_EXE_muninn"))
            .args(["ledger", "vala", "--format", format, "--addr", &addr])
            .arg("--token-file")
            .arg(&token)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut lines = 0;
        let mut line = String::new();
        while stdout.read_line(&mut line).unwrap() > 0 {
            lines += 1;
            if line.contains("first-row") {
                let _ = tx.send(());
            }
            line.clear();
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "--format {format}: {stderr}");
        assert!(
            !server.join().unwrap(),
            "--format {format}: the second page was asked for before the first row was printed"
        );
        assert!(
            lines >= LEDGER_PAGE_LIMIT,
            "--format {format}: {lines} lines"
        );
    }
}
