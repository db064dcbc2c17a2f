//! The one seam where PostgreSQL major versions differ.
//!
//! Not a PostgreSQL header: it stands where the server has `PG_VERSION_NUM`
//! (pg_config.h) and the `#if`s of each major's sources. Every rule that changes between
//! majors is a method here, so the state machine and the on-disk codec ask one place.
//! Sources: each major's `snapbuild.c` (and, from 18, `snapbuild_internal.h`),
//! `decode.c` and `reorderbuffer.c`.

/// The PostgreSQL release whose rules the replay follows: a major (14..=18) and its minor
/// release. Most rules change between majors only; where a minor release changed one (a
/// back-patched fix), the method says which minors, as observed on the real servers of
/// every minor release the project tests (`PGSNAP_MINORS=all scripts/test.sh`).
///
/// The extension reads it at run time from the server's `server_version_num` (a library
/// built against one minor's headers runs on every minor of its major).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct PgVersion {
    pub major: u32,
    pub minor: u32,
}

/// The newest minor release of each major the rules were checked on (the default test
/// servers): what [`PgVersion::newest`] means.
const NEWEST_MINOR: [(u32, u32); 5] = [(14, 23), (15, 19), (16, 15), (17, 11), (18, 6)];

impl PgVersion {
    /// `major.minor`.
    pub const fn new(major: u32, minor: u32) -> Self {
        PgVersion { major, minor }
    }

    /// The newest minor release of `major` this project was checked on (for callers that
    /// know only the major, e.g. the pure core's own tests).
    pub fn newest(major: u32) -> Self {
        let minor = NEWEST_MINOR
            .iter()
            .find(|(m, _)| *m == major)
            .map_or(0, |(_, n)| *n);
        PgVersion { major, minor }
    }

    /// From `PG_VERSION_NUM` / `server_version_num` (e.g. 180006 → 18.6, 150019 → 15.19).
    pub fn from_version_num(num: u32) -> Self {
        PgVersion {
            major: num / 10000,
            minor: num % 10000,
        }
    }

    /// Whether this release is `major.minor` or a later minor of the same major.
    fn at_least_minor(self, major: u32, minor: u32) -> bool {
        self.major == major && self.minor >= minor
    }

    /// The server's `SNAPBUILD_VERSION`: 4 up to 15 (no catalog-change array on disk),
    /// 5 in 16 (adds `catchange`), 6 from 17 (adds `in_slot_creation` to the serialized
    /// builder). Checked against files written by 14.22, 15.19, 16.15, 17.11 and 18.6.
    pub fn snapbuild_version(self) -> u32 {
        match self.major {
            0..=15 => 4,
            16 => 5,
            _ => 6,
        }
    }

    /// Branch b) of SnapBuildFindSnapshot is refused while a slot is being created. From
    /// 17 the builder keeps `in_slot_creation` (and serializes it); the minor releases of
    /// 14, 15 and 16 this project runs on (14.22, 15.19, 16.15) refuse it too, without the
    /// field: a creation waiting in BUILDING passed RUNNING_XACTS records whose `.snap`
    /// files another slot had already written and did not restore them (real-server check
    /// in pgrx-tests, `s8`). Older minor releases did restore.
    pub fn restore_checks_in_slot_creation(self) -> bool {
        true
    }

    /// 14 and 15 keep the xids of the running-xacts record that a restore used
    /// (`InitialRunningXacts`) in memory to recognise catalog-modifying transactions
    /// that began before the restart; 16+ serialize `catchange` instead.
    pub fn remembers_initial_running_xacts(self) -> bool {
        self.major <= 15
    }

    /// Two-phase decoding of a prepared transaction the reorder buffer knows but that has
    /// no changes to replay (no base snapshot, e.g. it only locked rows): whether COMMIT
    /// PREPARED / ROLLBACK PREPARED still reach the output plugin (ReorderBufferFinishPrepared).
    /// A minor release changed it: observed on the real servers (pgrx-tests `scenarios`
    /// f2, every minor the registry serves) they are sent by all of 14 (14.22, 14.23), by
    /// 15.17–15.18, 16.13–16.14, 17.9–17.10 and 18.3–18.4; not by 15.19, 16.15, 17.11 and
    /// 18.6. (18.5 was not available to test; it is taken to behave like 18.4, as 17.10,
    /// of the same release round, does.)
    pub fn finishes_prepared_without_changes(self) -> bool {
        match self.major {
            14 => true,
            15 => !self.at_least_minor(15, 19),
            16 => !self.at_least_minor(16, 15),
            17 => !self.at_least_minor(17, 11),
            18 => !self.at_least_minor(18, 6),
            _ => false,
        }
    }

    /// Two-phase decoding, the PREPARE of such a transaction without changes: whether
    /// ReorderBufferPrepare still sends a bare PREPARE (the 18.3 sources do: it sends the
    /// prepare whenever none was sent, after a replay that returned at once). Observed: 18.3
    /// and 18.4 send it; 18.6 does not, nor does any minor of 14–17 tested.
    pub fn prepares_without_changes(self) -> bool {
        self.major == 18 && !self.at_least_minor(18, 6)
    }

    /// A fast-forward decoder (`pg_replication_slot_advance`) still gives a transaction its
    /// base snapshot at its first change (SnapBuildProcessChange before the fast_forward
    /// check in heap, heap2 and logical-message decoding), so the slot's catalog_xmin
    /// candidate rests on the oldest base snapshot as for any decoder: 17 and later. Up to
    /// 16 those functions return at once in fast-forward mode, no transaction gets a base
    /// snapshot, and the candidate is the RUNNING_XACTS's oldest running xid. Observed:
    /// the random workload's advance predictions on 14.23, 15.19, 16.15 (catalog_xmin 118
    /// higher than a base snapshot would hold) against 17.11 and 18.6.
    pub fn fast_forward_builds_base_snapshots(self) -> bool {
        self.major >= 17
    }

    /// Whether the serialized builder carries the `catchange` array.
    pub fn serializes_catchange(self) -> bool {
        self.snapbuild_version() >= 5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(PgVersion::from_version_num(180006), PgVersion::newest(18));
        assert_eq!(PgVersion::from_version_num(170010), PgVersion::new(17, 10));
        assert_eq!(PgVersion::newest(14), PgVersion::new(14, 23));
        // the rules a minor release changed, on both sides of the change
        for (v, finishes, prepares) in [
            (PgVersion::new(14, 22), true, false),
            (PgVersion::new(14, 23), true, false),
            (PgVersion::new(15, 18), true, false),
            (PgVersion::new(15, 19), false, false),
            (PgVersion::new(16, 14), true, false),
            (PgVersion::new(16, 15), false, false),
            (PgVersion::new(17, 10), true, false),
            (PgVersion::new(17, 11), false, false),
            (PgVersion::new(18, 3), true, true),
            (PgVersion::new(18, 4), true, true),
            (PgVersion::new(18, 6), false, false),
        ] {
            assert_eq!(v.finishes_prepared_without_changes(), finishes, "{v:?}");
            assert_eq!(v.prepares_without_changes(), prepares, "{v:?}");
        }
        assert!(!PgVersion::new(16, 15).fast_forward_builds_base_snapshots());
        assert!(PgVersion::new(17, 9).fast_forward_builds_base_snapshots());
        assert_eq!(PgVersion::newest(15).snapbuild_version(), 4);
        assert_eq!(PgVersion::newest(16).snapbuild_version(), 5);
        assert_eq!(PgVersion::newest(17).snapbuild_version(), 6);
        assert_eq!(PgVersion::newest(18).snapbuild_version(), 6);
        assert!(PgVersion::newest(15).remembers_initial_running_xacts());
        assert!(!PgVersion::newest(16).remembers_initial_running_xacts());
    }
}
