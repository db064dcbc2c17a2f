//! Logical decoding: PostgreSQL's src/backend/replication/logical/.

pub mod decode;
pub mod reorderbuffer;
