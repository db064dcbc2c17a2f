//! Logical decoding: PostgreSQL's src/backend/replication/logical/.

pub mod reorderbuffer;
