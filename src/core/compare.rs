//! Does the `.snap` file the replay predicts agree with the one the server wrote at the
//! same LSN, and if not, why not.
//!
//! Not a PostgreSQL file: the server never compares two serialized snapshots. This is the
//! project's judgement of the replay against the server. The server's facts come in as
//! plain inputs (its file, decoded by `replication::snapbuild_ondisk`), beside the file
//! the replay predicts and the [`SerializeContext`] the replay recorded for it.

use crate::replication::snapbuild::SerializeContext;
use crate::replication::snapbuild_ondisk::SnapBuildOnDisk;

/// How a predicted `.snap` compares with the one the server wrote at the same LSN.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FileComparison {
    /// Fields any consistent builder must agree on at this LSN: state, next_phase_at, the
    /// catchange xids (the running catalog-modifying transactions), and xmin whenever both
    /// the replay and the writer took it from the previous RUNNING_XACTS record.
    pub differences: Vec<String>,
    /// Fields that depend on how the writing decoder got here: xmin after a restore
    /// (branch b keeps the file's older xmin until the next record), xmax (moved only by
    /// catalog commits seen since the decoder became consistent, or set by branch a) and
    /// the committed xids (collected since then). They match when the replay and the
    /// writer started alike; otherwise they are reported here, not held against the
    /// replay.
    pub writer_dependent: Vec<String>,
}

impl FileComparison {
    /// No difference in the fields every builder must agree on.
    pub fn agrees(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Compares the file the replay predicts with the file the server wrote at the same LSN.
/// `ctx` says where the predicted xmin came from.
///
/// Not compared at all, because they describe the process that wrote the file rather
/// than the WAL position: start_decoding_at, last_serialized_snapshot, in_slot_creation,
/// building_full_snapshot, initial_xmin_horizon, two_phase_at, committed.xcnt_space and
/// includes_all_transactions.
pub fn compare_with_server(
    predicted: &SnapBuildOnDisk,
    server: &SnapBuildOnDisk,
    ctx: Option<SerializeContext>,
) -> FileComparison {
    let (p, s) = (&predicted.builder, &server.builder);
    let mut c = FileComparison::default();
    if p.state != s.state {
        c.differences
            .push(format!("state {} vs {}", p.state, s.state));
    }
    if p.xmin != s.xmin {
        // The writer serialized at the previous RUNNING_XACTS (so took its xmin from it)
        // and so did we: the xmins must be equal.
        let both_from_record = ctx.is_some_and(|c| {
            !c.xmin_from_restore
                && c.prev_running_xacts.is_valid()
                && s.last_serialized_snapshot == c.prev_running_xacts
        });
        let d = format!("xmin {} vs {}", p.xmin, s.xmin);
        if both_from_record {
            c.differences.push(d);
        } else {
            c.writer_dependent.push(d);
        }
    }
    if p.next_phase_at != s.next_phase_at {
        c.differences.push(format!(
            "next_phase_at {} vs {}",
            p.next_phase_at, s.next_phase_at
        ));
    }
    if predicted.catchange_xip != server.catchange_xip {
        c.differences.push(format!(
            "catchange {:?} vs {:?}",
            predicted.catchange_xip, server.catchange_xip
        ));
    }
    if p.xmax != s.xmax {
        c.writer_dependent
            .push(format!("xmax {} vs {}", p.xmax, s.xmax));
    }
    let sorted = |v: &[u32]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    if sorted(&predicted.committed_xip) != sorted(&server.committed_xip) {
        c.writer_dependent.push(format!(
            "committed {:?} vs {:?}",
            predicted.committed_xip, server.committed_xip
        ));
    }
    c
}

/// The bytes the replay would write at this LSN, with the fields that describe the
/// writing decoder taken from the server's file, and likewise xmin, xmax or the committed
/// xids where `cmp` found them writer-dependent (the committed xids otherwise in the
/// writer's insertion order). If the result equals the file byte for byte, every other
/// field, the layout, the padding and the CRC-32C agree. `None` for a version without a
/// known layout.
pub fn bytes_with_writer_fields(
    predicted: &SnapBuildOnDisk,
    server: &SnapBuildOnDisk,
    cmp: &FileComparison,
) -> Option<Vec<u8>> {
    let mut p = predicted.clone();
    let (b, s) = (&mut p.builder, &server.builder);
    b.start_decoding_at = s.start_decoding_at;
    b.last_serialized_snapshot = s.last_serialized_snapshot;
    b.in_slot_creation = s.in_slot_creation;
    b.building_full_snapshot = s.building_full_snapshot;
    b.initial_xmin_horizon = s.initial_xmin_horizon;
    b.two_phase_at = s.two_phase_at;
    b.committed_xcnt_space = s.committed_xcnt_space;
    b.includes_all_transactions = s.includes_all_transactions;
    let flagged = |field: &str| cmp.writer_dependent.iter().any(|d| d.starts_with(field));
    if flagged("xmin ") {
        b.xmin = s.xmin;
    }
    if flagged("xmax ") {
        b.xmax = s.xmax;
    }
    let sorted = |v: &[u32]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    if flagged("committed ") || sorted(&p.committed_xip) == sorted(&server.committed_xip) {
        p.committed_xip = server.committed_xip.clone();
    }
    p.encode()
}
