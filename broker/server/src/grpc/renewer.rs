//! Renewer: the loop that keeps push consumers' messages invisible while they work on them
//! (see [`super::renewal`] for the rules), and what a departing client's messages get.

use std::sync::Arc;
use std::time::Duration;

use conveyor_protocol::time::now_ms;
use tokio_util::sync::CancellationToken;

use super::handles;
use super::renewal::{renew_ahead_ms, RELEASE_INVISIBLE_MS};
use super::session::{Session, Sessions};
use super::upstream::Upstream;

/// How often the loop looks for renewals due.
const TICK: Duration = Duration::from_secs(1);

/// Renews every session's due messages until `shutdown`.
/// Each renewal makes a message invisible for `invisible_ms`.
pub async fn run(
    sessions: Arc<Sessions>,
    upstream: Arc<Upstream>,
    invisible_ms: i64,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        for session in sessions.all() {
            renew(&session, &upstream, invisible_ms).await;
        }
    }
}

/// Renews one session's due messages. The session's set stays locked meanwhile, so an
/// answer of the client waits for the renewal and then goes out with the new handle.
async fn renew(session: &Session, upstream: &Upstream, invisible_ms: i64) {
    let mut renewals = session.renewals().lock().await;
    for (key, r) in renewals.due(now_ms(), renew_ahead_ms(invisible_ms)) {
        let (group, _) = &key;
        match handles::change_invisible(
            upstream,
            &session.conn,
            group,
            &r.topic,
            &r.handle,
            invisible_ms,
        )
        .await
        {
            Ok((handle, revive_at)) => renewals.renewed(&key, handle, revive_at),
            Err(st) => {
                tracing::debug!(
                    client = session.client_id,
                    group,
                    message = key.1,
                    error = st.message,
                    "renewing a push consumer's message failed; it becomes visible when its time ends"
                );
                renewals.forget(&key);
            }
        }
    }
}

/// Gives a departing client's messages back to their groups after [`RELEASE_INVISIBLE_MS`].
pub async fn release(session: &Session, upstream: &Upstream) {
    let taken = session.renewals().lock().await.drain();
    for ((group, message), r) in taken {
        if let Err(st) = handles::change_invisible(
            upstream,
            &session.conn,
            &group,
            &r.topic,
            &r.handle,
            RELEASE_INVISIBLE_MS,
        )
        .await
        {
            tracing::debug!(
                client = session.client_id,
                group,
                message,
                error = st.message,
                "releasing a departed push consumer's message failed; it becomes visible when its time ends"
            );
        }
    }
}
