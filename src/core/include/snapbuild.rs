//! replication/snapbuild.h's `SnapBuildState`, and `builder->snapshot` (the historic
//! snapshot snapbuild.c hands out) with where and why it was built, which the reorder
//! buffer and the decoder both pass around.

use crate::include::snapshot::HistoricSnapshot;
use crate::include::transam::TransactionId;
use crate::include::xlogdefs::Lsn;

/// snapbuild.h `SnapBuildState`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum SnapBuildState {
    /// `SNAPBUILD_START` (-1).
    #[serde(rename = "start")]
    Start,
    /// `SNAPBUILD_BUILDING_SNAPSHOT` (0).
    #[serde(rename = "building")]
    BuildingSnapshot,
    /// `SNAPBUILD_FULL_SNAPSHOT` (1).
    #[serde(rename = "full")]
    FullSnapshot,
    /// `SNAPBUILD_CONSISTENT` (2).
    #[serde(rename = "consistent")]
    Consistent,
}

impl SnapBuildState {
    /// From the C enum's integer value.
    pub fn from_raw(v: i32) -> Option<Self> {
        match v {
            -1 => Some(Self::Start),
            0 => Some(Self::BuildingSnapshot),
            1 => Some(Self::FullSnapshot),
            2 => Some(Self::Consistent),
            _ => None,
        }
    }
    /// The C enum's integer value.
    pub fn raw(self) -> i32 {
        match self {
            Self::Start => -1,
            Self::BuildingSnapshot => 0,
            Self::FullSnapshot => 1,
            Self::Consistent => 2,
        }
    }
    /// The name contrib pg_logicalinspect prints: `start|building|full|consistent`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::BuildingSnapshot => "building",
            Self::FullSnapshot => "full",
            Self::Consistent => "consistent",
        }
    }

    /// The name pg_logicalinspect gives a raw state value read from a `.snap` file:
    /// [`SnapBuildState::as_str`], or `unknown state` for any other value.
    pub fn name_of_raw(raw: i32) -> &'static str {
        Self::from_raw(raw).map_or("unknown state", Self::as_str)
    }

    /// The state's name in snapbuild.h, without its `SNAPBUILD_` prefix
    /// (`BUILDING_SNAPSHOT`): how the diagnosis' sentences name it.
    pub fn c_name(self) -> &'static str {
        match self {
            Self::Start => "START",
            Self::BuildingSnapshot => "BUILDING_SNAPSHOT",
            Self::FullSnapshot => "FULL_SNAPSHOT",
            Self::Consistent => "CONSISTENT",
        }
    }
}

/// Why the builder built the snapshot it currently hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SnapshotOrigin {
    /// SnapBuildProcessChange: the first decoded change of `xid` found none.
    FirstChange(TransactionId),
    /// SnapBuildCommitTxn: the catalog-modifying commit of `xid`.
    CatalogCommit(TransactionId),
    /// SnapBuildRestore: a serialized snapshot was adopted.
    Restored,
    /// Not built by the replay: SnapBuildBuildSnapshot run on the builder as it stands
    /// (what SnapBuildGetOrBuildSnapshot would do now).
    BuiltNow,
}

/// `builder->snapshot` with its provenance.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BuiltSnapshot {
    pub snapshot: HistoricSnapshot,
    /// The LSN of the record at which it was built (None when [`SnapshotOrigin::BuiltNow`]).
    pub built_at: Option<Lsn>,
    pub origin: SnapshotOrigin,
}
