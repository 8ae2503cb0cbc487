//! Idle: shortly before the tail (then the head) expires, keep it warm or let it go.

#[allow(unused_imports)]
use super::*;

impl<B: Backend> MindRunner<B> {
    /// Nothing queued: shortly before the Persona's tail expires, ask the decider whether to
    /// keep it warm.
    pub(super) async fn idle(
        &mut self,
        token: FencingToken,
        now: i64,
    ) -> Result<Step, RuntimeError> {
        let session = &self.persona;
        if session.broken || session.renderer.is_none() {
            return Ok(Step::Idle { until_ms: None });
        }
        let tail_live = session.warm_until_ms.is_some_and(|t| t > now) && !session.let_expire;
        let (event, expiry) = if tail_live {
            (Event::Expiring, session.warm_until_ms)
        } else if !session.head_let_expire {
            // The tail is gone (or let go): the head, under its own longer TTL, may still be kept.
            (
                Event::HeadExpiring,
                session.head_warm_until_ms.filter(|t| *t > now),
            )
        } else {
            (Event::HeadExpiring, None)
        };
        let Some(expiry) = expiry else {
            return Ok(Step::Idle { until_ms: None });
        };
        let decide_at = expiry - DECIDE_BEFORE_EXPIRY_MS;
        if now < decide_at {
            return Ok(Step::Idle {
                until_ms: Some(decide_at),
            });
        }
        let view = self.view(session);
        let d = decide(self.policy, &view, event, now);
        if d.action != Action::Ping {
            return Ok(match event {
                Event::Expiring => {
                    // The tail goes; the head's own decision comes next.
                    self.persona.let_expire = true;
                    Step::Idle {
                        until_ms: Some(now),
                    }
                }
                _ => {
                    self.persona.head_let_expire = true;
                    Step::Idle { until_ms: None }
                }
            });
        }
        let sent = match event {
            Event::Expiring => self.persona.backend.ping().await,
            _ => self.persona.backend.ping_head().await,
        };
        let outcome = match sent {
            Ok(o) => o,
            Err(BackendError::Unsupported { .. }) => {
                self.persona.let_expire = true;
                self.persona.head_let_expire = true;
                return Ok(Step::Idle { until_ms: None });
            }
            Err(e) => return Err(e.into()),
        };
        let label = if event == Event::Expiring {
            "ping"
        } else {
            "ping_head"
        };
        let mut row = self.ledger_row(
            &self.persona,
            &outcome,
            now,
            &format!("{label}:{:?}", d.reason),
            "warm",
            false,
        );
        self.persona.attach_events(&mut row);
        self.host
            .store
            .append_ledger(&self.mind.id, token, &[row])
            .await?;
        let cost = self.price.cost(&outcome.usage);
        let s = &mut self.persona;
        if event == Event::Expiring {
            s.gap_pings += 1;
            s.gap_ping_spend += cost;
            s.warm_until_ms = Some(now + self.mind.tail_ttl.millis());
        } else {
            s.gap_head_ping_spend += cost;
        }
        s.head_warm_until_ms = Some(now + self.mind.head_ttl.millis());
        Ok(Step::Ping)
    }
}
