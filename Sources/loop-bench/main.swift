import LoopSupport

#if canImport(Glibc)
import Glibc
#endif

// loop-bench: EffectLoop's throughput and memory, each workload beside a raw baseline measured in
// the same run. `--json` prints one JSON object per workload per line; `--quick` runs small sizes.

let arguments = Array(CommandLine.arguments.dropFirst())
// The cluster's processes, for w11 and the end-to-end test, are this executable too.
if arguments.first == "cluster-node" { exit(await runClusterNode(arguments)) }
if arguments.first == "cluster-send" { exit(await runClusterSend(arguments)) }
// The durable fault test's process.
if arguments.first == "durable-node" { exit(await runDurableNode(arguments)) }
if arguments.first == "compacting-node" { exit(await runCompactingNode(arguments)) }
let json = arguments.contains("--json")
let sizes = arguments.contains("--quick") ? Sizes.quick : Sizes.full
let only = arguments.firstIndex(of: "--only").flatMap { arguments.indices.contains($0 + 1) ? arguments[$0 + 1] : nil }
let known: Set<String> = [
    "--json", "--quick", "--help", "--only", "--no-header", "w1", "w2", "w2s", "w3", "w3s", "w4", "w5", "w6", "w7",
    "w8", "w9", "w10", "w11", "w12", "w13", "w14", "w15", "w16", "w17", "--postgres",
]
// The value after --postgres is a conninfo, not an option.
let options = arguments.enumerated().filter { $0.offset == 0 || arguments[$0.offset - 1] != "--postgres" }.map(
    \.element
)
if arguments.contains("--help") || !options.allSatisfy(known.contains) {
    let usage =
        "usage: loop-bench [--json] [--quick] [--only w1|w2|w2s|w3|w3s|w4|w5|w6|w7|w8|w9|w10|w11|w12|w13|w14|w15|w16|w17] [--postgres CONNINFO]\n"
    if arguments.contains("--help") { print(usage, terminator: "") } else { Measure.printError(usage) }
    exit(arguments.contains("--help") ? 0 : 64)
}

func format(_ rate: Double) -> String {
    switch rate {
    case 1e6...: String(Int((rate / 1e5).rounded())).inserting(".", fromEnd: 1) + "M/s"
    case 1e3...: String(Int((rate / 1e2).rounded())).inserting(".", fromEnd: 1) + "k/s"
    default: String(Int(rate.rounded())) + "/s"
    }
}

extension String {
    func inserting(_ separator: Character, fromEnd offset: Int) -> String {
        var copy = self
        copy.insert(separator, at: copy.index(copy.endIndex, offsetBy: -offset))
        return copy
    }
}

func jsonNumber(_ value: Double) -> String {
    value.isFinite ? (value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)) : "null"
}

func emit(_ outcome: Outcome) {
    let ratio = outcome.rawPerSecond > 0 ? outcome.perSecond / outcome.rawPerSecond : 0
    if json {
        var fields = [
            #""workload":"\#(outcome.workload)""#,
            #""per_sec_min":\#(jsonNumber((outcome.rates.min() ?? outcome.perSecond).rounded()))"#,
            #""per_sec":\#(jsonNumber(outcome.perSecond.rounded()))"#,
            #""per_sec_max":\#(jsonNumber((outcome.rates.max() ?? outcome.perSecond).rounded()))"#,
            #""raw_per_sec":\#(jsonNumber(outcome.rawPerSecond.rounded()))"#,
            #""x_raw":\#(jsonNumber((ratio * 10_000).rounded() / 10_000))"#,
            #""runs":\#(outcome.runs)"#,
            #""ok":\#(outcome.ok)"#,
        ]
        for (key, value) in outcome.extra {
            fields.append(#""\#(key)":\#(jsonNumber((value * 1_000).rounded() / 1_000))"#)
        }
        print("{" + fields.joined(separator: ",") + "}")
    } else {
        let extras = outcome.extra.map { "\($0.key)=\(String(format: $0.value))" }.joined(separator: " ")
        let name = outcome.workload.padding(4)
        let rate = format(outcome.perSecond).padding(10)
        let raw = (outcome.rawPerSecond > 0 ? format(outcome.rawPerSecond) : "-").padding(10)
        let x = (outcome.rawPerSecond > 0 ? String(format: ratio) : "-").padding(8)
        print("\(name) \(rate) \(raw) \(x) \(outcome.ok ? "ok  " : "FAIL") \(outcome.title)  \(extras)")
    }
}

extension String {
    init(format value: Double) {
        let scaled = (value * 1_000).rounded() / 1_000
        self = scaled == scaled.rounded() && abs(scaled) < 1e15 ? String(Int(scaled)) : String(scaled)
    }

    func padding(_ width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}

if !json && !arguments.contains("--no-header") {
    print(
        "loop-bench: medians of \(sizes.runs) runs; raw = the same update in a plain loop (w2: handler called directly)"
    )
    print("name per_sec    raw        x_raw    check workload")
}
var failed = false
let workloads: [(name: String, run: (Sizes) async throws -> Outcome)] = [
    ("w9", Workloads.w9), ("w1", Workloads.w1), ("w2", { try await Workloads.w2($0, synchronous: false) }),
    ("w2s", { try await Workloads.w2($0, synchronous: true) }), ("w3", Workloads.w3), ("w3s", Workloads.w3s),
    ("w4", Workloads.w4),
    ("w5", Workloads.w5), ("w6", Workloads.w6), ("w7", Workloads.w7), ("w8", Workloads.w8), ("w10", Workloads.w10),
    ("w11", Workloads.w11), ("w12", Workloads.w12), ("w13", Workloads.w13), ("w14", Workloads.w14),
    ("w15", Workloads.w15),
    ("w16", Workloads.w16), ("w17", Workloads.w17),
]
/// The workloads that measure memory: each runs in a fresh process of its own (this executable with
/// `--only`), so no page an earlier workload freed hides what it takes.
let measuresMemory: Set<String> = ["w3", "w3s", "w6", "w9"]

for (name, workload) in workloads where only == nil || only == name {
    if only == nil && measuresMemory.contains(name) {
        failed = !runFresh(name) || failed
        continue
    }
    do {
        let outcome = try await workload(sizes)
        emit(outcome)
        failed = failed || !outcome.ok
    } catch {
        Measure.printError("loop-bench: a workload failed: \(error)\n")
        failed = true
    }
}

/// Runs workload `name` in a new process of this executable and passes its output on; whether it passed.
func runFresh(_ name: String) -> Bool {
    var words = [CommandLine.arguments[0], "--only", name, "--no-header"]
    if json { words.append("--json") }
    if arguments.contains("--quick") { words.append("--quick") }
    var path = [CChar](repeating: 0, count: 4_096)
    let length = readlink("/proc/self/exe", &path, path.count - 1)
    let executable =
        length > 0 ? String(decoding: path.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self) : words[0]
    // What this process printed so far comes first.
    fflush(nil)
    var failure: Int32 = 0
    guard
        let pid = ChildProcess.spawn(
            executable,
            words,
            output: .inherited,
            options: ChildProcess.Options(endsWithThisProcess: true),
            failure: &failure
        )
    else {
        Measure.printError("loop-bench: cannot start \(executable) for \(name)\n")
        return false
    }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return status == 0
}

exit(failed ? 1 : 0)
