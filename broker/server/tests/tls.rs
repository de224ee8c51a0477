//! TLS on the client ports. gRPC: by default TLS and plaintext clients side by side (the 5.x
//! SDKs connect with TLS unless told otherwise, as Apache's proxy allows), HTTP/2 chosen by
//! ALPN; in enforcing mode plaintext refused; a certificate given as files served, and its
//! replacement served to new connections without a restart while open ones keep working.
//! Remoting (name server and broker): the same modes, a request answered over TLS.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{RawConn, Read, TestServer, DEADLINE};
use conveyor::tls::{CertSource, TlsConfig, TlsMode};
use conveyor_grpc_api::tonic::{self, metadata::MetadataValue, transport::Endpoint, Request};
use conveyor_grpc_api::v2::{self as pb, messaging_service_client::MessagingServiceClient, Code};
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::frame::{encode_frame, FrameCodec};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A certificate authority of the test and certificates it signs for `localhost`.
struct Ca {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    cert: rcgen::Certificate,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self { params, key, cert }
    }

    /// A leaf for `localhost` written as PEM to `dir/tls.crt` and `dir/tls.key`, through
    /// temporary files and renames (as the kubelet swaps a mounted Secret's files).
    fn issue_into(&self, dir: &Path) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let leaf = params.signed_by(&key, &issuer).unwrap();
        for (name, pem) in [("tls.crt", leaf.pem()), ("tls.key", key.serialize_pem())] {
            let tmp = dir.join(format!(".{name}.new"));
            std::fs::write(&tmp, pem).unwrap();
            std::fs::rename(&tmp, dir.join(name)).unwrap();
        }
        leaf.der().clone()
    }

    fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.der().clone()).unwrap();
        roots
    }
}

/// A rustls client that trusts `roots` (or, with `None`, anything, as the SDKs do) and asks
/// for HTTP/2.
fn client_config(roots: Option<rustls::RootCertStore>) -> Arc<rustls::ClientConfig> {
    let mut config = match roots {
        Some(roots) => rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
        None => conveyor_remoting::tls::unverified_client_config(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// A TLS handshake with the gRPC port: the server's certificate and the protocol ALPN chose.
async fn handshake(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<(CertificateDer<'static>, Option<Vec<u8>>)> {
    let tcp = TcpStream::connect(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    let (_, session) = tls.get_ref();
    let cert = session.peer_certificates().unwrap()[0].clone().into_owned();
    Ok((cert, session.alpn_protocol().map(<[u8]>::to_vec)))
}

/// A gRPC client over TLS (`config`) or plaintext (`None`).
async fn grpc_client(
    addr: SocketAddr,
    config: Option<Arc<rustls::ClientConfig>>,
) -> Result<MessagingServiceClient<tonic::transport::Channel>, tonic::transport::Error> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5));
    let channel = match config {
        None => endpoint.connect().await?,
        Some(config) => {
            endpoint
                .connect_with_connector(tower::service_fn(move |_| {
                    let config = config.clone();
                    async move {
                        let tcp = TcpStream::connect(addr).await?;
                        let tls = tokio_rustls::TlsConnector::from(config)
                            .connect(ServerName::try_from("localhost").unwrap(), tcp)
                            .await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
                    }
                }))
                .await?
        }
    };
    Ok(MessagingServiceClient::new(channel))
}

/// A QueryRoute of the default topic template: what every SDK does first.
async fn query_route(
    client: &mut MessagingServiceClient<tonic::transport::Channel>,
) -> Result<i32, tonic::Status> {
    let mut req = Request::new(pb::QueryRouteRequest {
        topic: Some(pb::Resource {
            name: "TBW102".into(),
            ..Default::default()
        }),
        endpoints: None,
    });
    req.metadata_mut()
        .insert("x-mq-client-id", MetadataValue::from_static("tls-client"));
    req.set_timeout(Duration::from_secs(10));
    let r = client.query_route(req).await?.into_inner();
    Ok(r.status.map_or(-1, |s| s.code))
}

fn grpc_addr(server: &TestServer) -> SocketAddr {
    server.running.as_ref().unwrap().grpc_addr.expect("grpc")
}

#[tokio::test]
async fn by_default_tls_and_plaintext_clients_share_the_port() {
    let server = TestServer::start().await;
    let addr = grpc_addr(&server);

    let (_, alpn) = handshake(addr, client_config(None))
        .await
        .expect("TLS handshake with the generated certificate");
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "ALPN must choose h2");

    let mut tls = grpc_client(addr, Some(client_config(None)))
        .await
        .expect("TLS channel");
    assert_eq!(query_route(&mut tls).await.unwrap(), Code::Ok as i32);
    let mut plain = grpc_client(addr, None).await.expect("plaintext channel");
    assert_eq!(query_route(&mut plain).await.unwrap(), Code::Ok as i32);
}

#[tokio::test]
async fn enforcing_mode_refuses_plaintext_and_serves_the_given_certificate_reloaded() {
    let certs = tempfile::tempdir().unwrap();
    let first_ca = Ca::new("first");
    let first = first_ca.issue_into(certs.path());
    let (cert, key) = (certs.path().join("tls.crt"), certs.path().join("tls.key"));
    let server = TestServer::start_with(move |c| {
        c.tls = TlsConfig {
            mode: TlsMode::Enforcing,
            cert: CertSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
        }
    })
    .await;
    let addr = grpc_addr(&server);

    // Plaintext: the connection is closed, no call gets through.
    let plain = match grpc_client(addr, None).await {
        Ok(mut c) => query_route(&mut c).await.err().map(|s| s.to_string()),
        Err(e) => Some(e.to_string()),
    };
    assert!(plain.is_some(), "a plaintext client was served");

    // TLS, verified against the test's CA: the given certificate.
    let (served, _) = handshake(addr, client_config(Some(first_ca.roots())))
        .await
        .expect("handshake verified against the first CA");
    assert_eq!(served, first);
    let mut open = grpc_client(addr, Some(client_config(Some(first_ca.roots()))))
        .await
        .expect("TLS channel");
    assert_eq!(query_route(&mut open).await.unwrap(), Code::Ok as i32);

    // Rotation to another CA's certificate: new connections get it, without a restart.
    let second_ca = Ca::new("second");
    let second = second_ca.issue_into(certs.path());
    let until = Instant::now() + DEADLINE;
    loop {
        let seen = handshake(addr, client_config(None))
            .await
            .expect("handshake")
            .0;
        if seen == second {
            break;
        }
        assert!(
            Instant::now() < until,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    handshake(addr, client_config(Some(second_ca.roots())))
        .await
        .expect("handshake verified against the second CA");
    // The connection opened before the rotation keeps working.
    assert_eq!(query_route(&mut open).await.unwrap(), Code::Ok as i32);
}

/// One remoting request over TLS to `addr` (as RocketMQ's clients with `tls.enable=true`);
/// the response.
async fn remoting_over_tls(
    addr: &str,
    config: Arc<rustls::ClientConfig>,
    cmd: RemotingCommand,
) -> std::io::Result<RemotingCommand> {
    let tcp = TcpStream::connect(addr).await?;
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    tls.write_all(&encode_frame(&cmd).unwrap()).await?;
    tls.flush().await?;
    let (mut buf, codec) = (bytes::BytesMut::new(), FrameCodec::default());
    loop {
        if let Some(r) = codec.decode(&mut buf).unwrap() {
            return Ok(r);
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(DEADLINE, tls.read(&mut chunk)).await??;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn route_request() -> RemotingCommand {
    RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC, Default::default())
        .with_ext("topic", "TBW102")
}

#[tokio::test]
async fn remoting_ports_answer_tls_and_plaintext_clients_by_default() {
    let server = TestServer::start().await;
    let running = server.running.as_ref().unwrap();
    let (ns, broker) = (
        running.namesrv_addr.unwrap().to_string(),
        running.broker_addr.unwrap().to_string(),
    );
    let r = remoting_over_tls(&ns, client_config(None), route_request())
        .await
        .expect("route over TLS from the name server");
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    let heartbeat = common::producer_heartbeat("tls-client", "tls-group");
    let r = remoting_over_tls(&broker, client_config(None), heartbeat)
        .await
        .expect("heartbeat over TLS to the broker");
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    let mut plain = RawConn::connect(&ns).await;
    assert_eq!(
        plain.request(route_request()).await.code,
        response_code::SUCCESS
    );
}

#[tokio::test]
async fn enforcing_remoting_ports_close_plaintext_connections() {
    let server = TestServer::start_with(|c| c.tls.mode = TlsMode::Enforcing).await;
    let ns = server
        .running
        .as_ref()
        .unwrap()
        .namesrv_addr
        .unwrap()
        .to_string();
    let mut plain = RawConn::connect(&ns).await;
    plain.send(&route_request()).await.expect("write");
    match plain.read(DEADLINE).await {
        Read::Closed => {}
        other => panic!("a plaintext client of an enforcing port got {other:?}"),
    }
    let r = remoting_over_tls(&ns, client_config(None), route_request())
        .await
        .expect("route over TLS");
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
}
