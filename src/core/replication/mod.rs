//! Logical decoding: PostgreSQL's src/backend/replication/logical/.

pub mod converged;
pub mod decode;
pub mod logical;
pub mod message;
pub mod reorder_memory;
pub mod reorderbuffer;
pub mod shared_replays;
pub mod slot_invalidation;
pub mod snapbuild;
pub mod snapbuild_ondisk;
pub mod tuplecid;
