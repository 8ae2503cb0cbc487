//! A whole turn in one transaction (`turns` holds the keys of turns already recorded): its
//! transcript, outbox, ledger, memory, briefs and mailbox ack commit together or not at all
//! (design §3.6, exactly-once effects).

use super::engine::{Backend, Engine, query};
use super::{briefs, leases, ledger, mailbox, memory, outbox, transcript};
use crate::error::{Result, StoreError};
use crate::types::{FencingToken, TurnReceipt, TurnRecord};

pub(crate) async fn record<B: Backend>(
    store: &B,
    mind: &str,
    token: FencingToken,
    turn: &TurnRecord,
) -> Result<TurnReceipt> {
    // One transaction for the whole turn. Any error below returns early and drops `tx`, which
    // rolls back everything written before it.
    let mut tx = store.begin_write().await?;
    leases::fence::<B::Db>(&mut tx, mind, token).await?;
    if let Some(key) = &turn.turn_key {
        // The fence serialises this Mind's writers, so check-then-insert is safe.
        let seen = query::<B::Db>("SELECT 1 FROM turns WHERE mind_id = $1 AND turn_key = $2")
            .bind(mind)
            .bind(key)
            .fetch_optional(&mut tx)
            .await?;
        if seen.is_some() {
            return Err(StoreError::TurnAlreadyRecorded {
                mind: mind.to_owned(),
                turn_key: key.clone(),
            });
        }
        query::<B::Db>("INSERT INTO turns (mind_id, turn_key) VALUES ($1, $2)")
            .bind(mind)
            .bind(key)
            .execute(&mut tx)
            .await?;
    }
    let transcript_seqs = transcript::insert::<B::Db>(&mut tx, mind, &turn.transcript).await?;
    let outbox = outbox::insert::<B::Db>(&mut tx, mind, &turn.outbox).await?;
    let ledger_ids = ledger::insert::<B::Db>(&mut tx, mind, &turn.ledger).await?;
    let memory_ids = memory::insert::<B::Db>(&mut tx, mind, &turn.memory).await?;
    let mut brief_seqs = Vec::with_capacity(turn.briefs.len());
    for brief in &turn.briefs {
        brief_seqs.push(briefs::insert::<B::Db>(&mut tx, mind, brief).await?.seq);
    }
    // The ack goes last: it is the one write that, alone, would lose mail.
    let ack_position = match turn.ack_through {
        Some(seq) => mailbox::advance_ack::<B::Db>(&mut tx, mind, seq).await?,
        None => mailbox::acked::<B::Db>(&mut tx, mind).await?,
    };
    B::Db::commit(tx).await?;
    Ok(TurnReceipt {
        transcript_seqs,
        outbox,
        ledger_ids,
        memory_ids,
        brief_seqs,
        ack_position,
    })
}
