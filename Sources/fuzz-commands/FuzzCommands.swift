import LoopDemo

// A libFuzzer target for the demo's command parser: any bytes, as a line of input, must give an
// event (a command, `.ignored`, or `.invalidInput` naming the problem), never a crash.
//
// `make fuzz` builds this with `--sanitize=fuzzer -DFUZZING`: libFuzzer provides `main` and calls
// `LLVMFuzzerTestOneInput`. A normal build makes a corpus replayer instead: it runs each file given
// as an argument through the same entry point once.

/// Parses one input; the fuzzer's entry point.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCommand(_ start: UnsafeRawPointer?, _ count: Int) -> Int32 {
    let bytes = start.map { Array(UnsafeRawBufferPointer(start: $0, count: count)) } ?? []
    FuzzEntry.command(bytes)
    return 0
}

#if !FUZZING
@main
enum ReplayCorpus {
    static func main() {
        FuzzCorpus.replay(CommandLine.arguments.dropFirst()) { FuzzEntry.command($0) }
    }
}
#endif
