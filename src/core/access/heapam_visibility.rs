//! Re-runs access/heap/heapam_visibility.c HeapTupleSatisfiesHistoricMVCC: the rule by
//! which logical decoding judges a catalog tuple visible under a historic snapshot, and
//! which branch decided.
//!
//! Everything the server knows and the core cannot (the commit log, multixact members,
//! the files in `pg_logical/mappings`) comes in through [`ServerLookups`]; the
//! decoding transaction's own command ids through the reorder buffer's [`CidResolver`]
//! (reorderbuffer.c ResolveCminCmaxDuringDecoding).

use crate::include::htup_details::infomask::*;
use crate::include::htup_details::TupleHeader;
use crate::include::reorderbuffer::{TupleCidEnt, TupleCidKey};
use crate::include::server_lookups::{LookupError, ServerLookups};
use crate::include::snapshot::{HistoricSnapshot, INVALID_COMMAND_ID};
use crate::include::transam::{self, TransactionId};
use crate::replication::reorderbuffer::CidResolver;

/// Which test decided the inserting side of HeapTupleSatisfiesHistoricMVCC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum XminBranch {
    /// The xmin-invalid hint: the inserter aborted. Invisible.
    Invalid,
    /// One of the decoding transaction's xids, but the tuple-cid map has no entry.
    /// Invisible.
    OursUnresolved,
    /// Ours, inserted at or after `curcid`. Invisible.
    OursCminAtOrAfterCurcid,
    /// Ours, inserted before `curcid`. Go on to xmax.
    OursCminBeforeCurcid,
    /// Before the snapshot's xmin and hinted committed. Go on to xmax.
    BeforeXminHintCommitted,
    /// Before the snapshot's xmin, no hint, the commit log says committed. Go on.
    BeforeXminClogCommitted,
    /// Before the snapshot's xmin and not committed. Invisible.
    BeforeXminNotCommitted,
    /// At or after the snapshot's xmax. Invisible.
    AtOrAfterXmax,
    /// In [xmin, xmax) and a committed catalog-modifying xid (`xip`). Go on.
    InXip,
    /// In [xmin, xmax) but not in `xip`. Invisible.
    InRangeNotInXip,
}

impl XminBranch {
    pub const ALL: [XminBranch; 10] = [
        XminBranch::Invalid,
        XminBranch::OursUnresolved,
        XminBranch::OursCminAtOrAfterCurcid,
        XminBranch::OursCminBeforeCurcid,
        XminBranch::BeforeXminHintCommitted,
        XminBranch::BeforeXminClogCommitted,
        XminBranch::BeforeXminNotCommitted,
        XminBranch::AtOrAfterXmax,
        XminBranch::InXip,
        XminBranch::InRangeNotInXip,
    ];

    /// The position in [`Self::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn label(self) -> &'static str {
        match self {
            XminBranch::Invalid => "xmin invalid",
            XminBranch::OursUnresolved => "xmin ours, unresolved",
            XminBranch::OursCminAtOrAfterCurcid => "xmin ours, cmin >= curcid",
            XminBranch::OursCminBeforeCurcid => "xmin ours, cmin < curcid",
            XminBranch::BeforeXminHintCommitted => "xmin < snapshot xmin, committed hint",
            XminBranch::BeforeXminClogCommitted => "xmin < snapshot xmin, clog committed",
            XminBranch::BeforeXminNotCommitted => "xmin < snapshot xmin, not committed",
            XminBranch::AtOrAfterXmax => "xmin >= snapshot xmax",
            XminBranch::InXip => "xmin in xip",
            XminBranch::InRangeNotInXip => "xmin in [xmin, xmax), not in xip",
        }
    }
}

/// Which test decided the deleting side (reached only when the xmin side let the
/// tuple through).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum XmaxBranch {
    /// The xmax-invalid hint: nobody (still) deletes it. Visible.
    Invalid,
    /// The xmax only locks the tuple. Visible.
    LockedOnly,
    /// One of the decoding transaction's xids, the map has no entry. Visible.
    OursUnresolved,
    /// Ours, the map entry has no cmax. Visible.
    OursNoCmax,
    /// Ours, deleted at or after `curcid`. Visible.
    OursCmaxAtOrAfterCurcid,
    /// Ours, deleted before `curcid`. Invisible.
    OursCmaxBeforeCurcid,
    /// Before the snapshot's xmin and hinted committed. Invisible.
    BeforeXminHintCommitted,
    /// Before the snapshot's xmin, the commit log says committed. Invisible.
    BeforeXminClogCommitted,
    /// Before the snapshot's xmin and not committed. Visible.
    BeforeXminNotCommitted,
    /// At or after the snapshot's xmax. Visible.
    AtOrAfterXmax,
    /// In [xmin, xmax) and in `xip`. Invisible.
    InXip,
    /// In [xmin, xmax) and not in `xip`. Visible.
    InRangeNotInXip,
}

impl XmaxBranch {
    pub const ALL: [XmaxBranch; 12] = [
        XmaxBranch::Invalid,
        XmaxBranch::LockedOnly,
        XmaxBranch::OursUnresolved,
        XmaxBranch::OursNoCmax,
        XmaxBranch::OursCmaxAtOrAfterCurcid,
        XmaxBranch::OursCmaxBeforeCurcid,
        XmaxBranch::BeforeXminHintCommitted,
        XmaxBranch::BeforeXminClogCommitted,
        XmaxBranch::BeforeXminNotCommitted,
        XmaxBranch::AtOrAfterXmax,
        XmaxBranch::InXip,
        XmaxBranch::InRangeNotInXip,
    ];

    /// The position in [`Self::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn label(self) -> &'static str {
        match self {
            XmaxBranch::Invalid => "xmax invalid",
            XmaxBranch::LockedOnly => "xmax locked only",
            XmaxBranch::OursUnresolved => "xmax ours, unresolved",
            XmaxBranch::OursNoCmax => "xmax ours, no cmax",
            XmaxBranch::OursCmaxAtOrAfterCurcid => "xmax ours, cmax >= curcid",
            XmaxBranch::OursCmaxBeforeCurcid => "xmax ours, cmax < curcid",
            XmaxBranch::BeforeXminHintCommitted => "xmax < snapshot xmin, committed hint",
            XmaxBranch::BeforeXminClogCommitted => "xmax < snapshot xmin, clog committed",
            XmaxBranch::BeforeXminNotCommitted => "xmax < snapshot xmin, not committed",
            XmaxBranch::AtOrAfterXmax => "xmax >= snapshot xmax",
            XmaxBranch::InXip => "xmax in xip",
            XmaxBranch::InRangeNotInXip => "xmax in [xmin, xmax), not in xip",
        }
    }
}

/// HeapTupleSatisfiesHistoricMVCC's answer for one tuple and how it got there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HistoricVerdict {
    pub visible: bool,
    pub xmin_branch: XminBranch,
    /// None when the xmin side already decided.
    pub xmax_branch: Option<XmaxBranch>,
    /// The updating xid of a multixact xmax, when it was looked up.
    pub update_xid: Option<TransactionId>,
    /// The (cmin, cmax) the map resolved on the path taken, if it was consulted.
    pub resolved: Option<TupleCidEnt>,
}

impl HistoricVerdict {
    /// "xmin branch" or "xmin branch; xmax branch".
    pub fn branch_text(&self) -> String {
        self.branch_str().to_owned()
    }

    /// [`Self::branch_text`] without an allocation per call: the 10 × 13 texts are
    /// formatted once, on first use, and kept for the life of the process.
    pub fn branch_str(&self) -> &'static str {
        const XMAX_SLOTS: usize = XmaxBranch::ALL.len() + 1;
        static TEXTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let texts = TEXTS.get_or_init(|| {
            let mut v = Vec::with_capacity(XminBranch::ALL.len() * XMAX_SLOTS);
            for m in XminBranch::ALL {
                v.push(m.label().to_owned());
                for x in XmaxBranch::ALL {
                    v.push(format!("{}; {}", m.label(), x.label()));
                }
            }
            v
        });
        let xmax = self.xmax_branch.map_or(0, |x| x.index() + 1);
        &texts[self.xmin_branch.index() * XMAX_SLOTS + xmax]
    }
}

/// Re-runs heapam_visibility.c HeapTupleSatisfiesHistoricMVCC for the tuple with
/// header `t` at `key`, under `snapshot`.
///
/// The inserting xid is judged first: an invalid hint hides the tuple; one of the
/// decoding transaction's own xids needs the tuple-cid map and a cmin below `curcid`;
/// an xid older than the snapshot's xmin must have committed (hint bit first, then the
/// commit log); one at or after xmax is hidden; one in between must be in `xip`. Then
/// the deleting xid: an invalid hint or a mere lock leaves the tuple visible; a
/// multixact is replaced by its updating member; the same four tests follow, with the
/// opposite outcomes, and an own deletion counts only before `curcid`. No hint bit is
/// set here, as the server sets none on this path.
pub fn satisfies_historic_mvcc(
    t: &TupleHeader,
    key: &TupleCidKey,
    snapshot: &HistoricSnapshot,
    cids: &mut CidResolver,
    lookups: &mut dyn ServerLookups,
) -> Result<HistoricVerdict, LookupError> {
    let xmin = t.xmin();
    let mut v = HistoricVerdict {
        visible: false,
        xmin_branch: XminBranch::Invalid,
        xmax_branch: None,
        update_xid: None,
        resolved: None,
    };
    // The inserting side.
    let go_on = if t.xmin_invalid() {
        v.xmin_branch = XminBranch::Invalid;
        false
    } else if snapshot.in_subxip(xmin) {
        match cids.resolve(key, snapshot, lookups)? {
            None => {
                v.xmin_branch = XminBranch::OursUnresolved;
                false
            }
            Some(ent) => {
                v.resolved = Some(ent);
                if ent.cmin >= snapshot.curcid {
                    v.xmin_branch = XminBranch::OursCminAtOrAfterCurcid;
                    false
                } else {
                    v.xmin_branch = XminBranch::OursCminBeforeCurcid;
                    true
                }
            }
        }
    } else if transam::precedes(xmin, snapshot.xmin) {
        if t.xmin_committed() {
            v.xmin_branch = XminBranch::BeforeXminHintCommitted;
            true
        } else if lookups.did_commit(xmin) {
            v.xmin_branch = XminBranch::BeforeXminClogCommitted;
            true
        } else {
            v.xmin_branch = XminBranch::BeforeXminNotCommitted;
            false
        }
    } else if transam::follows_or_equals(xmin, snapshot.xmax) {
        v.xmin_branch = XminBranch::AtOrAfterXmax;
        false
    } else if snapshot.in_xip(xmin) {
        v.xmin_branch = XminBranch::InXip;
        true
    } else {
        v.xmin_branch = XminBranch::InRangeNotInXip;
        false
    };
    if !go_on {
        return Ok(v);
    }

    // The deleting side.
    let (visible, branch) = if t.infomask & HEAP_XMAX_INVALID != 0 {
        (true, XmaxBranch::Invalid)
    } else if t.xmax_is_locked_only() {
        (true, XmaxBranch::LockedOnly)
    } else {
        let xmax = if t.xmax_is_multi() {
            let u = lookups.update_xid(t.raw_xmax, t.infomask);
            v.update_xid = Some(u);
            u
        } else {
            t.raw_xmax
        };
        if snapshot.in_subxip(xmax) {
            match cids.resolve(key, snapshot, lookups)? {
                None => (true, XmaxBranch::OursUnresolved),
                Some(ent) => {
                    v.resolved = Some(ent);
                    if ent.cmax == INVALID_COMMAND_ID {
                        (true, XmaxBranch::OursNoCmax)
                    } else if ent.cmax >= snapshot.curcid {
                        (true, XmaxBranch::OursCmaxAtOrAfterCurcid)
                    } else {
                        (false, XmaxBranch::OursCmaxBeforeCurcid)
                    }
                }
            }
        } else if transam::precedes(xmax, snapshot.xmin) {
            if t.infomask & HEAP_XMAX_COMMITTED != 0 {
                (false, XmaxBranch::BeforeXminHintCommitted)
            } else if lookups.did_commit(xmax) {
                (false, XmaxBranch::BeforeXminClogCommitted)
            } else {
                (true, XmaxBranch::BeforeXminNotCommitted)
            }
        } else if transam::follows_or_equals(xmax, snapshot.xmax) {
            (true, XmaxBranch::AtOrAfterXmax)
        } else if snapshot.in_xip(xmax) {
            (false, XmaxBranch::InXip)
        } else {
            (true, XmaxBranch::InRangeNotInXip)
        }
    };
    v.visible = visible;
    v.xmax_branch = Some(branch);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::include::relfilelocator::RelFileLocator;
    use crate::include::reorderbuffer::TupleCid;
    use crate::include::xlogdefs::Lsn;
    use crate::replication::reorderbuffer::TupleCidHash;
    use std::collections::{BTreeMap, BTreeSet};

    /// Server lookups from plain tables.
    #[derive(Default)]
    struct Fake {
        committed: BTreeSet<TransactionId>,
        updaters: BTreeMap<TransactionId, TransactionId>,
        files: Vec<(String, Vec<u8>)>,
        did_commit_calls: Vec<TransactionId>,
    }

    impl ServerLookups for Fake {
        fn did_commit(&mut self, x: TransactionId) -> bool {
            self.did_commit_calls.push(x);
            // transam.c: the bootstrap and frozen xids count as committed.
            x == 1 || x == 2 || self.committed.contains(&x)
        }
        fn update_xid(&mut self, multi: TransactionId, _: u16) -> TransactionId {
            self.updaters.get(&multi).copied().unwrap_or(0)
        }
        fn mapping_file_names(&mut self) -> Result<Vec<String>, LookupError> {
            Ok(self.files.iter().map(|f| f.0.clone()).collect())
        }
        fn mapping_file(&mut self, name: &str) -> Result<Vec<u8>, LookupError> {
            self.files
                .iter()
                .find(|f| f.0 == name)
                .map(|f| f.1.clone())
                .ok_or_else(|| LookupError::Io(format!("could not open file \"{name}\"")))
        }
    }

    const LOC: RelFileLocator = RelFileLocator {
        spc_oid: 1663,
        db_oid: 5,
        rel_number: 1249,
    };

    fn key(block: u32, offset: u16) -> TupleCidKey {
        TupleCidKey {
            locator: LOC,
            block,
            offset,
        }
    }

    fn cid(k: TupleCidKey, cmin: u32, cmax: u32) -> TupleCid {
        TupleCid {
            lsn: Lsn(1),
            key: k,
            cmin,
            cmax,
            combocid: INVALID_COMMAND_ID,
        }
    }

    /// xmin 100, xmax 200, 150 committed in between; decoding transaction 160 with
    /// subtransaction 165 at curcid 3.
    fn snap() -> HistoricSnapshot {
        HistoricSnapshot::build(100, 200, &[170, 150]).copy_for(160, &[165], 3)
    }

    fn resolver(entries: &[TupleCid]) -> CidResolver {
        CidResolver {
            hash: Some(TupleCidHash::build(entries)),
            rel_oid: 1249,
            db_oid: 5,
            applied_files: vec![],
        }
    }

    fn judge(t: TupleHeader, entries: &[TupleCid], fake: &mut Fake) -> HistoricVerdict {
        satisfies_historic_mvcc(&t, &key(0, 1), &snap(), &mut resolver(entries), fake).unwrap()
    }

    fn live(xmin: u32, mask: u16) -> TupleHeader {
        TupleHeader::with(xmin, 0, mask | HEAP_XMAX_INVALID)
    }

    #[test]
    fn branch_str_is_every_combination() {
        for (i, m) in XminBranch::ALL.into_iter().enumerate() {
            assert_eq!(m.index(), i);
            let mut v = HistoricVerdict {
                visible: false,
                xmin_branch: m,
                xmax_branch: None,
                update_xid: None,
                resolved: None,
            };
            assert_eq!(v.branch_str(), m.label());
            for (j, x) in XmaxBranch::ALL.into_iter().enumerate() {
                assert_eq!(x.index(), j);
                v.xmax_branch = Some(x);
                assert_eq!(v.branch_str(), format!("{}; {}", m.label(), x.label()));
                assert_eq!(v.branch_text(), v.branch_str());
            }
        }
    }

    #[test]
    fn xmin_invalid() {
        let v = judge(live(150, HEAP_XMIN_INVALID), &[], &mut Fake::default());
        assert_eq!((v.visible, v.xmin_branch), (false, XminBranch::Invalid));
        // Frozen carries the invalid bit too but is not invalid.
        let v = judge(live(150, HEAP_XMIN_FROZEN), &[], &mut Fake::default());
        assert_eq!(v.xmin_branch, XminBranch::BeforeXminHintCommitted);
        assert!(v.visible);
    }

    #[test]
    fn xmin_ours() {
        let k = key(0, 1);
        let v = judge(live(160, 0), &[], &mut Fake::default());
        assert_eq!(
            (v.visible, v.xmin_branch),
            (false, XminBranch::OursUnresolved)
        );
        let v = judge(
            live(165, 0),
            &[cid(k, 3, INVALID_COMMAND_ID)],
            &mut Fake::default(),
        );
        assert_eq!(
            (v.visible, v.xmin_branch),
            (false, XminBranch::OursCminAtOrAfterCurcid)
        );
        let v = judge(
            live(165, 0),
            &[cid(k, 2, INVALID_COMMAND_ID)],
            &mut Fake::default(),
        );
        assert_eq!(
            (v.visible, v.xmin_branch, v.xmax_branch),
            (
                true,
                XminBranch::OursCminBeforeCurcid,
                Some(XmaxBranch::Invalid)
            )
        );
        // No map at all: unresolved, whatever the raw command id says.
        let mut t = live(160, 0);
        t.raw_cid = 0;
        let v = satisfies_historic_mvcc(
            &t,
            &k,
            &snap(),
            &mut CidResolver::default(),
            &mut Fake::default(),
        )
        .unwrap();
        assert_eq!(v.xmin_branch, XminBranch::OursUnresolved);
    }

    #[test]
    fn xmin_before_snapshot_xmin() {
        let mut f = Fake::default();
        let v = judge(live(90, HEAP_XMIN_COMMITTED), &[], &mut f);
        assert_eq!(v.xmin_branch, XminBranch::BeforeXminHintCommitted);
        assert!(
            f.did_commit_calls.is_empty(),
            "the hint spares the clog lookup"
        );
        f.committed.insert(91);
        let v = judge(live(91, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch),
            (true, XminBranch::BeforeXminClogCommitted)
        );
        let v = judge(live(92, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch),
            (false, XminBranch::BeforeXminNotCommitted)
        );
        assert_eq!(f.did_commit_calls, vec![91, 92]);
        // Bootstrap tuples (xmin 1) count as committed before any normal xmin.
        let v = judge(live(1, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch),
            (true, XminBranch::BeforeXminClogCommitted)
        );
    }

    #[test]
    fn xmin_horizons() {
        let mut f = Fake::default();
        // A committed hint does not help a tuple from after xmax.
        let v = judge(live(200, HEAP_XMIN_COMMITTED), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch),
            (false, XminBranch::AtOrAfterXmax)
        );
        let v = judge(live(150, 0), &[], &mut f);
        assert_eq!((v.visible, v.xmin_branch), (true, XminBranch::InXip));
        // Committed in the clog, but not a catalog change the builder counted.
        f.committed.insert(151);
        let v = judge(live(151, HEAP_XMIN_COMMITTED), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch),
            (false, XminBranch::InRangeNotInXip)
        );
        assert!(f.did_commit_calls.is_empty());
    }

    fn dead(xmax: u32, mask: u16) -> TupleHeader {
        TupleHeader::with(90, xmax, mask | HEAP_XMIN_COMMITTED)
    }

    #[test]
    fn xmax_invalid_and_locks() {
        let mut f = Fake::default();
        let v = judge(
            dead(150, HEAP_XMAX_INVALID | HEAP_XMAX_COMMITTED),
            &[],
            &mut f,
        );
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::Invalid))
        );
        let v = judge(
            dead(150, HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_KEYSHR_LOCK),
            &[],
            &mut f,
        );
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::LockedOnly))
        );
        // An exclusive lock that is not a multixact is a lock even without LOCK_ONLY.
        let v = judge(dead(150, HEAP_XMAX_EXCL_LOCK), &[], &mut f);
        assert_eq!(v.xmax_branch, Some(XmaxBranch::LockedOnly));
        // A multixact of lockers only.
        let v = judge(
            dead(
                7,
                HEAP_XMAX_IS_MULTI | HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_SHR_LOCK,
            ),
            &[],
            &mut f,
        );
        assert_eq!(v.xmax_branch, Some(XmaxBranch::LockedOnly));
        assert_eq!(v.update_xid, None);
    }

    #[test]
    fn xmax_multi_uses_the_updater() {
        let mut f = Fake::default();
        f.updaters.insert(7, 150);
        let v = judge(
            dead(7, HEAP_XMAX_IS_MULTI | HEAP_XMAX_KEYSHR_LOCK),
            &[],
            &mut f,
        );
        assert_eq!(v.update_xid, Some(150));
        assert_eq!((v.visible, v.xmax_branch), (false, Some(XmaxBranch::InXip)));
        // The same multi id read as a plain xid would be "before xmin, not committed".
        let v = judge(dead(7, 0), &[], &mut f);
        assert_eq!(v.xmax_branch, Some(XmaxBranch::BeforeXminNotCommitted));
    }

    #[test]
    fn xmax_ours() {
        let k = key(0, 1);
        let mut f = Fake::default();
        let v = judge(dead(160, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::OursUnresolved))
        );
        let v = judge(
            dead(165, 0),
            &[cid(k, INVALID_COMMAND_ID, INVALID_COMMAND_ID)],
            &mut f,
        );
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::OursNoCmax))
        );
        let v = judge(dead(160, 0), &[cid(k, INVALID_COMMAND_ID, 3)], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::OursCmaxAtOrAfterCurcid))
        );
        let v = judge(dead(160, 0), &[cid(k, INVALID_COMMAND_ID, 2)], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (false, Some(XmaxBranch::OursCmaxBeforeCurcid))
        );
        // Inserted and deleted by us (a combo CID on disk): cmin from the first NEW_CID,
        // cmax from the later one.
        let entries = [cid(k, 0, INVALID_COMMAND_ID), cid(k, 0, 1)];
        let v = judge(TupleHeader::with(160, 160, HEAP_COMBOCID), &entries, &mut f);
        assert_eq!(
            (v.visible, v.xmin_branch, v.xmax_branch),
            (
                false,
                XminBranch::OursCminBeforeCurcid,
                Some(XmaxBranch::OursCmaxBeforeCurcid)
            )
        );
        assert_eq!(v.resolved.map(|e| (e.cmin, e.cmax)), Some((0, 1)));
    }

    #[test]
    fn xmax_horizons() {
        let mut f = Fake::default();
        let v = judge(dead(95, HEAP_XMAX_COMMITTED), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (false, Some(XmaxBranch::BeforeXminHintCommitted))
        );
        f.committed.insert(96);
        let v = judge(dead(96, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (false, Some(XmaxBranch::BeforeXminClogCommitted))
        );
        let v = judge(dead(97, 0), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::BeforeXminNotCommitted))
        );
        let v = judge(dead(250, HEAP_XMAX_COMMITTED), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::AtOrAfterXmax))
        );
        let v = judge(dead(170, 0), &[], &mut f);
        assert_eq!((v.visible, v.xmax_branch), (false, Some(XmaxBranch::InXip)));
        let v = judge(dead(171, HEAP_XMAX_COMMITTED), &[], &mut f);
        assert_eq!(
            (v.visible, v.xmax_branch),
            (true, Some(XmaxBranch::InRangeNotInXip))
        );
    }

    #[test]
    fn wraparound() {
        // xmin just before the wrap, xmax just after it; 4294967290 committed.
        let s = HistoricSnapshot::build(u32::MAX - 10, 20, &[u32::MAX - 5, 10]);
        let mut f = Fake::default();
        let mut r = CidResolver::default();
        let k = key(0, 1);
        let mut check =
            |t: TupleHeader| satisfies_historic_mvcc(&t, &k, &s, &mut r, &mut f).unwrap();
        // 10 follows xmin across the wrap and is in xip.
        let v = check(live(10, 0));
        assert_eq!((v.visible, v.xmin_branch), (true, XminBranch::InXip));
        // u32::MAX - 20 precedes xmin.
        let v = check(live(u32::MAX - 20, HEAP_XMIN_COMMITTED));
        assert_eq!(v.xmin_branch, XminBranch::BeforeXminHintCommitted);
        // 25 is past xmax; 3 (the first normal xid after the wrap) is in range, not in xip.
        assert_eq!(
            check(live(25, HEAP_XMIN_COMMITTED)).xmin_branch,
            XminBranch::AtOrAfterXmax
        );
        assert_eq!(check(live(3, 0)).xmin_branch, XminBranch::InRangeNotInXip);
        // xmax u32::MAX - 5 is in xip even though it is numerically above xmax.
        let v = check(TupleHeader::with(10, u32::MAX - 5, 0));
        assert_eq!((v.visible, v.xmax_branch), (false, Some(XmaxBranch::InXip)));
        let v = check(TupleHeader::with(10, 21, 0));
        assert_eq!(v.xmax_branch, Some(XmaxBranch::AtOrAfterXmax));
        // Frozen xmin (2) precedes any normal xmin, wrapped or not.
        let v = check(TupleHeader::with(
            u32::MAX - 1,
            0,
            HEAP_XMIN_FROZEN | HEAP_XMAX_INVALID,
        ));
        assert_eq!(
            (v.visible, v.xmin_branch),
            (true, XminBranch::BeforeXminHintCommitted)
        );
    }

    fn mapping_bytes(old: TupleCidKey, new: TupleCidKey) -> Vec<u8> {
        let mut b = Vec::new();
        for l in [old.locator, new.locator] {
            b.extend(l.spc_oid.to_ne_bytes());
            b.extend(l.db_oid.to_ne_bytes());
            b.extend(l.rel_number.to_ne_bytes());
        }
        for k in [old, new] {
            b.extend(((k.block >> 16) as u16).to_ne_bytes());
            b.extend((k.block as u16).to_ne_bytes());
            b.extend(k.offset.to_ne_bytes());
        }
        b
    }

    #[test]
    fn rewritten_tuples_resolve_through_mapping_files() {
        let old = key(3, 7);
        let moved = TupleCidKey {
            locator: RelFileLocator {
                rel_number: 99999,
                ..LOC
            },
            block: 0,
            offset: 2,
        };
        let mut f = Fake::default();
        f.committed.insert(180); // the VACUUM FULL that rewrote the heap
        f.files = vec![
            ("map-5-4e1-0_100-a0-b4".into(), mapping_bytes(old, moved)), // mapped 160, by 180
            ("map-5-4e1-0_90-a0-b5".into(), mapping_bytes(moved, old)),  // by 181: aborted
            ("map-5-4e0-0_100-a0-b4".into(), mapping_bytes(old, moved)), // another relation
            ("other".into(), vec![]),
        ];
        let s = snap();
        let mut r = resolver(&[cid(old, 1, INVALID_COMMAND_ID)]);
        let t = TupleHeader::with(160, 0, HEAP_XMAX_INVALID);
        let v = satisfies_historic_mvcc(&t, &moved, &s, &mut r, &mut f).unwrap();
        assert_eq!(v.xmin_branch, XminBranch::OursCminBeforeCurcid);
        assert_eq!(r.applied_files, vec!["map-5-4e1-0_100-a0-b4".to_owned()]);
        assert_eq!(f.did_commit_calls, vec![180, 181]);
        // Another decoding transaction does not get the mapping.
        let other = HistoricSnapshot::build(100, 200, &[]).copy_for(161, &[], 3);
        let mut r = resolver(&[cid(old, 1, INVALID_COMMAND_ID)]);
        let t = TupleHeader::with(161, 0, HEAP_XMAX_INVALID);
        let v = satisfies_historic_mvcc(&t, &moved, &other, &mut r, &mut f).unwrap();
        assert_eq!(v.xmin_branch, XminBranch::OursUnresolved);
        // A truncated file is the server's read error, after the whole records.
        let t = TupleHeader::with(160, 0, HEAP_XMAX_INVALID);
        let mut bytes = mapping_bytes(old, moved);
        bytes.extend([0u8; 5]);
        f.files = vec![("map-5-4e1-0_100-a0-b4".into(), bytes)];
        let mut r = resolver(&[cid(old, 1, INVALID_COMMAND_ID)]);
        let e = satisfies_historic_mvcc(&t, &moved, &s, &mut r, &mut f).unwrap_err();
        assert!(e.message().contains("read 5 instead of 36 bytes"), "{e:?}");
        assert!(r.peek(&moved).is_some());
        // An unparsable map- name is an error as on the server.
        f.files = vec![("map-zz".into(), vec![])];
        let mut r = resolver(&[cid(old, 1, INVALID_COMMAND_ID)]);
        let e = satisfies_historic_mvcc(&t, &moved, &s, &mut r, &mut f).unwrap_err();
        assert_eq!(
            e,
            LookupError::Corrupt("could not parse filename \"map-zz\"".into())
        );
    }
}
