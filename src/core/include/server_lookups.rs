//! What only the server can answer, as the core asks it.
//!
//! Not a PostgreSQL header: the seam through which an adapter answers the questions the
//! visibility rule and the reorder buffer put to the running server (transam.c
//! TransactionIdDidCommit, heapam.c HeapTupleGetUpdateXid, and the files of
//! `pg_logical/mappings` that reorderbuffer.c UpdateLogicalMappings reads). Tests answer
//! them from plain tables.

use crate::include::transam::TransactionId;

/// A failed server lookup (a mapping file that cannot be listed, read or parsed).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LookupError {
    /// Could not open, list or read: the server's `errcode_for_file_access` texts.
    Io(String),
    /// A name or a length the server refuses.
    Corrupt(String),
}

impl LookupError {
    pub fn message(&self) -> &str {
        match self {
            LookupError::Io(m) | LookupError::Corrupt(m) => m,
        }
    }
}

/// What the visibility rules ask of the server: commit-log status, multixact members,
/// and the heap-rewrite mapping files.
pub trait ServerLookups {
    /// transam.c TransactionIdDidCommit.
    fn did_commit(&mut self, xid: TransactionId) -> bool;
    /// heapam.c HeapTupleGetUpdateXid: the updating member of a multixact xmax.
    fn update_xid(&mut self, multi: TransactionId, infomask: u16) -> TransactionId;
    /// The entries of `pg_logical/mappings` (every name, in directory order).
    fn mapping_file_names(&mut self) -> Result<Vec<String>, LookupError>;
    /// The bytes of one mapping file.
    fn mapping_file(&mut self, name: &str) -> Result<Vec<u8>, LookupError>;
}
