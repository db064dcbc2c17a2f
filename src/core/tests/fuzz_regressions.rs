//! Inputs the fuzzer (fuzz/, `scripts/fuzz.sh`) found crashing, each run again through the
//! calls its target made. Files in `tests/fuzz_inputs/`, named `TARGET-HASH.bin` as the
//! fuzzer saved them.

use snapbuild_core::server_log::{
    decoders, lines_for, writers_of, LogEvent, ReplayStart, StderrParser,
};
use snapbuild_core::Lsn;

fn input(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_inputs")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A real server log window (a decoder start, its builder lines) with a few bytes
/// mutated: `writers_of` asked about a file modified at the end of time overflowed
/// `mtime_ms + CLOCK_SLACK_MS` (an arithmetic-overflow panic in debug builds).
#[test]
fn server_log_writers_at_the_end_of_time() {
    let text = String::from_utf8_lossy(&input("server_log-9695dbe2f87fbf50.bin")).into_owned();
    let mut p = StderrParser::default();
    let mut events: Vec<LogEvent> = text.lines().flat_map(|l| p.line(l)).collect();
    events.extend(p.finish());
    assert!(events
        .iter()
        .any(|e| matches!(e, LogEvent::DecoderStart { .. })));
    let decs = decoders(&events);
    let mut asked = 0;
    for e in &events {
        if let LogEvent::Builder(b) = e {
            let at = b.lsn().unwrap_or(Lsn(0));
            let _ = lines_for(
                &decs,
                None,
                &b.message,
                b.detail.as_deref(),
                ReplayStart::new(Lsn(0x100), b.lsn(), false),
            );
            let _ = writers_of(&events, at, at, i64::MAX);
            asked += 1;
        }
    }
    assert!(asked > 0, "the input has builder lines");
}
