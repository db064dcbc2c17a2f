//! `xl_running_xacts`, the STANDBY rmgr's RUNNING_XACTS record (storage/standbydefs.h).

use crate::include::transam::TransactionId;

/// A decoded `xl_running_xacts`: what LogStandbySnapshot saw running.
///
/// `xids` holds `xcnt` top-level xids followed by `subxcnt` subtransaction xids, exactly
/// as in the record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunningXacts {
    /// Number of top-level xids at the front of `xids`.
    pub xcnt: u32,
    /// Number of subtransaction xids after them.
    pub subxcnt: u32,
    /// The subxid cache overflowed; subxids are missing.
    pub subxid_overflow: bool,
    /// `nextXid` when the record was assembled.
    pub next_xid: TransactionId,
    /// Oldest xid still running (not the oldest xmin).
    pub oldest_running_xid: TransactionId,
    /// Newest completed xid.
    pub latest_completed_xid: TransactionId,
    /// Top-level xids, then subxids.
    pub xids: Vec<TransactionId>,
}

/// Why a record's main data is not a well-formed `xl_running_xacts`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RunningXactsError {
    /// Fewer bytes than the fixed part (24).
    Short { len: usize },
    /// `xcnt` or `subxcnt` negative, or the xid array longer than the data.
    BadCounts { xcnt: i32, subxcnt: i32, len: usize },
}

impl core::fmt::Display for RunningXactsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RunningXactsError::Short { len } => {
                write!(
                    f,
                    "running xacts record is {len} bytes, fewer than the 24-byte header"
                )
            }
            RunningXactsError::BadCounts { xcnt, subxcnt, len } => write!(
                f,
                "running xacts record claims {xcnt} xids and {subxcnt} subxids but has {len} bytes"
            ),
        }
    }
}

/// Size of the fixed part (`MinSizeOfXactRunningXacts`).
pub const MIN_SIZE_OF_RUNNING_XACTS: usize = 24;

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

impl RunningXacts {
    /// A record whose running transactions are the top-level `xids` (no subtransactions,
    /// not overflowed), with `oldestRunningXid` and `nextXid` as given and
    /// `latestCompletedXid` just before `nextXid`: the shape LogStandbySnapshot logs when
    /// no subtransaction runs.
    pub fn new(
        oldest_running_xid: TransactionId,
        next_xid: TransactionId,
        xids: &[TransactionId],
    ) -> Self {
        RunningXacts {
            xcnt: xids.len() as u32,
            subxcnt: 0,
            subxid_overflow: false,
            next_xid,
            oldest_running_xid,
            latest_completed_xid: next_xid.wrapping_sub(1),
            xids: xids.to_vec(),
        }
    }

    /// Decodes the record's main data (little-endian, the server's native layout on the
    /// platforms we build for). Never panics; bounds are checked before every read.
    pub fn parse(data: &[u8]) -> Result<Self, RunningXactsError> {
        if data.len() < MIN_SIZE_OF_RUNNING_XACTS {
            return Err(RunningXactsError::Short { len: data.len() });
        }
        let xcnt = u32_at(data, 0) as i32;
        let subxcnt = u32_at(data, 4) as i32;
        let bad = RunningXactsError::BadCounts {
            xcnt,
            subxcnt,
            len: data.len(),
        };
        if xcnt < 0 || subxcnt < 0 {
            return Err(bad);
        }
        let n = xcnt as usize + subxcnt as usize;
        let need = n
            .checked_mul(4)
            .and_then(|x| x.checked_add(MIN_SIZE_OF_RUNNING_XACTS));
        match need {
            Some(need) if need <= data.len() => {}
            _ => return Err(bad),
        }
        let xids = (0..n)
            .map(|i| u32_at(data, MIN_SIZE_OF_RUNNING_XACTS + 4 * i))
            .collect();
        Ok(RunningXacts {
            xcnt: xcnt as u32,
            subxcnt: subxcnt as u32,
            subxid_overflow: data[8] != 0,
            next_xid: u32_at(data, 12),
            oldest_running_xid: u32_at(data, 16),
            latest_completed_xid: u32_at(data, 20),
            xids,
        })
    }

    /// The top-level xids (the first `xcnt`).
    pub fn top_xids(&self) -> &[TransactionId] {
        &self.xids[..(self.xcnt as usize).min(self.xids.len())]
    }

    /// Encodes back to main data; used by tests and fuzzing.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MIN_SIZE_OF_RUNNING_XACTS + 4 * self.xids.len());
        out.extend_from_slice(&self.xcnt.to_le_bytes());
        out.extend_from_slice(&self.subxcnt.to_le_bytes());
        out.extend_from_slice(&[self.subxid_overflow as u8, 0, 0, 0]);
        out.extend_from_slice(&self.next_xid.to_le_bytes());
        out.extend_from_slice(&self.oldest_running_xid.to_le_bytes());
        out.extend_from_slice(&self.latest_completed_xid.to_le_bytes());
        for x in &self.xids {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RunningXacts {
        RunningXacts {
            xcnt: 2,
            subxcnt: 1,
            subxid_overflow: false,
            next_xid: 756,
            oldest_running_xid: 754,
            latest_completed_xid: 753,
            xids: vec![754, 755, 760],
        }
    }

    #[test]
    fn roundtrip() {
        let r = sample();
        assert_eq!(RunningXacts::parse(&r.encode()).unwrap(), r);
        assert_eq!(r.top_xids(), &[754, 755]);
    }

    #[test]
    fn rejects_truncated_and_lying_counts() {
        let bytes = sample().encode();
        assert!(matches!(
            RunningXacts::parse(&bytes[..10]),
            Err(RunningXactsError::Short { .. })
        ));
        assert!(RunningXacts::parse(&bytes[..bytes.len() - 1]).is_err());
        let mut neg = bytes.clone();
        neg[0..4].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(RunningXacts::parse(&neg).is_err());
        let mut huge = bytes;
        huge[0..4].copy_from_slice(&i32::MAX.to_le_bytes());
        assert!(RunningXacts::parse(&huge).is_err());
    }
}
