//! A 5.x SDK's requests (`apache.rocketmq.v2`) for the gRPC tests, sent with the generated
//! client: what the SDKs send for receive, ack and termination, with the client id header.

use std::time::Duration;

use conveyor_grpc_api::tonic::{self, metadata::MetadataValue, Request};
use conveyor_grpc_api::v2::{
    self as pb, messaging_service_client::MessagingServiceClient, receive_message_response,
};

use super::TestServer;

/// A 5.x client: its id goes with every request, as the SDKs send it.
pub struct Client {
    /// The client id every request carries (`x-mq-client-id`).
    pub id: String,
    /// The generated stub.
    pub rpc: MessagingServiceClient<tonic::transport::Channel>,
}

impl Client {
    pub async fn connect(server: &TestServer, id: &str) -> Self {
        let addr = server.running.as_ref().unwrap().grpc_addr.expect("grpc");
        let rpc = MessagingServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect to the gRPC endpoint");
        Self {
            id: id.to_string(),
            rpc,
        }
    }

    pub fn request<T>(&self, body: T) -> Request<T> {
        let mut r = Request::new(body);
        r.metadata_mut().insert(
            "x-mq-client-id",
            MetadataValue::try_from(self.id.as_str()).unwrap(),
        );
        r.set_timeout(Duration::from_secs(30));
        r
    }

    /// One receive: `invisible` None with `auto_renew` as a PushConsumer sends it.
    pub async fn receive(
        &mut self,
        group: &str,
        topic: &str,
        invisible: Option<Duration>,
        poll: Duration,
    ) -> Vec<pb::Message> {
        let req = pb::ReceiveMessageRequest {
            group: Some(resource(group)),
            message_queue: Some(pb::MessageQueue {
                topic: Some(resource(topic)),
                id: -1,
                ..Default::default()
            }),
            filter_expression: Some(pb::FilterExpression {
                r#type: pb::FilterType::Tag as i32,
                expression: "*".into(),
            }),
            batch_size: 16,
            invisible_duration: invisible.map(pb_duration),
            auto_renew: invisible.is_none(),
            long_polling_timeout: Some(pb_duration(poll)),
            ..Default::default()
        };
        let mut stream = self
            .rpc
            .receive_message(self.request(req))
            .await
            .expect("receive")
            .into_inner();
        let mut out = Vec::new();
        while let Some(item) = stream.message().await.expect("receive stream") {
            if let Some(receive_message_response::Content::Message(m)) = item.content {
                out.push(m);
            }
        }
        out
    }

    /// Acknowledges with the handle the message came with; the entry's status code.
    pub async fn ack(&mut self, group: &str, topic: &str, m: &pb::Message) -> i32 {
        let sp = m.system_properties.as_ref().unwrap();
        let handle = sp.receipt_handle.clone().unwrap();
        self.ack_handle(group, topic, &sp.message_id, &handle).await
    }

    /// Acknowledges `message_id` with `handle`; the entry's status code.
    pub async fn ack_handle(
        &mut self,
        group: &str,
        topic: &str,
        message_id: &str,
        handle: &str,
    ) -> i32 {
        let req = pb::AckMessageRequest {
            group: Some(resource(group)),
            topic: Some(resource(topic)),
            entries: vec![pb::AckMessageEntry {
                message_id: message_id.to_string(),
                receipt_handle: handle.to_string(),
                ..Default::default()
            }],
        };
        let r = self
            .rpc
            .ack_message(self.request(req))
            .await
            .expect("ack")
            .into_inner();
        r.entries[0].status.as_ref().unwrap().code
    }

    pub async fn terminate(&mut self, group: &str) {
        let req = pb::NotifyClientTerminationRequest {
            group: Some(resource(group)),
        };
        self.rpc
            .notify_client_termination(self.request(req))
            .await
            .expect("terminate");
    }
}

pub fn resource(name: &str) -> pb::Resource {
    pb::Resource {
        name: name.into(),
        ..Default::default()
    }
}

pub fn pb_duration(d: Duration) -> conveyor_grpc_api::prost_types::Duration {
    conveyor_grpc_api::prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

pub fn key(m: &pb::Message) -> String {
    m.system_properties
        .as_ref()
        .map(|sp| sp.keys.join(","))
        .unwrap_or_default()
}
