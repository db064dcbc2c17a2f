//! snapbuild.c's snapshot serialization support: SnapBuildRestore (adopting a consistent
//! `.snap` file), SnapBuildSerializationPoint (shutdown checkpoints and end of recovery)
//! and SnapBuildSerialize (the file the server writes).

use crate::include::snapbuild::{SnapBuildState, SnapshotOrigin};
use crate::include::transam::{self, INVALID_TRANSACTION_ID};
use crate::include::xlogdefs::Lsn;
use crate::replication::snapbuild::{
    msg, Branch, Level, RestoreResult, SerializeContext, ServerMessage, SnapBuild, Step,
};
use crate::replication::snapbuild_ondisk::{
    OnDiskBuilder, OnDiskError, SnapBuildOnDisk, SNAPBUILD_MAGIC,
};

impl SnapBuild {
    /// Re-runs snapbuild.c SnapBuildRestore: adopt a consistent serialized snapshot at
    /// `lsn` if there is one whose xmin is not below `initial_xmin_horizon`.
    pub(super) fn restore(
        &mut self,
        lsn: Lsn,
        restore: &mut dyn FnMut(Lsn) -> RestoreResult,
    ) -> Result<bool, OnDiskError> {
        if self.state == SnapBuildState::Consistent {
            return Ok(false);
        }
        let Some(ondisk) = restore(lsn)? else {
            return Ok(false);
        };
        let b = &ondisk.builder;
        if b.state < SnapBuildState::Consistent.raw() {
            return Ok(false);
        }
        if transam::precedes(b.xmin, self.initial_xmin_horizon) {
            return Ok(false);
        }
        self.next_phase_at = INVALID_TRANSACTION_ID;
        self.xmin = b.xmin;
        self.xmax = b.xmax;
        self.state = SnapBuildState::from_raw(b.state).unwrap_or(SnapBuildState::Consistent);
        if !ondisk.committed_xip.is_empty() {
            self.committed_xcnt_space = ondisk.committed_xip.len() as u64;
            self.committed_xip = ondisk.committed_xip.clone();
        } else {
            self.committed_xip.clear();
        }
        self.catchange_xip = ondisk.catchange_xip.clone();
        self.xmin_from_restore = true;
        self.snapshot_xmin = Some(self.xmin);
        self.snapshot = Some(self.build_snapshot(Some(lsn), SnapshotOrigin::Restored));
        self.reorder.current_restart_decoding_lsn = lsn;
        Ok(true)
    }

    /// Re-runs snapbuild.c SnapBuildSerializationPoint (XLOG_CHECKPOINT_SHUTDOWN and
    /// XLOG_END_OF_RECOVERY): restore when not consistent, serialize when consistent.
    pub fn serialization_point(
        &mut self,
        lsn: Lsn,
        restore: &mut dyn FnMut(Lsn) -> RestoreResult,
    ) -> Result<Step, (Step, OnDiskError)> {
        let before = self.state;
        if self.state < SnapBuildState::Consistent {
            let mut s = self.step(Branch::SerializationPointRestore, before);
            match self.restore(lsn, restore) {
                Ok(true) => {
                    s.restored_from = Some(lsn);
                    s.message = Some(restore_message(lsn));
                }
                Ok(false) => {}
                Err(e) => return Err((s, e)),
            }
            Ok(s)
        } else {
            let mut s = self.step(Branch::SerializationPointSerialize, before);
            s.serialize_context = Some(self.serialize_context());
            s.serialized = Some(self.serialize(lsn));
            Ok(s)
        }
    }

    pub(super) fn serialize_context(&self) -> SerializeContext {
        SerializeContext {
            prev_running_xacts: self.prev_running_xacts,
            xmin_from_restore: self.xmin_from_restore,
            prev_oldest_running_xid: self.prev_oldest_running_xid,
        }
    }

    /// Re-runs snapbuild.c SnapBuildSerialize's content: the file the server writes at
    /// `lsn` (and remembers `lsn` as the last serialization point).
    pub fn serialize(&mut self, lsn: Lsn) -> SnapBuildOnDisk {
        let version = self.version.snapbuild_version();
        let catchange = if self.version.serializes_catchange() {
            self.reorder.catalog_changes_xacts()
        } else {
            Vec::new()
        };
        let file = SnapBuildOnDisk {
            magic: SNAPBUILD_MAGIC,
            checksum: 0,
            version,
            length: 0,
            builder: OnDiskBuilder {
                state: self.state.raw(),
                xmin: self.xmin,
                xmax: self.xmax,
                start_decoding_at: self.start_decoding_at,
                two_phase_at: self.two_phase_at,
                initial_xmin_horizon: self.initial_xmin_horizon,
                building_full_snapshot: self.building_full_snapshot,
                in_slot_creation: (version >= 6).then_some(self.in_slot_creation),
                last_serialized_snapshot: self.last_serialized_snapshot,
                next_phase_at: self.next_phase_at,
                committed_xcnt: self.committed_xip.len() as u64,
                committed_xcnt_space: self.committed_xcnt_space,
                includes_all_transactions: self.includes_all_transactions,
                catchange_xcnt: (version >= 5).then_some(catchange.len() as u64),
            },
            committed_xip: self.committed_xip.clone(),
            catchange_xip: catchange,
        };
        // Fill in checksum and length exactly as written.
        let file = match file.encode() {
            Some(bytes) => SnapBuildOnDisk::decode(&bytes, version).unwrap_or(file),
            None => file,
        };
        self.last_serialized_snapshot = lsn;
        self.reorder.current_restart_decoding_lsn = lsn;
        file
    }
}

/// The LOG line SnapBuildRestore emits when it adopts a file.
pub(super) fn restore_message(lsn: Lsn) -> ServerMessage {
    msg(
        Level::Log,
        format_args!("logical decoding found consistent point at {lsn}"),
        format_args!("Logical decoding will begin using saved snapshot."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::include::standbydefs::RunningXacts;
    use crate::replication::snapbuild::fixtures::{consistent_file, no_file, params};

    #[test]
    fn restore_refuses_xmin_below_horizon_and_inconsistent_files() {
        let file = consistent_file(900, 901);
        let mut p = params(18);
        p.in_slot_creation = false;
        p.initial_xmin_horizon = 950;
        let mut b = SnapBuild::new(&p);
        let mut with_file = |_: Lsn| -> RestoreResult { Ok(Some(file.clone())) };
        let s = b
            .process_running_xacts(
                Lsn(0x500),
                &RunningXacts::new(960, 970, &[960]),
                &mut with_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::C1);
    }

    #[test]
    fn consistent_builder_serializes_before_moving_xmin() {
        let mut b = SnapBuild::new(&params(18));
        b.process_running_xacts(Lsn(1), &RunningXacts::new(700, 700, &[]), &mut no_file)
            .unwrap();
        let s = b
            .process_running_xacts(
                Lsn(0x900),
                &RunningXacts::new(705, 710, &[705]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::Serialize);
        let f = s.serialized.unwrap();
        assert_eq!((f.builder.xmin, f.builder.xmax), (700, 700));
        assert_eq!(b.xmin, 705);
        assert_eq!(b.last_serialized_snapshot, Lsn(0x900));
        // The prediction is a valid file.
        let bytes = f.encode().unwrap();
        assert_eq!(bytes.len(), 144);
        assert!(SnapBuildOnDisk::decode(&bytes, 6).is_ok());
    }
}
