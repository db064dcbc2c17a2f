//! The tuple-cid lookups of reorderbuffer.c: [`TupleCidHash`] is the
//! `(relfilelocator, ctid) → (cmin, cmax)` map that ReorderBufferBuildTupleCidHash builds from
//! the NEW_CID records of the decoding transaction; [`CidResolver`] looks tuples up in it as
//! ResolveCminCmaxDuringDecoding does, applying heap-rewrite mapping files
//! (UpdateLogicalMappings) on a miss.

use rustc_hash::FxHashMap as HashMap;

use crate::access::rewriteheap::{
    parse_mapping_file_name, parse_mapping_records, RewriteMapping, REWRITE_MAPPING_SIZE,
};
use crate::include::reorderbuffer::{TupleCid, TupleCidEnt, TupleCidKey};
use crate::include::server_lookups::{LookupError, ServerLookups};
use crate::include::snapshot::HistoricSnapshot;

/// The tuple-cid map of one decoding transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TupleCidHash {
    map: HashMap<TupleCidKey, TupleCidEnt>,
}

impl TupleCidHash {
    /// Re-runs reorderbuffer.c ReorderBufferBuildTupleCidHash over the transaction's
    /// tuple-cid list, in list order: the first entry of a tuple gives cmin, later ones
    /// only replace cmax.
    pub fn build(entries: &[TupleCid]) -> Self {
        let mut map: HashMap<TupleCidKey, TupleCidEnt> =
            HashMap::with_capacity_and_hasher(entries.len(), Default::default());
        for e in entries {
            map.entry(e.key)
                .and_modify(|ent| ent.cmax = e.cmax)
                .or_insert(TupleCidEnt {
                    cmin: e.cmin,
                    cmax: e.cmax,
                    combocid: e.combocid,
                });
        }
        TupleCidHash { map }
    }

    /// One entry for one key (a what-if).
    pub fn single(key: TupleCidKey, ent: TupleCidEnt) -> Self {
        let mut map = HashMap::default();
        map.insert(key, ent);
        TupleCidHash { map }
    }

    pub fn get(&self, key: &TupleCidKey) -> Option<TupleCidEnt> {
        self.map.get(key).copied()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Re-runs reorderbuffer.c ApplyLogicalMappingFile for one file's records: a tuple
    /// the map knows at its old place is also known at its new place (an entry already
    /// at the new place is kept).
    pub fn apply_mappings(&mut self, records: &[RewriteMapping]) {
        for m in records {
            if let Some(ent) = self.map.get(&m.old).copied() {
                self.map.entry(m.new).or_insert(ent);
            }
        }
    }
}

/// The tuple-cid lookups of one scan: the decoding transaction's map (None when
/// ReorderBufferBuildTupleCidHash leaves it unset) and the relation being scanned.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct CidResolver {
    pub hash: Option<TupleCidHash>,
    /// `t_tableOid`: the mapping files are per relation.
    pub rel_oid: u32,
    /// MyDatabaseId, or 0 for a shared catalog (UpdateLogicalMappings's `dboid`).
    pub db_oid: u32,
    /// Mapping files applied so far (for the report).
    pub applied_files: Vec<String>,
}

impl CidResolver {
    /// Re-runs reorderbuffer.c ResolveCminCmaxDuringDecoding for the tuple at `key`:
    /// no map at all is "unresolved"; a miss applies the relation's rewrite mappings
    /// (UpdateLogicalMappings) once and looks again.
    pub fn resolve(
        &mut self,
        key: &TupleCidKey,
        snapshot: &HistoricSnapshot,
        lookups: &mut dyn ServerLookups,
    ) -> Result<Option<TupleCidEnt>, LookupError> {
        if self.hash.is_none() {
            return Ok(None);
        }
        if let Some(e) = self.hash.as_ref().and_then(|h| h.get(key)) {
            return Ok(Some(e));
        }
        self.update_logical_mappings(snapshot, lookups)?;
        Ok(self.hash.as_ref().and_then(|h| h.get(key)))
    }

    /// The entry the map holds for `key` now, without touching the mapping files.
    pub fn peek(&self, key: &TupleCidKey) -> Option<TupleCidEnt> {
        self.hash.as_ref().and_then(|h| h.get(key))
    }

    /// Re-runs reorderbuffer.c UpdateLogicalMappings: every `map-` file of this
    /// database and relation whose rewriting transaction committed and whose mapped
    /// xid is one of the decoding transaction's, applied in LSN order.
    pub fn update_logical_mappings(
        &mut self,
        snapshot: &HistoricSnapshot,
        lookups: &mut dyn ServerLookups,
    ) -> Result<(), LookupError> {
        let mut files = Vec::new();
        for name in lookups.mapping_file_names()? {
            if name == "." || name == ".." || !name.starts_with("map-") {
                continue;
            }
            let f = parse_mapping_file_name(&name).ok_or_else(|| {
                LookupError::Corrupt(format!("could not parse filename \"{name}\""))
            })?;
            if f.db_oid != self.db_oid || f.rel_oid != self.rel_oid {
                continue;
            }
            if !lookups.did_commit(f.create_xid) {
                continue;
            }
            if !snapshot.in_subxip(f.mapped_xid) {
                continue;
            }
            files.push(f);
        }
        files.sort_by_key(|f| f.lsn);
        for f in files {
            let bytes = lookups.mapping_file(&f.name)?;
            let (records, partial) = parse_mapping_records(&bytes);
            if let Some(h) = self.hash.as_mut() {
                h.apply_mappings(&records);
            }
            if let Some(n) = partial {
                return Err(LookupError::Io(format!(
                    "could not read from file \"pg_logical/mappings/{}\": read {n} instead of {REWRITE_MAPPING_SIZE} bytes",
                    f.name
                )));
            }
            self.applied_files.push(f.name);
        }
        Ok(())
    }
}
