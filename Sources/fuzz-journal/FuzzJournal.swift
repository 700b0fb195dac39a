import LoopCore
import LoopDemo
import LoopJournal

// A libFuzzer target for the journal: any bytes, read as a journal of the demo's events and
// replayed, must give records and warnings, or a `JournalError` naming the problem, never a crash.
// Built like fuzz-commands: `make fuzz` for libFuzzer, a corpus replayer otherwise.

/// Reads one input as a journal and replays it; the fuzzer's entry point.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJournal(_ start: UnsafeRawPointer?, _ count: Int) -> Int32 {
    let bytes = start.map { Array(UnsafeRawBufferPointer(start: $0, count: count)) } ?? []
    FuzzEntry.journal(bytes)
    return 0
}

#if !FUZZING
@main
enum ReplayCorpus {
    static func main() {
        FuzzCorpus.replay(CommandLine.arguments.dropFirst()) { FuzzEntry.journal($0) }
    }
}
#endif
