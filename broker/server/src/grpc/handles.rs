//! Receipt handles as the gRPC endpoint hands them out, and the remoting requests that answer
//! for a received message (ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME). A gRPC handle is the
//! broker's Pop handle plus the record's commit-log offset, which dead-lettering needs.

use conveyor_grpc_api::v2::{Code, Status};
use conveyor_protocol::code::request_code as rc;
use conveyor_protocol::command::RemotingCommand;

use super::convert::{checked, status};
use super::upstream::Upstream;
use crate::broker::pop::handle::ReceiptHandle;
use crate::broker::pop::pop_retry_topic;
use crate::remoting::Connection;

/// Time a unary call may take upstream.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A receipt handle as the gRPC endpoint hands it out.
pub fn grpc_handle(handle: &str, commit_log_offset: i64) -> String {
    format!("{handle} {commit_log_offset}")
}

/// The broker's handle and the commit-log offset of a gRPC receipt handle.
pub fn parse_handle(text: &str) -> Result<(ReceiptHandle, Option<i64>), Status> {
    let h = ReceiptHandle::parse(text, None)
        .map_err(|e| status(Code::InvalidReceiptHandle, e.to_string()))?;
    let phys = text.split(' ').nth(8).and_then(|v| v.parse().ok());
    Ok((h, phys))
}

/// The topic a handle's message is acknowledged on at the broker.
pub fn ack_topic(group: &str, topic: &str, h: &ReceiptHandle) -> String {
    if h.retry {
        pop_retry_topic(group, topic)
    } else {
        topic.to_string()
    }
}

/// The remoting request `code` (ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME) for a handle.
pub fn handle_request(code: i32, group: &str, topic: &str, h: &ReceiptHandle) -> RemotingCommand {
    RemotingCommand::request(code, Default::default())
        .with_ext("consumerGroup", group)
        .with_ext("topic", ack_topic(group, topic, h))
        .with_ext("queueId", h.queue_id)
        .with_ext("offset", h.offset)
        .with_ext("extraInfo", h.to_string())
        .with_ext("bname", h.broker_name.as_str())
}

/// Acknowledges the message of gRPC handle `handle`.
pub async fn ack(
    upstream: &Upstream,
    conn: &Connection,
    group: &str,
    topic: &str,
    handle: &str,
) -> Result<(), Status> {
    let (h, _) = parse_handle(handle)?;
    let r = upstream
        .call(
            &h.broker_name,
            conn,
            handle_request(rc::ACK_MESSAGE, group, topic, &h),
            CALL_TIMEOUT,
        )
        .await?;
    checked(&r)
}

/// Makes the message of gRPC handle `handle` invisible for `invisible_ms` from now; its new
/// gRPC handle and when it becomes visible.
pub async fn change_invisible(
    upstream: &Upstream,
    conn: &Connection,
    group: &str,
    topic: &str,
    handle: &str,
    invisible_ms: i64,
) -> Result<(String, i64), Status> {
    let (h, phys) = parse_handle(handle)?;
    let change = handle_request(rc::CHANGE_MESSAGE_INVISIBLETIME, group, topic, &h)
        .with_ext("invisibleTime", invisible_ms);
    let r = upstream
        .call(&h.broker_name, conn, change, CALL_TIMEOUT)
        .await?;
    checked(&r)?;
    let field = |k: &str| {
        r.get_str_opt(k)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let new = ReceiptHandle {
        start_offset: h.offset,
        pop_time: field("popTime"),
        invisible_ms: field("invisibleTime"),
        revive_qid: field("reviveQid") as i32,
        ..h
    };
    Ok((
        grpc_handle(&new.to_string(), phys.unwrap_or(0)),
        new.revive_time(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_carry_the_commit_log_offset_and_retry_topics_are_named_for_the_broker() {
        let h = "10 1700000000000 30000 3 1 broker-a 0 12";
        let (parsed, phys) = parse_handle(&grpc_handle(h, 4096)).unwrap();
        assert_eq!(phys, Some(4096));
        assert_eq!(parsed.to_string(), h);
        assert_eq!(ack_topic("G", "T", &parsed), "%RETRY%G_T");
        assert!(parse_handle("nonsense").is_err());
    }
}
