//! `conveyor-protocol`: Apache RocketMQ's remoting protocol as data, with no IO.
//!
//! - [`message`]: the stored/pulled message record, properties, message ids, tag hash codes.
//! - [`sysflag`]: SYSFLAG bits.
#![forbid(unsafe_code)]

pub mod message;
pub mod sysflag;
