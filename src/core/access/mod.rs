//! Table access: PostgreSQL's src/backend/access/ (heap visibility, heap rewrites).

pub mod heapam_visibility;
pub mod rewriteheap;
pub mod xactdesc;
