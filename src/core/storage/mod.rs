//! Storage: PostgreSQL's src/include/storage/ and src/backend/storage/ (page layout).

pub mod bufpage;
