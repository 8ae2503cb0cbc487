//! The memory search against the query it replaced, on both backends: the same notes, in the
//! same order, for every needle of a corpus written to trip it up — letters in both cases,
//! non-ASCII letters whose case a locale folds (É, Ü, the Kelvin sign), `LIKE`'s metacharacters
//! `%`, `_` and `\` in the needle and the text, and notes written at the same millisecond, so the
//! order among ties and where a limit cuts are compared too.
//!
//! The reference is the query as it was until 2026-12: the note's text lowered with 26 nested
//! `replace()`s (A–Z and nothing else, the same SQL on both engines), too slow at 10,000 notes
//! (see `benches/memory_search.rs`). It is kept here, verbatim, as the definition of the results.

use super::*;
use muninn_store::NewMemoryNote;
use pretty_assertions::assert_eq;

/// The search as it was, selecting only the ids.
const REFERENCE_SQL: &str = concat!(
    "SELECT id FROM memory_notes WHERE mind_id = $1 AND ",
    "replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(",
    "replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(",
    "replace(replace(replace(replace(replace(replace(text",
    ", 'A', 'a'), 'B', 'b'), 'C', 'c'), 'D', 'd'), 'E', 'e'), 'F', 'f'), 'G', 'g')",
    ", 'H', 'h'), 'I', 'i'), 'J', 'j'), 'K', 'k'), 'L', 'l'), 'M', 'm'), 'N', 'n')",
    ", 'O', 'o'), 'P', 'p'), 'Q', 'q'), 'R', 'r'), 'S', 's'), 'T', 't'), 'U', 'u')",
    ", 'V', 'v'), 'W', 'w'), 'X', 'x'), 'Y', 'y'), 'Z', 'z')",
    " LIKE $2 ESCAPE '\\' ORDER BY created_at_ms DESC, id DESC LIMIT $3",
);

/// The reference's pattern: `%needle%`, the needle ASCII-lowered, `%`, `_` and `\` escaped.
fn reference_pattern(needle: &str) -> String {
    let mut pattern = String::from("%");
    for c in needle.to_ascii_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// Pieces the notes are made of.
const PIECES: &[&str] = &[
    "Bob",
    "BOB",
    "bob",
    "Über den Wolken",
    "über",
    "ÉCOLE",
    "école",
    "Ecole",
    "100% sure",
    "100 percent",
    "a_b",
    "axb",
    "back\\slash",
    "back/slash",
    "50\\%",
    "Straße",
    "STRASSE",
    "\u{212A}elvin",
    "Kelvin",
    "İstanbul",
    "ǅ",
    "\u{FB01}le",
    "file",
    "日本語",
    "Tuesday build",
    "tuesday BUILD",
];

/// Needles: each piece, its ASCII-folded and fully folded forms, and a few of their own.
fn needles() -> Vec<String> {
    let mut needles: Vec<String> = [
        "", "%", "_", "\\", "\\%", "%%", "_b", "a%b", "a_b", "0% s", "0\\%", "k", "K", "kelvin",
        "ss", "ß", "i̇", "é", "É", "ü", "Ü", "bob b", " ", "build",
    ]
    .iter()
    .map(|n| n.to_string())
    .collect();
    for piece in PIECES {
        needles.push(piece.to_string());
        needles.push(piece.to_lowercase());
        needles.push(piece.to_uppercase());
        needles.push(piece.to_ascii_lowercase());
    }
    needles.sort();
    needles.dedup();
    needles
}

/// 300 notes of two or three pieces, three to a millisecond.
fn corpus() -> Vec<NewMemoryNote> {
    (0..300_usize)
        .map(|i| {
            let count = 2 + i % 2;
            let text = (0..count)
                .map(|k| PIECES[(i * 7 + k * 11 + k * i) % PIECES.len()])
                .collect::<Vec<_>>()
                .join(" ");
            NewMemoryNote {
                about: Vec::new(),
                salience: 1,
                text,
                created_at_ms: (i / 3) as i64,
                source: "corpus".into(),
            }
        })
        .collect()
}

/// Seeds `store` with the corpus (Mind `m`), then compares the search with `reference` for
/// every needle at two limits; answers how many comparisons found notes and how many were cut
/// by the limit (so the corpus is seen to exercise both).
async fn compare<F, Fut>(store: &dyn Store, reference: F) -> (usize, usize)
where
    F: Fn(String, i64) -> Fut,
    Fut: std::future::Future<Output = Vec<i64>>,
{
    let token = leased_mind(store, 60_000, 0).await;
    store.add_memory("m", token, &corpus()).await.unwrap();
    let (mut found, mut cut) = (0, 0);
    for needle in needles() {
        for limit in [5_i64, 1_000] {
            let searched: Vec<i64> = store
                .memory_search("m", &needle, limit)
                .await
                .unwrap()
                .iter()
                .map(|n| n.id)
                .collect();
            let expected = reference(reference_pattern(&needle), limit).await;
            assert_eq!(searched, expected, "needle {needle:?}, limit {limit}");
            found += usize::from(!searched.is_empty());
            cut += usize::from(limit == 5 && searched.len() == 5);
        }
    }
    (found, cut)
}

/// The corpus found something for many needles and the limit cut many answers.
fn assert_exercised((found, cut): (usize, usize)) {
    assert!(found > 60 && cut > 20, "found {found}, cut {cut}");
}

#[tokio::test]
async fn sqlite_memory_search_equals_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memory.db");
    let store = SqliteStore::open(&file).await.unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&file);
    let raw = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let counts = compare(&store, |pattern, limit| {
        let raw = raw.clone();
        async move {
            sqlx::query(REFERENCE_SQL)
                .bind("m")
                .bind(pattern)
                .bind(limit)
                .fetch_all(&raw)
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<i64, _>(0))
                .collect()
        }
    })
    .await;
    raw.close().await;
    store.close().await;
    assert_exercised(counts);
}

/// With the notes' text in a collation whose `lower()` lowers É to é and the Kelvin sign to k, as
/// the database's own does in most locales (C.UTF-8, en_US.UTF-8): the search must still fold
/// A–Z only. The collation is set on the column, not left to the server's locale: in a database
/// whose locale is "C", `lower()` folds A–Z only anyway, and this test passed with the plain
/// `lower(text)` that gives other results everywhere else.
#[tokio::test]
async fn postgres_memory_search_equals_the_reference() {
    let Some(admin) = postgres_admin("postgres_memory_search_equals_the_reference").await else {
        return;
    };
    let factory = Arc::new(PostgresFactory::new(admin));
    let checks = tokio::spawn({
        let factory = Arc::clone(&factory);
        async move {
            let store = factory.open("memory_search").await.unwrap();
            let schema = factory.schema_for("memory_search").await;
            let options = sqlx::postgres::PgConnectOptions::from_str(&postgres_url())
                .unwrap()
                .options([("search_path", schema.as_str())]);
            let raw = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .unwrap();
            // ICU's root locale ("und"): a PostgreSQL built with ICU has it whatever the
            // machine's locales; the column's collation is what a plain `lower(text)` would use.
            sqlx::query(
                r#"ALTER TABLE memory_notes ALTER COLUMN text TYPE text COLLATE "und-x-icu""#,
            )
            .execute(&raw)
            .await
            .expect("the ICU collation und-x-icu (PostgreSQL built with ICU)");
            let counts = compare(store.as_ref(), |pattern, limit| {
                let raw = raw.clone();
                async move {
                    sqlx::query(REFERENCE_SQL)
                        .bind("m")
                        .bind(pattern)
                        .bind(limit)
                        .fetch_all(&raw)
                        .await
                        .unwrap()
                        .iter()
                        .map(|r| r.get::<i64, _>(0))
                        .collect()
                }
            })
            .await;
            raw.close().await;
            store.close().await;
            counts
        }
    })
    .await;
    // Drop the schema whether or not the checks passed, then report.
    factory.cleanup().await;
    match checks {
        Ok(counts) => assert_exercised(counts),
        Err(panic) => std::panic::resume_unwind(panic.into_panic()),
    }
}
