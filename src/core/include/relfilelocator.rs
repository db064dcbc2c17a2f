//! storage/relfilelocator.h `RelFileLocator` (relfilenode.h `RelFileNode` up to 15).

/// A `RelFileLocator` (`RelFileNode` up to 15): tablespace, database, relfilenumber.
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
pub struct RelFileLocator {
    pub spc_oid: u32,
    pub db_oid: u32,
    pub rel_number: u32,
}
