//! Numbered migrations (`schema_version`), applied at open by both backends.

use super::engine::{Backend, Engine, RowExt, query};
use crate::error::{Result, StoreError};
use crate::read::Conn;
use crate::write::WriteTx;

/// The highest migration applied, 0 for a new database.
async fn current<DB: Engine>(conn: &mut impl Conn<DB>) -> Result<i64> {
    query::<DB>("SELECT CAST(COALESCE(MAX(version), 0) AS BIGINT) AS v FROM schema_version")
        .fetch_one(conn)
        .await?
        .col("v")
}

/// Applies the migrations newer than the recorded schema version inside the open transaction
/// `tx`, recording each; a database newer than this build is refused. The caller created
/// `schema_version` and commits.
pub(crate) async fn apply<DB: Engine>(
    tx: &mut WriteTx<DB>,
    migrations: &[(i64, &'static str, &'static str)],
) -> Result<()> {
    let current = current::<DB>(tx).await?;
    let newest = migrations.last().map(|m| m.0).unwrap_or(0);
    if current > newest {
        return Err(StoreError::SchemaTooNew {
            found: current,
            supported: newest,
        });
    }
    for (version, name, sql) in migrations.iter().filter(|m| m.0 > current) {
        DB::execute_raw(tx, sql)
            .await
            .map_err(|e| StoreError::Migration {
                version: *version,
                message: e.to_string(),
            })?;
        query::<DB>("INSERT INTO schema_version (version, name) VALUES ($1, $2)")
            .bind(version)
            .bind(*name)
            .execute(tx)
            .await?;
    }
    Ok(())
}

/// The schema version of the open database.
pub(crate) async fn schema_version<B: Backend>(store: &B) -> Result<i64> {
    let mut conn = B::Db::acquire(store.pool()).await?;
    current::<B::Db>(&mut conn).await
}
