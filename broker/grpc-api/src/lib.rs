//! `conveyor-grpc-api`: the RocketMQ 5.x gRPC API, protobuf package `apache.rocketmq.v2`.
//!
//! The definitions in `proto/apache/rocketmq/v2/` are written from the public wire format of
//! apache/rocketmq-apis (messages, field numbers, enums and the `MessagingService` RPCs), so the
//! official rocketmq-clients SDKs can talk to Conveyor. The `Admin` service is not included.
//!
//! # Why the Rust code is generated and committed
//!
//! `src/generated/apache.rocketmq.v2.rs` is the output of `tonic-prost-build` (run over a
//! descriptor set compiled by `protox`). It is checked in rather than produced by a build
//! script so that building Conveyor needs neither `protoc` nor the code generators: this crate
//! has no `build.rs` and depends only on the runtime crates `prost`, `prost-types`, `tonic` and
//! `tonic-prost`. After editing a `.proto` file run `broker/grpc-api/regen.sh` and commit both.
//! Do not edit the generated file by hand.
//!
//! # Contents of [`v2`]
//!
//! - the messages and enums (`Message`, `SystemProperties`, `Settings`, `TelemetryCommand`, `Code`, ...);
//!   `google.protobuf.Duration`/`Timestamp` map to [`prost_types`];
//! - [`v2::messaging_service_server`]: the `MessagingService` trait and `MessagingServiceServer`;
//! - [`v2::messaging_service_client`]: `MessagingServiceClient`, used by tests.
#![forbid(unsafe_code)]

pub use prost;
pub use prost_types;
pub use tonic;

/// Package `apache.rocketmq.v2` (generated code; see the crate documentation).
pub mod v2 {
    // prost puts oneof message fields inline: `ReceiveMessageResponse` and `PullMessageResponse`
    // carry a whole `Message` next to a small `Status`.
    #![allow(clippy::large_enum_variant)]

    include!("generated/apache.rocketmq.v2.rs");
}

#[cfg(test)]
mod tests {
    use super::v2::*;
    use prost::Message as _;

    #[test]
    fn receipt_handle_is_field_12() {
        let props = SystemProperties {
            receipt_handle: Some("rh".to_owned()),
            ..Default::default()
        };
        let bytes = props.encode_to_vec();
        // tag = (12 << 3) | wire type 2 (length-delimited) = 0x62
        assert_eq!(bytes, [0x62, 0x02, b'r', b'h']);
        assert_eq!(SystemProperties::decode(bytes.as_slice()).unwrap(), props);
    }

    #[test]
    fn message_round_trips() {
        let msg = Message {
            topic: Some(Resource {
                resource_namespace: "ns".to_owned(),
                name: "TopicA".to_owned(),
            }),
            user_properties: [("k".to_owned(), "v".to_owned())].into_iter().collect(),
            system_properties: Some(SystemProperties {
                tag: Some("TagA".to_owned()),
                keys: vec!["key1".to_owned(), "key2".to_owned()],
                message_id: "01AABBCCDDEEFF00112233445566778899".to_owned(),
                message_type: MessageType::Fifo as i32,
                message_group: Some("g1".to_owned()),
                delivery_attempt: Some(1),
                born_timestamp: Some(prost_types::Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 5,
                }),
                invisible_duration: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
                lite_topic: Some("lite".to_owned()),
                priority: Some(3),
                ..Default::default()
            }),
            body: b"hello".to_vec(),
        };
        let bytes = msg.encode_to_vec();
        assert_eq!(Message::decode(bytes.as_slice()).unwrap(), msg);
    }

    #[test]
    fn telemetry_settings_round_trip() {
        let cmd = TelemetryCommand {
            status: Some(Status {
                code: Code::Ok as i32,
                message: "OK".to_owned(),
            }),
            command: Some(telemetry_command::Command::Settings(Settings {
                client_type: Some(ClientType::Producer as i32),
                backoff_policy: Some(RetryPolicy {
                    max_attempts: 3,
                    strategy: Some(retry_policy::Strategy::ExponentialBackoff(
                        ExponentialBackoff {
                            initial: Some(prost_types::Duration {
                                seconds: 0,
                                nanos: 10_000_000,
                            }),
                            max: Some(prost_types::Duration {
                                seconds: 1,
                                nanos: 0,
                            }),
                            multiplier: 2.0,
                        },
                    )),
                }),
                pub_sub: Some(settings::PubSub::Publishing(Publishing {
                    topics: vec![],
                    max_body_size: 4 * 1024 * 1024,
                    validate_message_type: true,
                })),
                ..Default::default()
            })),
        };
        let bytes = cmd.encode_to_vec();
        assert_eq!(TelemetryCommand::decode(bytes.as_slice()).unwrap(), cmd);
        assert_eq!(Code::try_from(40401).unwrap(), Code::MessageNotFound);
    }

    #[test]
    fn grpc_service_name() {
        assert_eq!(
            messaging_service_server::SERVICE_NAME,
            "apache.rocketmq.v2.MessagingService"
        );
    }
}
