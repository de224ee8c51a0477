//! Transport tests against a tiny in-test server speaking frames through `FrameCodec`.

use super::*;
use conveyor_protocol::code::request_code;
use conveyor_protocol::command::ExtFields;
use tokio::net::TcpListener;

const ECHO: i32 = 1000;
const SILENT: i32 = 1001;
const PUSH: i32 = 1002;
const HANG_UP: i32 = 1003;
const NOTE: i32 = 1004;

/// What the mock server saw.
#[derive(Default)]
struct Seen {
    requests: Vec<RemotingCommand>,
    connections: usize,
}

/// Serves every accepted connection:
/// - ECHO: answers after `delay_ms` with `echo` = request's `x` (answers may overtake);
/// - SILENT: never answers;
/// - PUSH: sends NOTIFY_CONSUMER_IDS_CHANGED (oneway) and GET_CONSUMER_RUNNING_INFO (two-way)
///   to the client, waits for the latter's answer, then answers with `reply_code`;
/// - HANG_UP: closes the connection;
/// - anything else: recorded only.
async fn mock_server() -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            seen2.lock().unwrap().connections += 1;
            tokio::spawn(serve(sock, seen2.clone()));
        }
    });
    (addr, seen)
}

async fn serve(sock: TcpStream, seen: Arc<Mutex<Seen>>) {
    let (mut sink, mut stream) = Framed::new(sock, RemotingCodec::default()).split();
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<RemotingCommand>();
    let writer = tokio::spawn(async move {
        while let Some(cmd) = out_rx.recv().await {
            if sink.send(cmd).await.is_err() {
                return;
            }
        }
    });
    let mut push_waiter: Option<(i32, RemotingCommand)> = None; // (server opaque, original request)
    while let Some(Ok(cmd)) = stream.next().await {
        if cmd.is_response() {
            if let Some((op, req)) = push_waiter.take() {
                assert_eq!(cmd.opaque, op, "client answered with the server's opaque");
                let resp = RemotingCommand::response_to(&req, 0).with_ext("reply_code", cmd.code);
                let _ = out_tx.send(resp);
            }
            continue;
        }
        seen.lock().unwrap().requests.push(cmd.clone());
        match cmd.code {
            ECHO => {
                let delay = cmd.get_i64_opt("delay_ms").unwrap().unwrap_or(0);
                let resp = RemotingCommand::response_to(&cmd, 0)
                    .with_ext("echo", cmd.ext("x").unwrap_or(""));
                let tx = out_tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(delay as u64)).await;
                    let _ = tx.send(resp);
                });
            }
            SILENT | NOTE => {}
            PUSH => {
                let mut notify = RemotingCommand::request(
                    request_code::NOTIFY_CONSUMER_IDS_CHANGED,
                    ExtFields::new(),
                )
                .with_ext("consumerGroup", "CG")
                .with_opaque(7);
                notify.mark_oneway();
                let _ = out_tx.send(notify);
                let info = RemotingCommand::request(
                    request_code::GET_CONSUMER_RUNNING_INFO,
                    ExtFields::new(),
                )
                .with_opaque(8);
                push_waiter = Some((8, cmd));
                let _ = out_tx.send(info);
            }
            HANG_UP => break,
            _ => {}
        }
    }
    writer.abort();
}

fn echo(x: &str, delay_ms: u64) -> RemotingCommand {
    RemotingCommand::request(ECHO, ExtFields::new())
        .with_ext("x", x)
        .with_ext("delay_ms", delay_ms)
}

#[tokio::test]
async fn responses_are_matched_by_opaque() {
    let (addr, seen) = mock_server().await;
    let client = RemotingClient::default();
    // Later requests are answered first; each caller must still get its own response.
    let calls = (0..5u64).map(|i| {
        let client = client.clone();
        let addr = addr.clone();
        async move {
            let resp = client
                .invoke(&addr, echo(&format!("req{i}"), (5 - i) * 40))
                .await
                .unwrap();
            (i, resp)
        }
    });
    let results = futures_util::future::join_all(calls).await;
    for (i, resp) in results {
        assert!(resp.is_response());
        assert_eq!(resp.ext("echo"), Some(format!("req{i}").as_str()));
    }
    let s = seen.lock().unwrap();
    assert_eq!(s.connections, 1, "one pooled connection per address");
    let mut opaques: Vec<i32> = s.requests.iter().map(|r| r.opaque).collect();
    opaques.sort();
    opaques.dedup();
    assert_eq!(opaques.len(), 5, "distinct opaques");
    assert!(client.local_ip().is_some());
}

#[tokio::test]
async fn timeout_then_connection_still_usable() {
    let (addr, _seen) = mock_server().await;
    let client = RemotingClient::default();
    let req = RemotingCommand::request(SILENT, ExtFields::new());
    let err = client
        .invoke_timeout(&addr, req, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemotingError::Timeout { code: SILENT, .. }),
        "{err:?}"
    );
    assert!(err.is_transport());
    // A response arriving after its caller gave up is dropped without harm.
    let err = client
        .invoke_timeout(&addr, echo("late", 300), Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(err, RemotingError::Timeout { .. }));
    let resp = client.invoke(&addr, echo("ok", 0)).await.unwrap();
    assert_eq!(resp.ext("echo"), Some("ok"));
    tokio::time::sleep(Duration::from_millis(350)).await;
    let resp = client.invoke(&addr, echo("after", 0)).await.unwrap();
    assert_eq!(resp.ext("echo"), Some("after"));
}

#[tokio::test]
async fn server_requests_reach_the_hook() {
    let (addr, _seen) = mock_server().await;
    let client = RemotingClient::default();
    let (handler, mut rx) = channel_handler();
    client.set_server_request_handler(handler);
    let resp = client
        .invoke(&addr, RemotingCommand::request(PUSH, ExtFields::new()))
        .await
        .unwrap();
    // The two-way server request was answered with REQUEST_CODE_NOT_SUPPORTED.
    assert_eq!(resp.ext("reply_code"), Some("3"));
    let first = rx.recv().await.unwrap();
    assert_eq!(first.addr, addr);
    assert_eq!(
        first.command.code,
        request_code::NOTIFY_CONSUMER_IDS_CHANGED
    );
    assert_eq!(first.command.ext("consumerGroup"), Some("CG"));
    assert!(first.command.is_oneway());
    let second = rx.recv().await.unwrap();
    assert_eq!(second.command.code, request_code::GET_CONSUMER_RUNNING_INFO);

    // A callback can answer two-way requests itself.
    let answering: ServerRequestHandler = Arc::new(|req: ServerRequest| {
        (req.command.code == request_code::GET_CONSUMER_RUNNING_INFO)
            .then(|| RemotingCommand::response(0, None))
    });
    client.set_server_request_handler(answering);
    let resp = client
        .invoke(&addr, RemotingCommand::request(PUSH, ExtFields::new()))
        .await
        .unwrap();
    assert_eq!(resp.ext("reply_code"), Some("0"));
}

#[tokio::test]
async fn reconnects_after_the_peer_hangs_up() {
    let (addr, seen) = mock_server().await;
    let client = RemotingClient::default();
    client.invoke(&addr, echo("a", 0)).await.unwrap();
    let err = client
        .invoke(&addr, RemotingCommand::request(HANG_UP, ExtFields::new()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemotingError::ConnectionClosed { .. }),
        "{err:?}"
    );
    let resp = client.invoke(&addr, echo("b", 0)).await.unwrap();
    assert_eq!(resp.ext("echo"), Some("b"));
    assert_eq!(seen.lock().unwrap().connections, 2);
}

#[tokio::test]
async fn oneway_sets_the_flag_and_gets_no_answer() {
    let (addr, seen) = mock_server().await;
    let client = RemotingClient::default();
    client
        .invoke_oneway(
            &addr,
            RemotingCommand::request(NOTE, ExtFields::new()).with_ext("k", "v"),
        )
        .await
        .unwrap();
    // Ordering on one connection: once the echo is answered, the note has arrived.
    client.invoke(&addr, echo("x", 0)).await.unwrap();
    let s = seen.lock().unwrap();
    let note = s.requests.iter().find(|r| r.code == NOTE).unwrap();
    assert!(note.is_oneway());
    assert_eq!(note.ext("k"), Some("v"));
}

#[tokio::test]
async fn connect_failure_and_server_errors() {
    // A port with nothing listening.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let client = RemotingClient::default();
    let err = client.invoke(&addr, echo("x", 0)).await.unwrap_err();
    assert!(matches!(err, RemotingError::Connect { .. }), "{err:?}");

    let e = expect_success(RemotingCommand::response(17, Some("no topic".into()))).unwrap_err();
    assert_eq!(e.code(), Some(17));
    assert!(expect_success(RemotingCommand::response(0, None)).is_ok());
}

#[tokio::test]
async fn close_fails_waiters() {
    let (addr, _seen) = mock_server().await;
    let client = RemotingClient::default();
    let c2 = client.clone();
    let a2 = addr.clone();
    let waiting = tokio::spawn(async move {
        c2.invoke_timeout(
            &a2,
            RemotingCommand::request(SILENT, ExtFields::new()),
            Duration::from_secs(10),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    client.close();
    let err = waiting.await.unwrap().unwrap_err();
    assert!(
        matches!(err, RemotingError::ConnectionClosed { .. }),
        "{err:?}"
    );
    // And the client still works afterwards.
    let resp = client.invoke(&addr, echo("again", 0)).await.unwrap();
    assert_eq!(resp.ext("echo"), Some("again"));
}
