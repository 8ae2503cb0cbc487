//! What an operator reads and sets: briefs for the Self, a Mind's status, the transcript, the
//! ledger's exports, settings and the brake, and a shutdown that ends open streams.

use super::*;
use pretty_assertions::assert_eq;

#[tokio::test]
async fn operator_briefs_are_queued_for_the_self() {
    let server = Server::start().await;
    let brief = server
        .client
        .post_brief("vala", "tidy the wiki")
        .await
        .unwrap();
    assert_eq!(brief.seq, 1);
    assert_eq!(brief.origin, BriefOrigin::Operator);
    assert_eq!(brief.status, BriefStatus::Queued);
    assert_eq!(brief.created_at_ms, T0);
    assert!(woken(&server, "vala").is_some());
    assert!(woken(&server, "huginn").is_none());
    let queued = server.host.store.briefs("vala", None, 10).await.unwrap();
    assert_eq!(queued, vec![brief]);
    let error = server.client.post_brief("vala", "").await.unwrap_err();
    assert_eq!(api_error(error), (422, "unprocessable".into()));
}

/// A Mind's status counts its waiting mail with one `COUNT`, exactly: it read up to a
/// thousand whole deliveries (texts and contexts, up to 128 KiB each) to count them, on every
/// status call, the dashboard's refreshes included, and said 1,000 past that.
#[tokio::test]
async fn status_counts_every_waiting_delivery_exactly() {
    let server = Server::start().await;
    let deliveries: Vec<muninn_store::NewDelivery> = (0..1_205)
        .map(|i| muninn_store::NewDelivery {
            room: "#swarm".into(),
            sender: "@ada:example.org".into(),
            is_direct: false,
            to_you: false,
            text: format!("message {i}"),
            source_id: format!("ev-{i}"),
            received_at_ms: T0 + i,
            context: Vec::new(),
        })
        .collect();
    let batch = muninn_store::IntakeBatch {
        deliveries,
        cursor: None,
    };
    server.host.store.post_batch("vala", &batch).await.unwrap();
    let token = server.lease("vala").await;
    server
        .host
        .store
        .ack_through("vala", token, 5)
        .await
        .unwrap();
    let status = server.client.mind("vala").await.unwrap();
    assert_eq!(
        (
            status.ack_position,
            status.pending_deliveries,
            status.oldest_pending_at_ms
        ),
        (5, 1_200, Some(T0 + 5))
    );
}

#[tokio::test]
async fn status_shows_settings_lease_segments_and_spend() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    let segment = server
        .host
        .store
        .start_segment(
            "vala",
            token,
            &NewSegment {
                role: Role::Persona,
                started_at_ms: T0,
                rehydration_tokens: 4_000,
                reason: "cold start".into(),
                session_id: None,
                memory: None,
                spec_digest: None,
            },
        )
        .await
        .unwrap();
    server
        .host
        .store
        .append_ledger("vala", token, &[ledger_row("vala", T0, 1_234)])
        .await
        .unwrap();
    server.clock.advance(1_000);

    let status = server.client.mind("vala").await.unwrap();
    assert!(status.registered);
    assert!(status.lease_live);
    assert_eq!(status.lease.as_ref().unwrap().holder, "test-host");
    assert_eq!(status.segments.persona, Some(segment.clone()));
    assert_eq!(status.segments.self_role, None);
    assert_eq!(status.config.as_ref().unwrap()["id"], "vala");
    // The client reads the configuration as JSON; it is the host's typed `[[mind]]` entry.
    let config: muninn_host::config::MindConfig =
        serde_json::from_value(status.config.clone().unwrap()).unwrap();
    assert_eq!(Some(&config), server.host.config.mind("vala"));
    assert_eq!(status.display_name, "VALA");
    assert_eq!(
        status.spend,
        SpendSummary {
            window_ms: 86_400_000,
            from_ms: T0 + 1_000 - 86_400_000,
            to_ms: T0 + 1_000,
            spent_micro_usd: 1_234,
            cap_micro_usd: Some(5_000_000),
        }
    );
    assert_eq!(status.settings, Settings::default());

    let all = server.client.minds().await.unwrap();
    let ids: Vec<_> = all.minds.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["huginn", "vala"]);
    assert!(
        all.minds[0].config.is_none(),
        "huginn is stored but not configured"
    );

    let segments = server.client.segments("vala").await.unwrap();
    assert_eq!(segments.persona, vec![segment]);
    assert!(segments.self_role.is_empty());

    let error = server.client.mind("nobody").await.unwrap_err();
    assert_eq!(api_error(error), (404, "mind_not_found".into()));
}

/// The segments come in a bounded page, the newest of each role (oldest first): a Mind that
/// has lived long has thousands, each with the memory layer it started from, and the route
/// answered them all at every call.
#[tokio::test]
async fn segments_come_in_bounded_pages() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    for n in 0..=100 {
        let segment = NewSegment {
            role: Role::Persona,
            started_at_ms: T0 + n,
            rehydration_tokens: 4_000,
            reason: "refresh".into(),
            session_id: None,
            memory: Some("the memory layer".into()),
            spec_digest: None,
        };
        server
            .host
            .store
            .start_segment("vala", token, &segment)
            .await
            .unwrap();
    }
    let numbers = |segments: &[muninn_store::Segment]| -> Vec<i64> {
        segments.iter().map(|s| s.number).collect()
    };
    let page = server.client.segments("vala").await.unwrap();
    assert_eq!(numbers(&page.persona), (1..=100).collect::<Vec<_>>());
    assert!(page.self_role.is_empty());
    let url = format!("{}/v1/minds/vala/segments?limit=2", server.base);
    let response = reqwest::Client::new()
        .get(url)
        .bearer_auth(server.token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let two: SegmentsResponse = response.json_body().await;
    assert_eq!(numbers(&two.persona), vec![99, 100]);
    // Further back: the page before a segment number (the first page's oldest), and so on to
    // the first segment; before was refused as an unknown field, the oldest out of reach.
    let mut before = two.persona[0].number;
    let mut older = Vec::new();
    loop {
        let url = format!(
            "{}/v1/minds/vala/segments?limit=40&before={before}",
            server.base
        );
        let response = reqwest::Client::new()
            .get(url)
            .bearer_auth(server.token.expose())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let page: SegmentsResponse = response.json_body().await;
        let Some(oldest) = page.persona.first() else {
            break;
        };
        before = oldest.number;
        older.splice(0..0, numbers(&page.persona));
    }
    assert_eq!(older, (0..99).collect::<Vec<_>>());
}

#[tokio::test]
async fn the_transcript_pages_tails_and_long_polls() {
    let server = Arc::new(Server::start().await);
    let token = server.lease("vala").await;
    let item = |n: i64| NewTranscriptItem {
        role: Role::Persona,
        segment: 0,
        kind: TranscriptKind::Reply,
        body: serde_json::json!({"say": [{"room": "#swarm", "text": format!("line {n}")}]}),
        created_at_ms: T0 + n,
    };
    server
        .host
        .store
        .append_transcript("vala", token, &[item(1), item(2), item(3)])
        .await
        .unwrap();
    let query = |after, last, wait_s| TranscriptQuery {
        after,
        last,
        wait_s,
        ..TranscriptQuery::default()
    };
    let page = server
        .client
        .transcript("vala", Role::Persona, &query(Some(1), None, None))
        .await
        .unwrap();
    assert_eq!(page.items.iter().map(|i| i.seq).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(page.next_after, 3);
    assert_eq!(page.items[0].kind, "reply");
    assert_eq!(page.items[0].body["say"][0]["text"], "line 2");
    let tail = server
        .client
        .transcript("vala", Role::Persona, &query(None, Some(1), None))
        .await
        .unwrap();
    assert_eq!(tail.items.iter().map(|i| i.seq).collect::<Vec<_>>(), [3]);
    let other_role = server
        .client
        .transcript("vala", Role::SelfRole, &query(None, None, None))
        .await
        .unwrap();
    assert!(other_role.items.is_empty());

    let poller = {
        let server = server.clone();
        tokio::spawn(async move {
            server
                .client
                .transcript("vala", Role::Persona, &query(Some(3), None, Some(30)))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    server
        .host
        .store
        .append_transcript("vala", token, &[item(4)])
        .await
        .unwrap();
    server.host.signals.outbox.notify_waiters();
    let woken = tokio::time::timeout(Duration::from_secs(10), poller)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(woken.items.iter().map(|i| i.seq).collect::<Vec<_>>(), [4]);
}

#[tokio::test]
async fn the_ledger_exports_json_and_jsonl_that_parses_back() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    let rows = vec![
        ledger_row("vala", T0, 100),
        ledger_row("vala", T0 + 10_000, 200),
        ledger_row("vala", T0 + 20_000, 300),
    ];
    server
        .host
        .store
        .append_ledger("vala", token, &rows)
        .await
        .unwrap();

    assert_eq!(exported(&server).await, rows);

    let window = LedgerParams {
        from_ms: Some(T0 + 5_000),
        to_ms: Some(T0 + 20_000),
        ..LedgerParams::default()
    };
    let json = server.client.ledger("vala", &window).await.unwrap();
    assert_eq!(json.rows.len(), 1);
    assert_eq!(json.rows[0].row, rows[1]);
    let paged = server
        .client
        .ledger(
            "vala",
            &LedgerParams {
                after_id: Some(json.rows[0].id),
                limit: Some(5),
                ..LedgerParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        paged.rows.iter().map(|r| &r.row).collect::<Vec<_>>(),
        [&rows[2]]
    );

    let response = reqwest::Client::new()
        .get(format!("{}/v1/minds/vala/ledger?format=jsonl", server.base))
        .bearer_auth(server.token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
}

/// Every ledger answer is bounded: without a `limit` the server answers at most
/// `LEDGER_PAGE_LIMIT` rows (it used to answer the whole ledger), and the client's export
/// pages with `after_id` until a page comes short, so it is still whole and in order.
/// Vala's whole ledger as `muninn ledger --format jsonl` exports it, parsed back.
async fn exported(server: &Server) -> Vec<LedgerRow> {
    let jsonl = server
        .client
        .ledger_jsonl("vala", &LedgerParams::default())
        .await
        .unwrap();
    jsonl
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// One `GET /v1/minds/vala/ledger{query}` as sent by hand, not by the paging client: what a
/// single answer holds.
async fn raw_ledger(server: &Server, query: &str) -> LedgerResponse {
    let body = reqwest::Client::new()
        .get(format!("{}/v1/minds/vala/ledger{query}", server.base))
        .bearer_auth(server.token.expose())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn the_ledger_is_answered_in_bounded_pages_and_exported_whole() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    let total = LEDGER_PAGE_LIMIT as usize * 2 + 7;
    let rows: Vec<LedgerRow> = (0..total)
        .map(|i| ledger_row("vala", T0 + i as i64, 100 + i as i64))
        .collect();
    server
        .host
        .store
        .append_ledger("vala", token, &rows)
        .await
        .unwrap();

    let first = raw_ledger(&server, "").await;
    assert_eq!(first.rows.len(), LEDGER_PAGE_LIMIT as usize);
    assert_eq!(
        first.rows.last().unwrap().row,
        rows[LEDGER_PAGE_LIMIT as usize - 1]
    );
    // A larger limit is capped too, in any one answer...
    let capped = raw_ledger(&server, &format!("?limit={}", LEDGER_PAGE_LIMIT * 3)).await;
    assert_eq!(capped.rows.len(), LEDGER_PAGE_LIMIT as usize);
    // ...while the client pages up to the limit it was asked for, not cut short at the cap.
    let asked = LEDGER_PAGE_LIMIT as usize + 3;
    let up_to_asked = LedgerParams {
        limit: Some(asked as i64),
        ..LedgerParams::default()
    };
    let first_asked = server.client.ledger("vala", &up_to_asked).await.unwrap();
    assert_eq!(
        first_asked.rows.iter().map(|e| &e.row).collect::<Vec<_>>(),
        rows[..asked].iter().collect::<Vec<_>>()
    );
    let jsonl_asked = server
        .client
        .ledger_jsonl("vala", &up_to_asked)
        .await
        .unwrap();
    assert_eq!(jsonl_asked.lines().count(), asked);

    let all = server
        .client
        .ledger("vala", &LedgerParams::default())
        .await
        .unwrap();
    assert_eq!(
        all.rows.iter().map(|e| &e.row).collect::<Vec<_>>(),
        rows.iter().collect::<Vec<_>>()
    );
    assert_eq!(exported(&server).await, rows);
}

/// Each role numbers its own segments, so paging back is per role: a Mind with more of both
/// than a page holds (and more of one than the other), paged with the client, shows each
/// segment of each role exactly once.
#[tokio::test]
async fn paging_segments_back_shows_each_of_each_role_once() {
    let server = Server::start().await;
    let token = server.lease("vala").await;
    let counts = [(Role::Persona, 7), (Role::SelfRole, 4)];
    for (role, count) in counts {
        for n in 0..count {
            let segment = NewSegment {
                role,
                started_at_ms: T0 + n,
                rehydration_tokens: 4_000,
                reason: "refresh".into(),
                session_id: None,
                memory: None,
                spec_digest: None,
            };
            server
                .host
                .store
                .start_segment("vala", token, &segment)
                .await
                .unwrap();
        }
    }
    for (role, count) in counts {
        // Every segment any page answered, of either role, as (role, number).
        let mut seen = Vec::new();
        let mut query = SegmentsQuery {
            limit: Some(3),
            before: None,
            role: Some(role),
        };
        loop {
            let page = server.client.segments_page("vala", &query).await.unwrap();
            let listed = |r: Role, list: &[muninn_store::Segment]| {
                list.iter()
                    .map(move |s| (r.as_str(), s.number))
                    .collect::<Vec<_>>()
            };
            let asked = match role {
                Role::Persona => &page.persona,
                Role::SelfRole => &page.self_role,
            };
            let Some(oldest) = asked.first() else {
                break;
            };
            query.before = Some(oldest.number);
            seen.extend(listed(Role::Persona, &page.persona));
            seen.extend(listed(Role::SelfRole, &page.self_role));
        }
        seen.sort();
        assert_eq!(
            seen,
            (0..count).map(|n| (role.as_str(), n)).collect::<Vec<_>>(),
            "{}",
            role.as_str()
        );
    }
}

/// Two operators edit different caps from the same read (`muninn caps`, the dashboard's form):
/// the second write must not put back the cap the first one changed.
#[tokio::test]
async fn a_caps_write_from_a_stale_read_is_refused_not_lost() {
    let server = Server::start().await;
    let read = server.client.settings("vala").await.unwrap();
    let mut theirs = read.caps_if_unchanged();
    theirs.turn_limit = Some(7);
    server.client.put_settings("vala", &theirs).await.unwrap();

    let mut mine = read.caps_if_unchanged();
    mine.spend_cap_micro_usd = Some(5_000_000);
    let refused = server.client.put_settings("vala", &mine).await;
    let after = server.client.settings("vala").await.unwrap();
    assert_eq!(
        after.turn_limit,
        Some(7),
        "the other operator's turn limit was lost"
    );
    assert_eq!(api_error(refused.unwrap_err()), (409, "conflict".into()));
    assert_eq!(after.spend_cap_micro_usd, None);

    // Read again, and the same edit goes through, keeping theirs.
    let mut again = after.caps_if_unchanged();
    again.spend_cap_micro_usd = Some(5_000_000);
    let saved = server.client.put_settings("vala", &again).await.unwrap();
    assert_eq!(
        (saved.spend_cap_micro_usd, saved.turn_limit),
        (Some(5_000_000), Some(7))
    );
}

/// Eight `PUT`s from one read, sent at once, each expecting the caps read and setting its own
/// turn limit: one is written, the other seven are refused with 409 and the caps are the
/// winner's. Five rounds, each from a fresh read. The check and the write were once a read, then
/// a write: every request read the old caps before any wrote, so several "won", each
/// overwriting the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_caps_writes_from_one_read_let_exactly_one_through() {
    let server = Server::start().await;
    for round in 0..5_i64 {
        let read = server.client.settings("vala").await.unwrap();
        let attempts: Vec<_> = (1..=8_i64)
            .map(|n| {
                let mut put = read.caps_if_unchanged();
                put.turn_limit = Some(round * 100 + n);
                let client = server.client.clone();
                tokio::spawn(async move { (n, client.put_settings("vala", &put).await) })
            })
            .collect();
        let mut written = Vec::new();
        let mut refused = Vec::new();
        for attempt in attempts {
            match attempt.await.unwrap() {
                (n, Ok(settings)) => written.push((n, settings.turn_limit)),
                (n, Err(e)) => refused.push((n, api_error(e))),
            }
        }
        assert_eq!(written.len(), 1, "round {round}: written {written:?}");
        let (winner, shown) = written[0];
        assert_eq!(shown, Some(round * 100 + winner));
        assert!(
            refused
                .iter()
                .all(|(_, e)| *e == (409, "conflict".to_owned())),
            "round {round}: {refused:?}"
        );
        let after = server.client.settings("vala").await.unwrap();
        assert_eq!(
            after.turn_limit,
            Some(round * 100 + winner),
            "round {round}"
        );
    }
}

#[tokio::test]
async fn settings_round_trip_and_the_brake_reaches_every_mind() {
    let server = Server::start().await;
    assert_eq!(
        server.client.settings("vala").await.unwrap(),
        Settings::default()
    );
    let wanted = Settings {
        spend_cap_micro_usd: Some(2_000_000),
        spend_window_ms: Some(3_600_000),
        brake: false,
        turn_limit: Some(20),
    };
    assert_eq!(
        server
            .client
            .put_settings("vala", &wanted.caps())
            .await
            .unwrap(),
        wanted
    );
    assert_eq!(server.client.settings("vala").await.unwrap(), wanted);
    let status = server.client.mind("vala").await.unwrap();
    assert_eq!(status.spend.cap_micro_usd, Some(2_000_000));
    assert_eq!(status.spend.window_ms, 3_600_000);

    let invalid = PutSettingsRequest {
        spend_cap_micro_usd: Some(-1),
        ..PutSettingsRequest::default()
    };
    let error = server
        .client
        .put_settings("vala", &invalid)
        .await
        .unwrap_err();
    assert_eq!(api_error(error), (422, "unprocessable".into()));

    assert!(
        woken(&server, "vala").is_some(),
        "a settings change wakes its Mind"
    );
    assert!(woken(&server, "huginn").is_none());
    let on = server.client.brake(true).await.unwrap();
    for mind in ["vala", "huginn"] {
        assert!(woken(&server, mind).is_some(), "the brake wakes {mind}");
    }
    assert_eq!(
        on,
        BrakeResponse {
            brake: true,
            minds: vec!["huginn".into(), "vala".into()]
        }
    );
    for mind in ["vala", "huginn"] {
        assert!(server.host.store.settings(mind).await.unwrap().brake);
    }
    // The brake leaves the other settings alone.
    let braked = server.client.settings("vala").await.unwrap();
    assert_eq!(
        braked,
        Settings {
            brake: true,
            ..wanted.clone()
        }
    );
    let off = server.client.brake(false).await.unwrap();
    assert!(!off.brake);
    assert_eq!(server.client.settings("vala").await.unwrap(), wanted);
    assert!(!server.client.settings("huginn").await.unwrap().brake);
}

#[tokio::test]
async fn shutdown_ends_open_streams_and_long_polls_instead_of_waiting_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::demo();
    config.data_dir = dir.path().to_owned();
    let store = muninn_store::open(&config.database_url()).await.unwrap();
    store
        .create_mind(&Mind {
            id: "vala".into(),
            display_name: "Vala".into(),
            config: serde_json::json!({}),
            created_at_ms: T0,
        })
        .await
        .unwrap();
    let host = Host::new(store, config, Arc::new(ManualClock::new(T0)));
    let token = ApiToken::new("t0k3n");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(host, token.clone(), listener, async {
        let _ = stopped.await;
    }));
    let client = ApiClient::new(&addr.to_string(), token.clone()).unwrap();
    let mut stream = reqwest::Client::new()
        .get(format!("http://{addr}/v1/minds/vala/outbox/stream"))
        .bearer_auth(token.expose())
        .send()
        .await
        .unwrap();
    let poll = tokio::spawn(async move { client.outbox("vala", 0, 60).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server did not stop")
        .unwrap()
        .unwrap();
    let answer = poll.await.unwrap().unwrap();
    assert!(answer.messages.is_empty());
    // The stream ended cleanly (or its connection closed).
    while let Ok(Some(_)) = stream.chunk().await {}
}

/// Saving caps never releases the brake: a caps PUT that leaves `brake` out keeps it, and one
/// carrying the value read before `brake on` (a page opened earlier, a `muninn caps` racing
/// `muninn brake on`) is refused and changes nothing. Before, the PUT replaced the brake too.
#[tokio::test]
async fn saving_caps_never_releases_the_brake() {
    let server = Server::start().await;
    server.client.brake(true).await.unwrap();
    let put = |body: &'static str| {
        reqwest::Client::new()
            .put(format!("{}/v1/minds/vala/settings", server.base))
            .bearer_auth(server.token.expose())
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let response = put(r#"{"spend_cap_micro_usd":5000000,"spend_window_ms":null,"turn_limit":7}"#)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let braked = server.client.settings("vala").await.unwrap();
    assert_eq!(
        (braked.brake, braked.spend_cap_micro_usd, braked.turn_limit),
        (true, Some(5_000_000), Some(7)),
        "caps without the brake"
    );

    let stale =
        put(r#"{"spend_cap_micro_usd":1,"spend_window_ms":null,"brake":false,"turn_limit":null}"#)
            .await
            .unwrap();
    assert_eq!(stale.status(), 409);
    let body: ErrorResponse = stale.json_body().await;
    assert!(
        body.error.message.contains("/brake"),
        "{}",
        body.error.message
    );
    let kept = server.client.settings("vala").await.unwrap();
    assert_eq!(
        (kept.brake, kept.spend_cap_micro_usd, kept.turn_limit),
        (true, Some(5_000_000), Some(7)),
        "a stale brake changes nothing"
    );
    assert!(server.host.store.settings("vala").await.unwrap().brake);

    // The Mind's own brake route releases it, keeps its caps, and leaves the other Mind braked.
    let off = server.client.brake_mind("vala", false).await.unwrap();
    assert_eq!(
        off,
        BrakeResponse {
            brake: false,
            minds: vec!["vala".into()]
        }
    );
    let released = server.client.settings("vala").await.unwrap();
    assert_eq!(
        (
            released.brake,
            released.spend_cap_micro_usd,
            released.turn_limit
        ),
        (false, Some(5_000_000), Some(7))
    );
    assert!(server.client.settings("huginn").await.unwrap().brake);
    let error = server.client.brake_mind("nobody", true).await.unwrap_err();
    assert_eq!(api_error(error), (404, "mind_not_found".into()));
}
