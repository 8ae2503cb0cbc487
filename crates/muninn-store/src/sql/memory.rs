//! Memory notes (`memory_notes`, and `memory_about`: the senders a note is about, in order).

use super::engine::{Backend, Engine, RowExt, query};
use super::{columns, leases, to_i64};
use crate::error::{Result, StoreError};
use crate::read::Conn;
use crate::types::{FencingToken, MEMORY_NOTE_MAX_BYTES, MemoryNote, NewMemoryNote};

/// Checks a memory note before it is written (the schema checks the byte length again).
fn check_note(note: &NewMemoryNote) -> Result<()> {
    if note.text.len() > MEMORY_NOTE_MAX_BYTES {
        return Err(StoreError::invalid(format!(
            "memory note of {} bytes exceeds {} bytes",
            note.text.len(),
            MEMORY_NOTE_MAX_BYTES
        )));
    }
    Ok(())
}

/// `matching`'s query on one engine, `$lowered` the note's text with A–Z lowered and nothing
/// else (`Engine::MEMORY_MATCH_SQL`; the needle is lowered the same way by `like_pattern`).
///
/// The lowering differs per engine because the engines' `lower()` differ: SQLite's folds ASCII
/// letters only, PostgreSQL's every letter its locale knows (`lower(text)` found "ÉCOLE" for
/// "école" on PostgreSQL only, and there never found "Über" in "Über", its `LIKE` comparing
/// case), unless the text is in the "C" collation, where only A–Z are letters. The query once
/// lowered with 26 nested `replace()`s that both engines run alike: the same results, but 26
/// copies of every note per search — at 10,000 notes 576 ms on SQLite and 301 ms on PostgreSQL
/// (release build, load 10–11), 2.2–2.4 s on SQLite in a debug build; `lower()` takes
/// 20–50 ms and 32–59 ms in the same conditions (`cargo bench -p muninn-store --bench
/// memory_search`). The plan is the same either way (the Mind's notes by `memory_notes_mind`,
/// then a sort for the order): the time was the per-row function, not the scan.
macro_rules! matching_sql {
    ($lowered:literal) => {
        concat!(
            "SELECT ",
            $crate::sql::columns!(memory),
            " FROM memory_notes WHERE mind_id = $1 AND ",
            $lowered,
            " LIKE $2 ESCAPE '\\' ORDER BY created_at_ms DESC, id DESC LIMIT $3",
        )
    };
}
pub(crate) use matching_sql;

/// `%needle%` for a `LIKE … ESCAPE '\'` over ASCII-lowered text (`matching_sql!`).
pub(crate) fn like_pattern(needle: &str) -> String {
    let mut pattern = String::with_capacity(needle.len() + 2);
    pattern.push('%');
    for c in needle.to_ascii_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// Adds notes inside the caller's (fenced) transaction; answers their ids.
pub(crate) async fn insert<DB: Engine>(
    conn: &mut DB::Connection,
    mind: &str,
    notes: &[NewMemoryNote],
) -> Result<Vec<i64>> {
    let mut ids = Vec::with_capacity(notes.len());
    for note in notes {
        check_note(note)?;
        let inserted = query::<DB>(
            "INSERT INTO memory_notes (mind_id, salience, text, created_at_ms, source) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(mind)
        .bind(note.salience)
        .bind(&note.text)
        .bind(note.created_at_ms)
        .bind(&note.source)
        .fetch_one(conn)
        .await?;
        let id: i64 = inserted.col("id")?;
        for (position, sender) in note.about.iter().enumerate() {
            query::<DB>("INSERT INTO memory_about (note_id, position, sender) VALUES ($1, $2, $3)")
                .bind(id)
                .bind(to_i64(position as u64, "about position")?)
                .bind(sender)
                .execute(conn)
                .await?;
        }
        ids.push(id);
    }
    Ok(ids)
}

/// Reads `memory_notes` rows (the columns of [`columns!`]`(memory)`) with their senders.
async fn with_about<DB: Engine>(
    conn: &mut impl Conn<DB>,
    rows: Vec<DB::Row>,
) -> Result<Vec<MemoryNote>> {
    let mut notes = Vec::with_capacity(rows.len());
    for row in rows {
        let id: i64 = row.col("id")?;
        let about_rows =
            query::<DB>("SELECT sender FROM memory_about WHERE note_id = $1 ORDER BY position")
                .bind(id)
                .fetch_all(conn)
                .await?;
        let about = about_rows
            .iter()
            .map(|r| r.col::<String>("sender"))
            .collect::<Result<Vec<_>>>()?;
        notes.push(MemoryNote {
            id,
            mind: row.col("mind_id")?,
            about,
            salience: row.col("salience")?,
            text: row.col("text")?,
            created_at_ms: row.col("created_at_ms")?,
            source: row.col("source")?,
        });
    }
    Ok(notes)
}

pub(crate) async fn add<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    notes: &[NewMemoryNote],
) -> Result<Vec<i64>> {
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    let ids = insert::<B::Db>(&mut tx, mind, notes).await?;
    B::Db::commit(tx).await?;
    Ok(ids)
}

/// Runs one of the searches below: `$1` the Mind, `$2` the filter if any, then the limit.
async fn search<B: Backend>(
    store: &B,
    sql: &'static str,
    mind: &str,
    filter: Option<String>,
    limit: i64,
) -> Result<Vec<MemoryNote>> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    let mut stmt = query::<B::Db>(sql).bind(mind);
    if let Some(filter) = filter {
        stmt = stmt.bind(filter);
    }
    let rows = stmt.bind(limit.max(0)).fetch_all(&mut conn).await?;
    with_about::<B::Db>(&mut conn, rows).await
}

pub(crate) async fn newest<B: Backend>(
    store: &B,
    mind: &str,
    limit: i64,
) -> Result<Vec<MemoryNote>> {
    const SQL: &str = concat!(
        "SELECT ",
        columns!(memory),
        " FROM memory_notes WHERE mind_id = $1 \
         ORDER BY created_at_ms DESC, id DESC LIMIT $2",
    );
    search(store, SQL, mind, None, limit).await
}

pub(crate) async fn about<B: Backend>(
    store: &B,
    mind: &str,
    sender: &str,
    limit: i64,
) -> Result<Vec<MemoryNote>> {
    const SQL: &str = concat!(
        "SELECT ",
        columns!(memory),
        " FROM memory_notes WHERE mind_id = $1 AND id IN \
         (SELECT note_id FROM memory_about WHERE sender = $2) \
         ORDER BY created_at_ms DESC, id DESC LIMIT $3",
    );
    search(store, SQL, mind, Some(sender.to_owned()), limit).await
}

pub(crate) async fn matching<B: Backend>(
    store: &B,
    mind: &str,
    needle: &str,
    limit: i64,
) -> Result<Vec<MemoryNote>> {
    let sql = <B::Db as Engine>::MEMORY_MATCH_SQL;
    search(store, sql, mind, Some(like_pattern(needle)), limit).await
}
