//! The one seam where PostgreSQL major versions differ.
//!
//! Not a PostgreSQL header: it stands where the server has `PG_VERSION_NUM`
//! (pg_config.h) and the `#if`s of each major's sources. Every rule that changes between
//! majors is a method here, so the state machine and the on-disk codec ask one place.
//! Sources: each major's `snapbuild.c` (and, from 18, `snapbuild_internal.h`),
//! `decode.c` and `reorderbuffer.c`.

/// The PostgreSQL major version whose rules the replay follows (14..=18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct PgMajor(pub u32);

impl PgMajor {
    /// From `PG_VERSION_NUM` (e.g. 180006 → 18, 150019 → 15).
    pub fn from_version_num(num: u32) -> Self {
        PgMajor(num / 10000)
    }

    /// The server's `SNAPBUILD_VERSION`: 4 up to 15 (no catalog-change array on disk),
    /// 5 in 16 (adds `catchange`), 6 from 17 (adds `in_slot_creation` to the serialized
    /// builder). Checked against files written by 14.22, 15.19, 16.15, 17.11 and 18.6.
    pub fn snapbuild_version(self) -> u32 {
        match self.0 {
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
        self.0 <= 15
    }

    /// Two-phase decoding of a prepared transaction the reorder buffer knows but that has
    /// no changes to replay (no base snapshot, e.g. it only locked rows): whether COMMIT
    /// PREPARED / ROLLBACK PREPARED still reach the output plugin. Observed on the real
    /// servers (pgrx-tests `scenarios`): 14.22 sends them; 15.19, 16.15, 17.11 and 18.6
    /// send nothing for such a transaction (nor a PREPARE, which no version sends for it;
    /// the 18.3 sources would still send a bare PREPARE, a later minor release dropped it).
    pub fn finishes_prepared_without_changes(self) -> bool {
        self.0 <= 14
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
        assert_eq!(PgMajor::from_version_num(180006), PgMajor(18));
        assert_eq!(PgMajor(15).snapbuild_version(), 4);
        assert_eq!(PgMajor(16).snapbuild_version(), 5);
        assert_eq!(PgMajor(17).snapbuild_version(), 6);
        assert_eq!(PgMajor(18).snapbuild_version(), 6);
        assert!(PgMajor(15).remembers_initial_running_xacts());
        assert!(!PgMajor(16).remembers_initial_running_xacts());
    }
}
