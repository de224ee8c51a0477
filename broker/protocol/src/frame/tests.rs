use super::*;
use crate::code::{request_code, response_code, version};
use proptest::prelude::*;

fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Builds a frame by hand per §2: length, type/hdrLen word, header, body.
fn frame(type_byte: u8, header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&be32((4 + header.len() + body.len()) as u32));
    f.extend_from_slice(&be32(((type_byte as u32) << 24) | header.len() as u32));
    f.extend_from_slice(header);
    f.extend_from_slice(body);
    f
}

fn send_v2() -> RemotingCommand {
    RemotingCommand::request(request_code::SEND_MESSAGE_V2, ExtFields::new())
        .with_opaque(42)
        .with_ext("a", "PG")
        .with_ext("i", "UNIQ_KEY\u{1}AC11\u{2}")
        .with_body(&b"hello"[..])
}

#[test]
fn json_frame_byte_exact() {
    let header = br#"{"code":310,"extFields":{"a":"PG","i":"UNIQ_KEY\u0001AC11\u0002"},"flag":0,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":479}"#;
    let expected = frame(0, header, b"hello");
    let cmd = send_v2();
    assert_eq!(encode_frame(&cmd).unwrap().to_vec(), expected);
    // length = 4 + hdrLen + bodyLen, type byte 0 in the high byte of the second int.
    assert_eq!(&expected[..4], &be32(4 + header.len() as u32 + 5));
    assert_eq!(expected[4], 0);
    let (back, used) = FrameCodec::default()
        .decode_slice(&expected)
        .unwrap()
        .unwrap();
    assert_eq!(used, expected.len());
    assert_eq!(back, cmd);
}

#[test]
fn json_response_with_remark() {
    let req = send_v2();
    let resp = RemotingCommand::response_to(&req, response_code::TOPIC_NOT_EXIST)
        .with_remark("topic[é] not exist");
    let header = br#"{"code":17,"extFields":{},"flag":1,"language":"JAVA","opaque":42,"remark":"topic[\u00e9] not exist","serializeTypeCurrentRPC":"JSON","version":479}"#;
    assert_eq!(encode_frame(&resp).unwrap().to_vec(), frame(0, header, b""));
}

#[test]
fn binary_frame_byte_exact() {
    // code 11, language GO (9), version 317, opaque 7, flag 2, remark "err",
    // extFields {topic: "T"}, body "xyz" — laid out per §2.3.
    let mut header = Vec::new();
    header.extend_from_slice(&11i16.to_be_bytes());
    header.push(9);
    header.extend_from_slice(&317i16.to_be_bytes());
    header.extend_from_slice(&7i32.to_be_bytes());
    header.extend_from_slice(&2i32.to_be_bytes());
    header.extend_from_slice(&3i32.to_be_bytes());
    header.extend_from_slice(b"err");
    header.extend_from_slice(&12i32.to_be_bytes());
    header.extend_from_slice(&5i16.to_be_bytes());
    header.extend_from_slice(b"topic");
    header.extend_from_slice(&1i32.to_be_bytes());
    header.extend_from_slice(b"T");
    assert_eq!(header.len(), 21 + 3 + 12);
    let raw = frame(1, &header, b"xyz");
    assert_eq!(&raw[4..8], &[1, 0, 0, 36]);

    let cmd = FrameCodec::default().decode_slice(&raw).unwrap().unwrap().0;
    assert_eq!(cmd.code, request_code::PULL_MESSAGE);
    assert_eq!(cmd.language, LanguageCode::Go);
    assert_eq!(cmd.version, version::V4_5_2);
    assert_eq!(cmd.opaque, 7);
    assert!(cmd.is_oneway());
    assert_eq!(cmd.remark.as_deref(), Some("err"));
    assert_eq!(cmd.get_str("topic"), Ok("T"));
    assert_eq!(cmd.serialize_type, SerializeType::RocketMq);
    assert_eq!(&cmd.body[..], b"xyz");

    let mut out = BytesMut::new();
    FrameCodec::default()
        .encode_as(&cmd, SerializeType::RocketMq, &mut out)
        .unwrap();
    assert_eq!(out.to_vec(), raw);
}

#[test]
fn binary_empty_strings_are_absent() {
    let mut header = Vec::new();
    header.extend_from_slice(&10i16.to_be_bytes());
    header.push(0);
    header.extend_from_slice(&(-1i16).to_be_bytes());
    header.extend_from_slice(&0i32.to_be_bytes());
    header.extend_from_slice(&0i32.to_be_bytes());
    header.extend_from_slice(&0i32.to_be_bytes()); // no remark
    header.extend_from_slice(&7i32.to_be_bytes());
    header.extend_from_slice(&1i16.to_be_bytes());
    header.extend_from_slice(b"k");
    header.extend_from_slice(&0i32.to_be_bytes()); // empty value → absent
    let cmd = decode_rocketmq_header(&header).unwrap();
    assert_eq!(cmd.version, -1);
    assert_eq!(cmd.remark, None);
    assert!(cmd.ext_fields.is_empty());
}

#[test]
fn doc_example_java_header() {
    let header = br#"{"code":310,"extFields":{"a":"PG","b":"TopicTest","c":"TBW102","d":"4","e":"1","f":"0","g":"1717000000000",
 "h":"0","i":"UNIQ_KEY\u0001AC11000100\u0002WAIT\u0001true\u0002TAGS\u0001TagA\u0002","j":"0","k":"false",
 "m":"false","n":"broker-a"},"flag":0,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":479}"#;
    let cmd = decode_json_header(header).unwrap();
    assert_eq!(cmd.code, 310);
    assert_eq!(cmd.version, 479);
    assert_eq!(cmd.get_i64("g"), Ok(1_717_000_000_000));
    assert_eq!(cmd.get_bool("k"), Ok(false));
    assert_eq!(
        cmd.get_str("i"),
        Ok("UNIQ_KEY\u{1}AC11000100\u{2}WAIT\u{1}true\u{2}TAGS\u{1}TagA\u{2}")
    );
    assert_eq!(cmd.ext_fields.len(), 13);
}

#[test]
fn go_header_and_lenient_values() {
    let go = br#"{"code":105,"language":"GO","version":317,"opaque":1,"flag":0,"remark":"","extFields":{"topic":"T"}}"#;
    let cmd = decode_json_header(go).unwrap();
    assert_eq!(cmd.language, LanguageCode::Go);
    assert_eq!(cmd.remark, None);
    assert_eq!(cmd.get_str("topic"), Ok("T"));

    let lenient = br#"{"opaque":"9","code":"34","extFields":{"n":17,"b":true,"f":1.5,"s":"x","z":null},"newField":[1]}"#;
    let cmd = decode_json_header(lenient).unwrap();
    assert_eq!(cmd.code, 34);
    assert_eq!(cmd.opaque, 9);
    assert_eq!(cmd.language, LanguageCode::Java);
    assert_eq!(cmd.version, 0);
    assert_eq!(cmd.ext("n"), Some("17"));
    assert_eq!(cmd.ext("b"), Some("true"));
    assert_eq!(cmd.ext("f"), Some("1.5"));
    assert_eq!(cmd.ext("z"), None);

    let minimal = decode_json_header(br#"{"code":0,"language":12}"#).unwrap();
    assert!(minimal.ext_fields.is_empty());
    assert_eq!(minimal.language, LanguageCode::Rust);
    assert_eq!(
        decode_json_header(br#"{"code":0,"language":"KLINGON"}"#)
            .unwrap()
            .language,
        LanguageCode::Other
    );
}

#[test]
fn json_header_errors() {
    type Check = fn(&FrameError) -> bool;
    let cases: &[(&[u8], Check)] = &[
        (b"", |e| matches!(e, FrameError::Json(_))),
        (b"[1]", |e| matches!(e, FrameError::Json(_))),
        (b"{\"code\":1", |e| matches!(e, FrameError::Json(_))),
        (b"{}", |e| matches!(e, FrameError::MissingField("code"))),
        (br#"{"code":"abc"}"#, |e| {
            matches!(e, FrameError::InvalidField { field: "code", .. })
        }),
        (br#"{"code":4294967296}"#, |e| {
            matches!(e, FrameError::InvalidField { field: "code", .. })
        }),
        (br#"{"code":1,"opaque":1.5}"#, |e| {
            matches!(
                e,
                FrameError::InvalidField {
                    field: "opaque",
                    ..
                }
            )
        }),
        (br#"{"code":1,"remark":5}"#, |e| {
            matches!(
                e,
                FrameError::InvalidField {
                    field: "remark",
                    ..
                }
            )
        }),
        (br#"{"code":1,"extFields":[]}"#, |e| {
            matches!(
                e,
                FrameError::InvalidField {
                    field: "extFields",
                    ..
                }
            )
        }),
        (br#"{"code":1,"extFields":{"a":{}}}"#, |e| {
            matches!(
                e,
                FrameError::InvalidField {
                    field: "extFields",
                    ..
                }
            )
        }),
        (br#"{"code":1,"language":[]}"#, |e| {
            matches!(
                e,
                FrameError::InvalidField {
                    field: "language",
                    ..
                }
            )
        }),
        (b"{\"code\":1,\"remark\":\"\xff\"}", |e| {
            matches!(e, FrameError::Json(_))
        }),
    ];
    for (input, check) in cases {
        let err = decode_json_header(input).unwrap_err();
        assert!(
            check(&err),
            "{:?} -> {err:?}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn binary_header_errors() {
    let good = encode_rocketmq_header(
        &RemotingCommand::request(1, ExtFields::new())
            .with_remark("r")
            .with_ext("k", "v"),
    )
    .unwrap();
    for n in 0..good.len() {
        assert!(decode_rocketmq_header(&good[..n]).is_err(), "prefix {n}");
    }
    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(
        decode_rocketmq_header(&trailing),
        Err(FrameError::TrailingBytes(1))
    );
    let mut neg = good.clone();
    neg[13..17].copy_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(
        decode_rocketmq_header(&neg),
        Err(FrameError::NegativeLength {
            field: "remark",
            len: -1
        })
    );
    let mut bad_utf8 = good.clone();
    bad_utf8[17] = 0xff;
    assert_eq!(
        decode_rocketmq_header(&bad_utf8),
        Err(FrameError::InvalidUtf8("remark"))
    );
    let pop = RemotingCommand::request(request_code::POP_MESSAGE, ExtFields::new());
    assert!(matches!(
        encode_rocketmq_header(&pop),
        Err(FrameError::NotEncodable(_))
    ));
}

#[test]
fn frame_errors() {
    let codec = FrameCodec::default();
    // length < 4
    assert_eq!(codec.decode_slice(&be32(3)), Err(FrameError::BadLength(3)));
    assert_eq!(
        codec.decode_slice(&be32(u32::MAX)),
        Err(FrameError::BadLength(-1))
    );
    // oversize frames are rejected from the length prefix alone
    assert_eq!(
        codec.decode_slice(&be32(16 * 1024 * 1024 - 3)),
        Err(FrameError::FrameTooLarge {
            size: 16 * 1024 * 1024 + 1,
            max: DEFAULT_MAX_FRAME_SIZE
        })
    );
    let small = FrameCodec::new(64);
    assert!(matches!(
        small.decode_slice(&be32(61)),
        Err(FrameError::FrameTooLarge { size: 65, max: 64 })
    ));
    assert_eq!(small.decode_slice(&be32(60)), Ok(None));
    // header longer than the frame
    let mut f = be32(6).to_vec();
    f.extend_from_slice(&be32(3));
    f.extend_from_slice(b"{}");
    assert_eq!(
        codec.decode_slice(&f),
        Err(FrameError::HeaderTooLong {
            header_len: 3,
            available: 2
        })
    );
    // unknown serialize type
    assert_eq!(
        codec.decode_slice(&frame(2, b"{}", b"")),
        Err(FrameError::UnknownSerializeType(2))
    );
    // encode limit
    let big = RemotingCommand::default().with_body(vec![0u8; 100]);
    let mut out = BytesMut::new();
    assert!(matches!(
        small.encode(&big, &mut out),
        Err(FrameError::FrameTooLarge { .. })
    ));
    assert!(out.is_empty());
}

#[test]
fn incremental_decoding() {
    let a = encode_frame(&send_v2()).unwrap();
    let b =
        encode_frame(&RemotingCommand::response_to(&send_v2(), 0).with_ext("msgId", "X")).unwrap();
    let mut all = a.to_vec();
    all.extend_from_slice(&b);
    let codec = FrameCodec::default();
    for n in 0..a.len() {
        assert_eq!(codec.decode_slice(&all[..n]), Ok(None), "prefix {n}");
        let mut buf = BytesMut::from(&all[..n]);
        assert_eq!(codec.decode(&mut buf), Ok(None));
        assert_eq!(buf.len(), n, "incomplete input is not consumed");
    }
    let mut buf = BytesMut::from(&all[..]);
    let first = codec.decode(&mut buf).unwrap().unwrap();
    assert_eq!(first, send_v2());
    let second = codec.decode(&mut buf).unwrap().unwrap();
    assert!(second.is_response());
    assert_eq!(second.ext("msgId"), Some("X"));
    assert!(buf.is_empty());
    assert_eq!(codec.decode(&mut buf), Ok(None));
}

#[test]
fn encode_prefix_plus_body_equals_frame() {
    let cmd = send_v2();
    let mut joined = FrameCodec::default().encode_prefix(&cmd).unwrap();
    joined.extend_from_slice(&cmd.body);
    assert_eq!(joined, encode_frame(&cmd).unwrap().to_vec());
}

fn language() -> impl Strategy<Value = LanguageCode> {
    (0u8..14).prop_map(LanguageCode::from_byte)
}

fn command(
    code: impl Strategy<Value = i32>,
    version: impl Strategy<Value = i32>,
    value: &'static str,
) -> impl Strategy<Value = RemotingCommand> {
    (
        code,
        language(),
        version,
        any::<i32>(),
        any::<i32>(),
        proptest::option::of("\\PC{1,20}"),
        proptest::collection::btree_map("\\PC{1,10}", value, 0..6),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(
            |(code, language, version, opaque, flag, remark, ext_fields, body)| RemotingCommand {
                code,
                language,
                version,
                opaque,
                flag,
                remark,
                ext_fields,
                serialize_type: SerializeType::Json,
                body: Bytes::from(body),
            },
        )
}

proptest! {
    #[test]
    fn json_round_trip(cmd in command(any::<i32>(), any::<i32>(), "\\PC{0,10}|[\\x00-\\x1f\"\\\\]{0,4}")) {
        let bytes = encode_frame(&cmd).unwrap();
        let mut buf = BytesMut::from(&bytes[..]);
        let back = FrameCodec::default().decode(&mut buf).unwrap().unwrap();
        prop_assert!(buf.is_empty());
        prop_assert!(bytes[8..].iter().take(bytes.len() - 8 - cmd.body.len()).all(u8::is_ascii));
        prop_assert_eq!(back, cmd);
    }

    #[test]
    fn binary_round_trip(cmd in command(
        (i16::MIN..=i16::MAX).prop_map(i32::from),
        (i16::MIN..=i16::MAX).prop_map(i32::from),
        "\\PC{1,10}",
    )) {
        let mut out = BytesMut::new();
        FrameCodec::default().encode_as(&cmd, SerializeType::RocketMq, &mut out).unwrap();
        let (back, used) = FrameCodec::default().decode_slice(&out).unwrap().unwrap();
        prop_assert_eq!(used, out.len());
        let mut expected = cmd;
        expected.serialize_type = SerializeType::RocketMq;
        prop_assert_eq!(back, expected);
    }

    #[test]
    fn arbitrary_frames_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..128)) {
        let codec = FrameCodec::new(1024);
        let _ = codec.decode_slice(&raw);
        let mut buf = BytesMut::from(&raw[..]);
        while let Ok(Some(_)) = codec.decode(&mut buf) {}
    }

    #[test]
    fn arbitrary_headers_never_panic(
        type_byte in 0u8..=2,
        header in proptest::collection::vec(any::<u8>(), 0..128),
        body in proptest::collection::vec(any::<u8>(), 0..8),
    ) {
        let raw = frame(type_byte, &header, &body);
        let _ = FrameCodec::default().decode_slice(&raw);
        let _ = decode_json_header(&header);
        let _ = decode_rocketmq_header(&header);
    }

    #[test]
    fn arbitrary_json_text_never_panics(text in "\\{(\"[a-zA-Z]{1,10}\":(-?[0-9]{1,12}|\"[^\"]{0,6}\"|true|null|\\{\\}|\\[\\]),?){0,6}\\}") {
        let _ = decode_json_header(text.as_bytes());
    }
}
