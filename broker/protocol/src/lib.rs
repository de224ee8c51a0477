//! `conveyor-protocol`: Apache RocketMQ's remoting protocol as data, with no IO.
//!
//! - [`message`]: the stored/pulled message record, properties, message ids, tag hash codes.
//! - [`naming`]: topic name rules.
//! - [`sysflag`]: SYSFLAG bits.
//! - [`time`]: wall-clock ms and UTC civil dates.
//! - [`uniq_id`]: UNIQ_KEY message ids.
//! - [`code`]: request/response codes, language codes, version ordinals, serialize types.
//! - [`command`]: `RemotingCommand`, the logical content of a frame, with typed header access.
//! - [`frame`]: the length-prefixed frame and its JSON / ROCKETMQ binary headers.
//! - [`batch`]: the SEND_BATCH_MESSAGE body.
//! - [`route`]: JSON bodies for routes, registration, heartbeats, locks and consumer lists.
//! - [`recall`]: recall handles of timer messages.
//! - [`json`]: the compact, ASCII-escaped JSON dialect RocketMQ peers expect.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod batch;
pub mod code;
pub mod command;
pub mod frame;
pub mod header;
pub mod json;
pub mod message;
pub mod naming;
pub mod properties;
pub mod recall;
pub mod route;
pub mod sysflag;
pub mod time;
pub mod uniq_id;
