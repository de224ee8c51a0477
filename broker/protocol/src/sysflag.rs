//! SYSFLAG bits of a message record and PULL request flags (docs/protocol.md §4.4).
//! Kept apart from the record codec because the broker's send, pull and transaction paths
//! test these bits without touching records.

/// Body is compressed.
pub const COMPRESSED: i32 = 0x1;
/// Topic is of MULTI_TAG type.
pub const MULTI_TAGS: i32 = 0x2;
/// Mask of the transaction type bits.
pub const TRANSACTION_TYPE_MASK: i32 = 0xC;
/// Not a transactional message.
pub const TRANSACTION_NOT_TYPE: i32 = 0x0;
/// Half (prepared) message.
pub const TRANSACTION_PREPARED_TYPE: i32 = 0x4;
/// Committed transactional message.
pub const TRANSACTION_COMMIT_TYPE: i32 = 0x8;
/// Rolled-back transactional message.
pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0xC;
/// Born host is IPv6.
pub const BORNHOST_V6: i32 = 0x10;
/// Store host is IPv6.
pub const STOREHOST_V6: i32 = 0x20;
/// Auto-batch: the body wraps several messages.
pub const NEED_UNWRAP: i32 = 0x40;
/// Auto-batch: inner batch.
pub const INNER_BATCH: i32 = 0x80;
/// Mask of the compression type bits (0 means ZLIB for old clients).
pub const COMPRESSION_TYPE_MASK: i32 = 0x700;

/// The transaction type bits of a SYSFLAG value.
pub fn transaction_type(sys_flag: i32) -> i32 {
    sys_flag & TRANSACTION_TYPE_MASK
}

/// True for records that consumers may see: normal and committed transactional messages.
/// Prepared and rolled-back records are never dispatched to a ConsumeQueue.
pub fn is_consumable(sys_flag: i32) -> bool {
    matches!(
        transaction_type(sys_flag),
        TRANSACTION_NOT_TYPE | TRANSACTION_COMMIT_TYPE
    )
}
