//! snapbuild.c's historic snapshots: SnapBuildBuildSnapshot, the snapshot the builder
//! hands out (SnapBuildGetOrBuildSnapshot), and SnapBuildProcessChange, which gives a
//! transaction its base snapshot.

use crate::include::snapbuild::{BuiltSnapshot, SnapBuildState, SnapshotOrigin};
use crate::include::snapshot::HistoricSnapshot;
use crate::include::transam::{self, TransactionId};
use crate::include::xlogdefs::Lsn;
use crate::replication::snapbuild::SnapBuild;

impl SnapBuild {
    /// Re-runs snapbuild.c SnapBuildBuildSnapshot on the builder as it stands.
    pub fn build_snapshot(&self, built_at: Option<Lsn>, origin: SnapshotOrigin) -> BuiltSnapshot {
        BuiltSnapshot {
            snapshot: HistoricSnapshot::build(self.xmin, self.xmax, &self.committed_xip),
            built_at,
            origin,
        }
    }

    /// The historic snapshot the builder hands out now: `builder->snapshot` when one is
    /// built, else the one SnapBuildBuildSnapshot would build (SnapBuildGetOrBuildSnapshot).
    /// There is none before FULL_SNAPSHOT: the state is returned instead.
    pub fn historic_snapshot(&self) -> Result<BuiltSnapshot, SnapBuildState> {
        if self.state < SnapBuildState::FullSnapshot {
            return Err(self.state);
        }
        Ok(self
            .snapshot
            .clone()
            .unwrap_or_else(|| self.build_snapshot(None, SnapshotOrigin::BuiltNow)))
    }

    /// Re-runs snapbuild.c SnapBuildProcessChange for a data change of `x` at `lsn`:
    /// whether the change is decoded, giving the transaction a base snapshot if needed.
    pub fn process_change(&mut self, x: TransactionId, lsn: Lsn) -> bool {
        if self.state < SnapBuildState::FullSnapshot {
            return false;
        }
        if self.state < SnapBuildState::Consistent && transam::precedes(x, self.next_phase_at) {
            return false;
        }
        if !self.reorder.has_base_snapshot(x) {
            if self.snapshot.is_none() {
                self.snapshot =
                    Some(self.build_snapshot(Some(lsn), SnapshotOrigin::FirstChange(x)));
            }
            let xmin = *self.snapshot_xmin.get_or_insert(self.xmin);
            self.reorder.set_base_snapshot(x, lsn, xmin);
        }
        true
    }
}
