//! replication/message.h: `xl_logical_message`, the main data of a LOGICALMSG
//! `XLOG_LOGICAL_MESSAGE` record, read as decode.c logicalmsg_decode reads it, with
//! the sizes checked against the data (the server trusts a CRC-valid record's sizes).

/// `SizeOfLogicalMessage` (`offsetof(xl_logical_message, message)`): dbId, transactional,
/// padding, prefix_size, message_size.
pub const SIZE_OF_LOGICAL_MESSAGE: usize = 24;

/// A logical decoding message, borrowing the record's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogicalMessage<'a> {
    /// `dbId`: the database it was emitted in.
    pub db_id: u32,
    pub transactional: bool,
    /// The prefix up to its NUL (LogLogicalMessage writes `strlen(prefix) + 1` bytes).
    pub prefix: &'a [u8],
    /// The message payload (`message_size` bytes after the prefix).
    pub content: &'a [u8],
}

/// Why a record's main data is not a well-formed `xl_logical_message`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LogicalMessageError {
    /// Fewer bytes than the fixed part.
    Short { len: usize },
    /// prefix_size + message_size reach past the data.
    BadSizes {
        prefix_size: u64,
        message_size: u64,
        len: usize,
    },
    /// The prefix has no terminating NUL inside its prefix_size bytes.
    PrefixNotTerminated { prefix_size: u64 },
}

impl core::fmt::Display for LogicalMessageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LogicalMessageError::Short { len } => write!(
                f,
                "logical message record is {len} bytes, fewer than the {SIZE_OF_LOGICAL_MESSAGE}-byte header"
            ),
            LogicalMessageError::BadSizes {
                prefix_size,
                message_size,
                len,
            } => write!(
                f,
                "logical message claims a {prefix_size}-byte prefix and a {message_size}-byte message but the record has {len} bytes"
            ),
            LogicalMessageError::PrefixNotTerminated { prefix_size } => write!(
                f,
                "logical message prefix of {prefix_size} bytes is not NUL-terminated"
            ),
        }
    }
}

impl<'a> LogicalMessage<'a> {
    /// Reads the main data (native byte order) the way decode.c logicalmsg_decode does:
    /// `dbId`, `transactional`, the NUL-terminated prefix at `message`, the payload
    /// `prefix_size` bytes further. Never panics and allocates nothing.
    ///
    /// Errors: [`LogicalMessageError`] when a size points past the data or the prefix
    /// is not terminated.
    pub fn parse(d: &'a [u8]) -> Result<Self, LogicalMessageError> {
        if d.len() < SIZE_OF_LOGICAL_MESSAGE {
            return Err(LogicalMessageError::Short { len: d.len() });
        }
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&d[o..o + 8]);
            u64::from_ne_bytes(b)
        };
        let (prefix_size, message_size) = (u64_at(8), u64_at(16));
        let bad = LogicalMessageError::BadSizes {
            prefix_size,
            message_size,
            len: d.len(),
        };
        let body = &d[SIZE_OF_LOGICAL_MESSAGE..];
        let end = prefix_size
            .checked_add(message_size)
            .filter(|e| *e <= body.len() as u64)
            .ok_or(bad)?;
        let (prefix, content) = body[..end as usize].split_at(prefix_size as usize);
        let nul = prefix
            .iter()
            .position(|c| *c == 0)
            .ok_or(LogicalMessageError::PrefixNotTerminated { prefix_size })?;
        Ok(LogicalMessage {
            db_id: u32::from_ne_bytes([d[0], d[1], d[2], d[3]]),
            transactional: d[4] != 0,
            prefix: &prefix[..nul],
            content,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(db: u32, tx: bool, prefix: &[u8], msg: &[u8]) -> Vec<u8> {
        let mut d = db.to_ne_bytes().to_vec();
        d.extend([tx as u8, 0, 0, 0]);
        d.extend((prefix.len() as u64).to_ne_bytes());
        d.extend((msg.len() as u64).to_ne_bytes());
        d.extend(prefix);
        d.extend(msg);
        d
    }

    #[test]
    fn reads_and_refuses() {
        let d = record(5, true, b"pfx\0", b"hello");
        let m = LogicalMessage::parse(&d).unwrap();
        assert_eq!(
            (m.db_id, m.transactional, m.prefix, m.content),
            (5, true, &b"pfx"[..], &b"hello"[..])
        );
        for cut in 0..d.len() {
            assert!(LogicalMessage::parse(&d[..cut]).is_err(), "cut {cut}");
        }
        assert!(matches!(
            LogicalMessage::parse(&record(5, false, b"pfx", b"")),
            Err(LogicalMessageError::PrefixNotTerminated { prefix_size: 3 })
        ));
        let mut huge = d.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(matches!(
            LogicalMessage::parse(&huge),
            Err(LogicalMessageError::BadSizes { .. })
        ));
    }
}
