//! The tuple-cid shapes of the reorder buffer (replication/reorderbuffer.h, and
//! reorderbuffer.c's ReorderBufferTupleCidKey / ReorderBufferTupleCidEnt, which the
//! server keeps private to that file): the NEW_CID record, the tuple-cid hash and the
//! visibility rule all speak of them, so here they sit with the headers.

use crate::include::relfilelocator::RelFileLocator;
use crate::include::snapshot::CommandId;
use crate::include::xlogdefs::Lsn;

/// The key of the tuple-cid map: where the tuple lives (reorderbuffer.c
/// ReorderBufferTupleCidKey).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct TupleCidKey {
    pub locator: RelFileLocator,
    pub block: u32,
    pub offset: u16,
}

/// One entry of the tuple-cid map (reorderbuffer.c ReorderBufferTupleCidEnt).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TupleCidEnt {
    pub cmin: CommandId,
    pub cmax: CommandId,
    pub combocid: CommandId,
}

/// One NEW_CID record's contribution to its top-level transaction's tuple-cid list
/// (reorderbuffer.c ReorderBufferAddNewTupleCids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TupleCid {
    pub lsn: Lsn,
    pub key: TupleCidKey,
    pub cmin: CommandId,
    pub cmax: CommandId,
    pub combocid: CommandId,
}
